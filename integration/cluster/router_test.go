package cluster

import (
	"bufio"
	"encoding/csv"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// router is HAProxy with the shipped configuration, in the router's
// namespace.
type router struct {
	cmd  *exec.Cmd
	sock string // the runtime API
	log  *logBuffer
}

// startRouter starts HAProxy with deploy/kubernetes/router/haproxy.cfg as
// it is, the settings it takes from the environment set for this test:
// nodes is the name the test's DNS answers with the nodes' addresses.
func startRouter(t *testing.T, ns, nodes string) *router {
	t.Helper()
	run := t.TempDir()
	cfgDir := filepath.Join(repoRoot, "deploy/kubernetes/router")
	r := &router{sock: filepath.Join(run, "haproxy.sock"), log: &logBuffer{}}
	r.cmd = exec.Command("ip", "netns", "exec", ns, "haproxy", "-W", "-db", "-f", filepath.Join(cfgDir, "haproxy.cfg"))
	r.cmd.Env = append(os.Environ(),
		"CELLBLOCK_NODES="+nodes,
		"CELLBLOCK_RUN_DIR="+run,
		"CELLBLOCK_STATS_BIND=127.0.0.1:8404",
		"CELLBLOCK_ERRORS_DIR="+cfgDir,
	)
	r.cmd.Stdout, r.cmd.Stderr = r.log, r.log
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("start haproxy: %v", err)
	}
	t.Cleanup(func() {
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = r.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = r.cmd.Process.Kill()
			<-done
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := r.api("show info"); err == nil {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("haproxy's runtime API did not answer\n%s", r.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// api sends one command to the runtime API and returns the answer.
func (r *router) api(cmd string) (string, error) {
	c, err := net.DialTimeout("unix", r.sock, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, cmd+"\n"); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// serverStat is a server's line of `show stat`, by field name.
type serverStat map[string]string

// servers returns the backend's servers that have an address (the
// template's other slots are empty), by address.
func (r *router) servers(t *testing.T) map[string]serverStat {
	t.Helper()
	out, err := r.api("show stat")
	if err != nil {
		t.Fatalf("show stat: %v", err)
	}
	rd := csv.NewReader(strings.NewReader(strings.TrimPrefix(out, "# ")))
	rd.FieldsPerRecord = -1
	rows, err := rd.ReadAll()
	if err != nil {
		t.Fatalf("show stat: %v\n%s", err, out)
	}
	header := rows[0]
	states, err := r.api("show servers state nodes")
	if err != nil {
		t.Fatalf("show servers state: %v", err)
	}
	addrOf := map[string]string{} // server name -> address
	sc := bufio.NewScanner(strings.NewReader(states))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// be_id be_name srv_id srv_name srv_addr ...
		if len(f) > 4 && f[1] == "nodes" && f[4] != "-" && f[4] != "0.0.0.0" {
			addrOf[f[3]] = f[4]
		}
	}
	got := map[string]serverStat{}
	for _, row := range rows[1:] {
		if len(row) < 2 || row[0] != "nodes" || row[1] == "BACKEND" || row[1] == "FRONTEND" {
			continue
		}
		addr, ok := addrOf[row[1]]
		if !ok {
			continue
		}
		s := serverStat{}
		for i, name := range header {
			if i < len(row) {
				s[name] = row[i]
			}
		}
		got[addr] = s
	}
	return got
}

// int reads a numeric field of a server's line (empty is 0).
func (s serverStat) int(field string) int {
	n, _ := strconv.Atoi(s[field])
	return n
}

// waitStatus waits until the server at addr has a status that starts with
// want (UP, DOWN, ...).
func (r *router) waitStatus(t *testing.T, addr, want string, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		if s, ok := r.servers(t)[addr]; ok && strings.HasPrefix(s["status"], want) {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("router: server %s not %s after %v: %v\n%s", addr, want, timeout, r.servers(t)[addr], r.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// table returns the stick table: session id -> server id.
func (r *router) table(t *testing.T) map[string]string {
	t.Helper()
	out, err := r.api("show table nodes")
	if err != nil {
		t.Fatalf("show table: %v", err)
	}
	got := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var key, sid string
		for _, f := range strings.Fields(sc.Text()) {
			if v, ok := strings.CutPrefix(f, "key="); ok {
				key = v
			}
			if v, ok := strings.CutPrefix(f, "server_id="); ok {
				sid = v
			}
		}
		if key != "" {
			got[key] = sid
		}
	}
	return got
}

// logBuffer collects a process's output for failure messages.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.b.String()
	if len(s) > 8000 {
		s = "...\n" + s[len(s)-8000:]
	}
	return s
}

// serverAddrs maps the backend's server ids (as the stick table names
// them) to their addresses.
func (r *router) serverAddrs(t *testing.T) map[string]string {
	t.Helper()
	out, err := r.api("show servers state nodes")
	if err != nil {
		t.Fatalf("show servers state: %v", err)
	}
	got := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 4 && f[1] == "nodes" {
			got[f[2]] = f[4]
		}
	}
	return got
}
