package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/cellblock/cellblock/internal/api"
)

// peakRSS is the most memory the process has held (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb int64
			if _, err := fmt.Sscan(rest, &kb); err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// A script whose PEP 723 block nests arrays 500,000 deep is refused as a
// bad request naming the code, and the daemon's memory does not follow it.
// (Before the bound, six such requests left the daemon at 1.4 GB.)
func TestDeepPEP723BlockIsRefusedCheaply(t *testing.T) {
	d := startDaemon(t, "--prestart", "0")
	code := "# /// script\n# dependencies = " + strings.Repeat("[", 500_000) + "\n# ///\nprint(1)\n"
	before := peakRSS(t, d.Cmd.Process.Pid)
	for range 6 {
		res, err := d.Client.Run(context.Background(), &api.RunRequest{Code: code})
		var aerr *api.Error
		switch {
		case err == nil && res.Error != nil:
			aerr = res.Error
		case err != nil && errors.As(err, &aerr):
		default:
			t.Fatalf("deep metadata: %+v, %v", res, err)
		}
		if aerr.Type != api.ErrBadRequest || aerr.Field != "code" || !strings.Contains(aerr.Message, "script block") {
			t.Fatalf("deep metadata: %+v", aerr)
		}
	}
	if after := peakRSS(t, d.Cmd.Process.Pid); after-before > 64<<20 {
		t.Errorf("the daemon's peak memory grew from %d MiB to %d MiB", before>>20, after>>20)
	}
}

// asNobody runs a small Python HTTP client as uid 65534 (a user the
// daemon's socket refuses) and returns the status it got for an MCP
// initialize request to url with headers.
func asNobody(t *testing.T, url string, headers map[string]string) string {
	t.Helper()
	hdrs, _ := json.Marshal(headers)
	prog := `
import json, sys, urllib.request, urllib.error
body = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}'
req = urllib.request.Request(sys.argv[1], data=body, method="POST")
req.add_header("Content-Type", "application/json")
req.add_header("Accept", "application/json, text/event-stream")
for k, v in (json.loads(sys.argv[2]) or {}).items():
    req.add_header(k, v)
try:
    print(urllib.request.urlopen(req, timeout=20).status)
except urllib.error.HTTPError as e:
    print(e.code)
`
	cmd := exec.Command("/usr/bin/python3", "-c", prog, url, string(hdrs))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 as nobody: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// cellblock-mcp --http must not undo the socket's access control: a user
// the daemon refuses gets nothing through the TCP endpoint without the
// token, and a browser page gets nothing even with it.
func TestMCPHTTPKeepsTheSocketsAccessControl(t *testing.T) {
	d := daemon(t)
	url, token, _ := startMCPHTTP(t, d.Socket, "--allow-origin", "https://app.example.org")
	bearer := "Bearer " + token
	for _, c := range []struct {
		name    string
		headers map[string]string
		want    string
	}{
		{"no token", nil, "401"},
		{"wrong token", map[string]string{"Authorization": "Bearer not-the-token-at-all"}, "401"},
		{"evil origin", map[string]string{"Authorization": bearer, "Origin": "http://evil.example"}, "403"},
		{"allowed origin", map[string]string{"Authorization": bearer, "Origin": "https://app.example.org"}, "200"},
	} {
		if got := asNobody(t, url, c.headers); got != c.want {
			t.Errorf("%s: status %s, want %s", c.name, got, c.want)
		}
	}
}

// --http unix:PATH: a local agent needs no token; the socket's peers are
// checked like the daemon's, so uid 65534 is refused even when the file
// mode would let it connect, and root runs code.
func TestMCPHTTPUnixSocket(t *testing.T) {
	d := daemon(t)
	// A directory uid 65534 may search, so that only the peer check
	// stands in its way once the socket's mode lets it connect.
	path := filepath.Join(searchableDir(t, "cellblock-it-mcp-"), "mcp.sock")
	_, logs := startMCPServing(t, "--socket", d.Socket, "--http", "unix:"+path)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", path)
	}}}
	tr, err := transport.NewStreamableHTTP("http://localhost/mcp", transport.WithHTTPBasicClient(hc))
	if err != nil {
		t.Fatal(err)
	}
	c := mcpclient.NewClient(tr)
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	mcpInitialize(t, c, logs)
	res, err := c.CallTool(context.Background(), mcp.CallToolRequest{Params: mcp.CallToolParams{
		Name: "run_python", Arguments: map[string]any{"code": "print(6*7)"}}})
	if err != nil || res.IsError || !strings.Contains(fmt.Sprint(res.Content), "42") {
		t.Fatalf("run_python over the Unix socket: %+v, %v", res, err)
	}

	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	nobody := exec.Command("/usr/bin/python3", "-c", `
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
body = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}'
s.sendall(b"POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
print(s.recv(64).split(b" ")[1].decode())
`, path)
	nobody.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := nobody.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "403" {
		t.Errorf("uid 65534 on the Unix socket: %v %q, want 403", err, out)
	}
}

// The program cannot lower its own or pid 1's oom_score_adj: jail
// processes stay the first candidates of the host's OOM killer. The
// daemon here runs without CAP_SYS_RESOURCE (dropped from its bounding
// set, and checked), where libcontainer's write of the score sets no
// floor; the VM test (checkOOMScore) checks the same with the capability.
func TestOOMScoreAdjCannotBeLowered(t *testing.T) {
	requireRoot(t)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skipf("setpriv (util-linux) not installed: %v", err)
	}
	dir := searchableDir(t, "cellblock-it-oom-")
	cfg, state := daemonConfig(t, filepath.Join(dir, "cellblockd.sock"))
	cfg.Prefix = []string{setpriv, "--bounding-set", "-sys_resource", "--"}
	d := launch(t, cfg, state)
	d.waitReady(t)
	const capSysResource = 24
	if has, err := hasCapability(d.Cmd.Process.Pid, capSysResource); err != nil || has {
		t.Fatalf("the daemon has CAP_SYS_RESOURCE (%v, %v): this test is for a daemon without it", has, err)
	}
	code := `
import os, subprocess
def lower(path):
    try:
        with open(path, "w") as f:
            f.write("0")
        return "lowered"
    except OSError:
        return "refused"
print(open("/proc/self/oom_score_adj").read().strip(), lower("/proc/self/oom_score_adj"), lower("/proc/1/oom_score_adj"))
print(subprocess.run(["python3", "-c", "print(open('/proc/self/oom_score_adj').read().strip())"], capture_output=True, text=True).stdout.strip())
print(open("/proc/self/oom_score_adj").read().strip(), open("/proc/1/oom_score_adj").read().strip())
`
	res, err := d.Client.Run(context.Background(), &api.RunRequest{Code: code})
	if err != nil || res.Error != nil || res.ExitCode != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	if want := "1000 refused refused\n1000\n1000 1000\n"; res.Stdout != want {
		t.Errorf("stdout %q, want %q (stderr %q)", res.Stdout, want, res.Stderr)
	}
}

// hasCapability reports whether process pid has capability bit in its
// effective set.
func hasCapability(pid, bit int) (bool, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return caps&(1<<bit) != 0, err
		}
	}
	return false, fmt.Errorf("no CapEff in /proc/%d/status", pid)
}

// The program cannot reach into the jail's pid 1: the init is not
// dumpable, so /proc/1/mem, /proc/1/environ and /proc/1/fd/* are closed
// to the program although both run as the same uid.
func TestInitIsNotReachableThroughProc(t *testing.T) {
	d := daemon(t)
	code := `
import os
def attempt(what, fn):
    try:
        fn()
        print(what, "open")
    except OSError as e:
        print(what, "refused")
def write_mem():
    with open("/proc/1/mem", "r+b", buffering=0) as f:
        f.seek(0x400000)
        f.write(b"\xcc")
attempt("mem", write_mem)
attempt("mem-read", lambda: open("/proc/1/mem", "rb").read(1))
attempt("environ", lambda: open("/proc/1/environ", "rb").read())
attempt("fd", lambda: os.listdir("/proc/1/fd"))
attempt("fd3", lambda: os.open("/proc/1/fd/3", os.O_RDWR))
attempt("maps", lambda: open("/proc/1/maps").read())
`
	for _, prestart := range []bool{true, false} {
		req := &api.RunRequest{Code: code}
		if !prestart {
			req.TmpBytes = 3 << 20 // a shape no prestarted jail has: a fresh jail
		}
		res, err := d.Client.Run(context.Background(), req)
		if err != nil || res.Error != nil || res.ExitCode != 0 {
			t.Fatalf("%+v %v", res, err)
		}
		want := "mem refused\nmem-read refused\nenviron refused\nfd refused\nfd3 refused\nmaps refused\n"
		if res.Stdout != want {
			t.Errorf("prestarted=%v: stdout %q, want %q (stderr %q)", prestart, res.Stdout, want, res.Stderr)
		}
	}
}
