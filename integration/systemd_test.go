package integration

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
)

// launchUnder starts cellblockd the way a service manager would: under the
// command prefix (which must exec the daemon in its own process, so that
// SIGTERM reaches it), with env added to the daemon's environment, its API
// expected on socket (its --socket unless args set one). The daemon is
// stopped with SIGTERM when the test ends.
func launchUnder(t *testing.T, prefix, env []string, socket string, args ...string) *Daemon {
	t.Helper()
	requireRoot(t)
	cfg, state := daemonConfig(t, socket, args...)
	cfg.Prefix, cfg.Env = prefix, env
	return launch(t, cfg, state)
}

// startUnder is launchUnder, then waits until the daemon is ready.
func startUnder(t *testing.T, prefix, env []string, socket string, args ...string) *Daemon {
	t.Helper()
	d := launchUnder(t, prefix, env, socket, args...)
	d.waitReady(t)
	return d
}

// socketDir is a directory for a test's sockets that others may enter.
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cellblock-it-sd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// TestSystemdSocketActivation starts the daemon through systemd's own
// activation protocol (LISTEN_PID, LISTEN_FDS, fd 3) with
// systemd-socket-activate, which listens, waits for the first connection
// and then execs the daemon, as systemd does with cellblockd.socket.
func TestSystemdSocketActivation(t *testing.T) {
	requireRoot(t)
	activate, err := exec.LookPath("systemd-socket-activate")
	if err != nil {
		t.Skip("systemd-socket-activate is missing (Debian package systemd; .ci/run installs it)")
	}
	dir := socketDir(t)
	activated := filepath.Join(dir, "activated.sock")
	own := filepath.Join(dir, "own.sock")
	d := launchUnder(t, []string{activate, "-l", activated, "--fdname=cellblockd"}, nil, activated, "--socket", own)
	// The daemon starts when the first connection arrives: this one, made
	// once the activator says it listens, which the daemon answers once
	// it serves. (The activator passes on no NOTIFY_SOCKET: the answer
	// is the sign that the daemon is ready.)
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := d.WaitLog(ctx, "Listening on "+activated); err != nil {
		t.Fatal(err)
	}
	if err := d.Client.Health(ctx); err != nil {
		t.Fatalf("the activated daemon did not answer: %v\n%s", err, d.Log())
	}

	res := runOK(t, d, &api.RunRequest{Code: "import os\nprint(sorted(k for k in os.environ if k.startswith(('LISTEN_', 'NOTIFY_', 'WATCHDOG_'))))"})
	if res.Stdout != "[]\n" {
		t.Errorf("the activation environment leaked into the run: %s", res.Stdout)
	}
	if _, err := os.Lstat(own); err == nil {
		t.Errorf("the daemon created its own socket %s although one was passed", own)
	}
	if !strings.Contains(d.Log(), "using the socket passed by systemd") {
		t.Errorf("the daemon did not say it used the passed socket:\n%s", d.Log())
	}
	d.Stop(t)
	// The socket belongs to the service manager: the daemon leaves it.
	if st, err := os.Lstat(activated); err != nil || st.Mode()&os.ModeSocket == 0 {
		t.Errorf("the daemon removed the activated socket: %v", err)
	}
}

// notifications collects what the daemon sends to NOTIFY_SOCKET.
type notifications struct {
	ch chan string
}

func listenNotify(t *testing.T, path string) *notifications {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	n := &notifications{ch: make(chan string, 1024)}
	go func() {
		buf := make([]byte, 4096)
		for {
			k, _, err := conn.ReadFromUnix(buf)
			if err != nil {
				close(n.ch)
				return
			}
			for _, line := range strings.Split(strings.TrimSpace(string(buf[:k])), "\n") {
				n.ch <- line
			}
		}
	}()
	return n
}

// await returns the messages received until want, failing after timeout.
func (n *notifications) await(t *testing.T, want string, timeout time.Duration) []string {
	t.Helper()
	var got []string
	deadline := time.After(timeout)
	for {
		select {
		case m, ok := <-n.ch:
			if !ok {
				t.Fatalf("notify socket closed waiting for %s; got %v", want, got)
			}
			got = append(got, m)
			if m == want {
				return got
			}
		case <-deadline:
			t.Fatalf("no %s within %v; got %v", want, timeout, got)
		}
	}
}

func TestSystemdNotifyReadyWatchdogStopping(t *testing.T) {
	dir := socketDir(t)
	sock := filepath.Join(dir, "cellblockd.sock")
	n := listenNotify(t, filepath.Join(dir, "notify.sock"))
	d := launchUnder(t, nil, []string{
		"NOTIFY_SOCKET=" + filepath.Join(dir, "notify.sock"),
		"WATCHDOG_USEC=400000", // ping every 200 ms
	}, sock)

	// READY=1 only once the daemon serves: the API answers right away.
	// (The watchdog is fed during start-up too.)
	for _, m := range n.await(t, "READY=1", 120*time.Second) {
		if m != "READY=1" && m != "WATCHDOG=1" {
			t.Errorf("unexpected notification before READY=1: %q", m)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	err := d.Client.Health(ctx)
	cancel()
	if err != nil {
		t.Fatalf("READY=1 was sent, but the API does not answer: %v\n%s", err, d.Log())
	}
	start := time.Now()
	pings := 0
	for pings < 3 {
		if m := n.await(t, "WATCHDOG=1", 2*time.Second); len(m) == 1 {
			pings++
		} else {
			t.Fatalf("unexpected notifications while serving: %v", m)
		}
	}
	if el := time.Since(start); el > 1500*time.Millisecond {
		t.Errorf("3 watchdog pings took %v at a 400 ms watchdog", el)
	}
	runOK(t, d, &api.RunRequest{Code: "print('served')"})
	if err := d.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	n.await(t, "STOPPING=1", 10*time.Second)
	select {
	case <-d.Done():
		if err := d.ExitErr(); err != nil {
			t.Errorf("exit after SIGTERM: %v\n%s", err, d.Log())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no exit after STOPPING=1")
	}
}

// TestSystemdSandboxing runs the daemon under what cellblockd.service's
// sandboxing does to it, emulated without systemd: no_new_privs
// (NoNewPrivileges=yes), the unit's capability bounding set
// (CapabilityBoundingSet=~...), read-only /usr, /etc and /boot
// (ProtectSystem=full) and read-only /home and /root (ProtectHome=read-only)
// in a mount namespace of its own; jails must work as usual.
func TestSystemdSandboxing(t *testing.T) {
	requireRoot(t)
	for _, tool := range []string{"unshare", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s (util-linux) is missing", tool)
		}
	}
	unit, err := os.ReadFile(filepath.Join(repoRoot, "deploy/systemd/cellblockd.service"))
	if err != nil {
		t.Fatal(err)
	}
	var dropCaps []string
	for _, l := range strings.Split(string(unit), "\n") {
		if rest, ok := strings.CutPrefix(l, "CapabilityBoundingSet=~"); ok {
			for _, c := range strings.Fields(rest) {
				dropCaps = append(dropCaps, "-"+strings.ToLower(strings.TrimPrefix(c, "CAP_")))
			}
		}
	}
	if len(dropCaps) == 0 {
		t.Fatal("cellblockd.service has no CapabilityBoundingSet=~ line to emulate")
	}
	dir := socketDir(t)
	wrap := filepath.Join(dir, "sandbox.sh")
	script := `#!/bin/sh
set -e
for d in /usr /etc /boot /efi /home /root; do
	[ -d "$d" ] || continue
	mount --bind "$d" "$d"
	mount -o remount,bind,ro "$d"
done
exec setpriv --no-new-privs --bounding-set "$DROP_CAPS" "$@"
`
	if err := os.WriteFile(wrap, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	// A server on the host's loopback for a run with network: the proxy's
	// socket is made with setns(2), which needs CAP_SYS_ADMIN, kept.
	hello := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") }))
	defer hello.Close()
	allowed := "localhost:" + strconv.Itoa(hello.Listener.Addr().(*net.TCPAddr).Port)
	d := startUnder(t, []string{"unshare", "--mount", "--propagation", "slave", wrap},
		[]string{"DROP_CAPS=" + strings.Join(dropCaps, ",")}, filepath.Join(dir, "cellblockd.sock"),
		"--network-allow", allowed, "--network-allow-private")
	status, err := os.ReadFile("/proc/" + strconv.Itoa(d.Cmd.Process.Pid) + "/status")
	if err != nil || !strings.Contains(string(status), "NoNewPrivs:\t1") {
		t.Fatalf("the daemon does not run with no_new_privs: %v", err)
	}
	var bnd uint64
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "CapBnd:"); ok {
			bnd, _ = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	const capSysModule, capSysAdmin = 16, 21
	if bnd&(1<<capSysModule) != 0 || bnd&(1<<capSysAdmin) == 0 {
		t.Fatalf("the daemon's bounding set %x is not the unit's", bnd)
	}
	res := runOK(t, d, &api.RunRequest{Code: "import os\nprint(os.getuid(), open('/proc/self/status').read().count('NoNewPrivs:\\t1'))"})
	if res.Stdout != "1000 1\n" {
		t.Errorf("stdout %q", res.Stdout)
	}
	if res := run(t, d, &api.RunRequest{Code: "x = bytearray(1 << 30)", MemoryBytes: 64 << 20}); !res.OOMKilled {
		t.Errorf("memory limit under the sandbox: %+v", res)
	}
	if res := run(t, d, &api.RunRequest{Code: "while True: pass", TimeoutMs: 500}); !res.TimedOut {
		t.Errorf("timeout under the sandbox: %+v", res)
	}
	res = runOK(t, d, &api.RunRequest{Code: "import urllib.request\nprint(urllib.request.urlopen('http://" + allowed + "/', timeout=30).read().decode())",
		Network: &api.Network{Allow: []string{allowed}}})
	if res.Stdout != "hello\n" {
		t.Errorf("network under the sandbox: %q", res.Stdout)
	}
}

// TestSystemdInstall installs into a staging root as a package build
// would, and checks the layout, the substituted paths and, where
// systemd-analyze exists, that systemd accepts the units.
func TestSystemdInstall(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is missing")
	}
	for _, b := range []string{"cellblockd", "cellblock", "cellblock-mcp", "cellblock-init"} {
		bin(t, b)
	}
	root := t.TempDir()
	makeInstall := func(vars ...string) string {
		t.Helper()
		// -o build: use the binaries `make build` made; do not rebuild
		// them under the other tests' feet.
		cmd := exec.Command("make", append([]string{"-C", repoRoot, "-o", "build", "install"}, vars...)...)
		for _, e := range os.Environ() {
			if !strings.HasPrefix(e, "MAKEFLAGS=") && !strings.HasPrefix(e, "MFLAGS=") && !strings.HasPrefix(e, "MAKELEVEL=") {
				cmd.Env = append(cmd.Env, e)
			}
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make install %v: %v\n%s", vars, err, out)
		}
		return string(out)
	}
	makeInstall("DESTDIR="+root, "PREFIX=/usr")
	for path, mode := range map[string]os.FileMode{
		"usr/bin/cellblockd":                        0o755,
		"usr/bin/cellblock":                         0o755,
		"usr/bin/cellblock-mcp":                     0o755,
		"usr/bin/cellblock-init":                    0o755,
		"usr/lib/systemd/system/cellblockd.service": 0o644,
		"usr/lib/systemd/system/cellblockd.socket":  0o644,
		"usr/lib/sysusers.d/cellblock.conf":         0o644,
		"etc/default/cellblockd":                    0o644,
	} {
		st, err := os.Stat(filepath.Join(root, path))
		if err != nil {
			t.Errorf("not installed: %v", err)
			continue
		}
		if st.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", path, st.Mode().Perm(), mode)
		}
	}
	service, _ := os.ReadFile(filepath.Join(root, "usr/lib/systemd/system/cellblockd.service"))
	socket, _ := os.ReadFile(filepath.Join(root, "usr/lib/systemd/system/cellblockd.socket"))
	for _, want := range []string{"ExecStart=/usr/bin/cellblockd $CELLBLOCKD_ARGS", "EnvironmentFile=-/etc/default/cellblockd",
		"Type=notify", "Delegate=yes", "KillMode=mixed", "WatchdogSec=", "OOMPolicy=continue"} {
		if !strings.Contains(string(service), want) {
			t.Errorf("cellblockd.service lacks %q", want)
		}
	}
	if strings.Contains(string(service), "@") {
		t.Errorf("cellblockd.service has an unsubstituted @VAR@:\n%s", service)
	}
	for _, want := range []string{"ListenStream=" + api.DefaultSocket, "SocketMode=0660", "SocketGroup=cellblock"} {
		if !strings.Contains(string(socket), want) {
			t.Errorf("cellblockd.socket lacks %q", want)
		}
	}
	// A second install keeps the operator's config.
	cfg := filepath.Join(root, "etc/default/cellblockd")
	if err := os.WriteFile(cfg, []byte("CELLBLOCKD_ARGS=--no-index\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := makeInstall("DESTDIR="+root, "PREFIX=/usr"); !strings.Contains(out, "keeping") {
		t.Errorf("second install did not say it kept the config:\n%s", out)
	}
	if b, _ := os.ReadFile(cfg); string(b) != "CELLBLOCKD_ARGS=--no-index\n" {
		t.Errorf("the config was overwritten: %q", b)
	}

	// The sysusers.d entry creates the group, here in a scratch root.
	if sysusers, err := exec.LookPath("systemd-sysusers"); err == nil {
		sroot := t.TempDir()
		if err := os.MkdirAll(filepath.Join(sroot, "etc"), 0o755); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(sysusers, "--root="+sroot, filepath.Join(root, "usr/lib/sysusers.d/cellblock.conf")).CombinedOutput()
		group, _ := os.ReadFile(filepath.Join(sroot, "etc/group"))
		if err != nil || !strings.HasPrefix(string(group), "cellblock:x:") {
			t.Errorf("systemd-sysusers with the installed entry: %v\n%s\n/etc/group: %q", err, out, group)
		}
	}

	// systemd's own check of the units, pointed at this tree's binaries.
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("systemd-analyze is missing; units not verified")
		return
	}
	vroot := t.TempDir()
	makeInstall("DESTDIR="+vroot, "PREFIX=/usr", "BINDIR="+binDir)
	units := filepath.Join(vroot, "usr/lib/systemd/system")
	out, err := exec.Command(analyze, "verify", filepath.Join(units, "cellblockd.socket"), filepath.Join(units, "cellblockd.service")).CombinedOutput()
	// Older systemd (before 254) warns that it does not know
	// DelegateSubgroup= and ignores it; anything else is a finding.
	var findings []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != "" && !strings.Contains(l, "DelegateSubgroup") {
			findings = append(findings, l)
		}
	}
	if err != nil || len(findings) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}
