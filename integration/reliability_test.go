package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/client"
)

// asUser runs the cellblock CLI with args as uid, with gid uid and no
// supplementary groups, the way the README shows it: setpriv --reuid
// --regid --clear-groups.
func asUser(t *testing.T, uid int, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	setpriv, lerr := exec.LookPath("setpriv")
	if lerr != nil {
		t.Skipf("setpriv (util-linux) not installed: %v", lerr)
	}
	id := strconv.Itoa(uid)
	cmd := exec.Command(setpriv, append([]string{"--reuid=" + id, "--regid=" + id, "--clear-groups", bin(t, "cellblock")}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.String(), errb.String(), err
}

// A uid given with --allow-uid uses the socket with the CLI exactly as a
// member of the socket group would, although it is not in the group (the
// socket is 0660 root:group, on a tmpfs as /run is): the socket's ACL
// lets it in. A uid that is neither allowed nor in the group stays out,
// refused by the kernel before the daemon sees it.
func TestAllowUIDReachesTheSocket(t *testing.T) {
	requireRoot(t)
	// On a tmpfs, as /run is on most hosts.
	dir := searchableDir(t, "cellblock-it-allow-")
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=0755,size=8m"); err != nil {
		t.Fatalf("mount a tmpfs for the socket: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	sock := filepath.Join(dir, "cellblockd.sock")
	cfg, state := daemonConfig(t, sock, "--allow-uid", "65534", "--socket-group", "cellblock-no-such-group")
	d := launch(t, cfg, state)
	d.waitReady(t)
	if st, err := os.Stat(sock); err != nil || st.Mode().Perm()&0o007 != 0 {
		t.Fatalf("socket %v %v: others must get nothing", st.Mode(), err)
	}
	out, errs, err := asUser(t, 65534, "--socket", sock, "run", "-c", "print(1)")
	if err != nil || out != "1\n" {
		t.Errorf("uid 65534 (--allow-uid): %v, stdout %q, stderr %q", err, out, errs)
	}
	out, errs, err = asUser(t, 65533, "--socket", sock, "run", "-c", "print(1)")
	if err == nil || out != "" || !strings.Contains(errs, "permission denied") {
		t.Errorf("uid 65533 (not allowed): %v, stdout %q, stderr %q; want the kernel's permission denied", err, out, errs)
	}
	if strings.Contains(d.Log(), `"uid":65533`) {
		t.Errorf("the daemon saw uid 65533, which the socket's permissions should have kept out:\n%s", d.LogTail(20))
	}

	// The metrics count what every uid's runs did: root (and the socket
	// group) reads them, a uid of --allow-uid does not.
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skipf("curl not installed: %v", err)
	}
	curl := func(uid int) (string, error) {
		setpriv, _ := exec.LookPath("setpriv")
		id := strconv.Itoa(uid)
		out, err := exec.Command(setpriv, "--reuid="+id, "--regid="+id, "--clear-groups",
			"curl", "-s", "-w", "\n%{http_code}", "--unix-socket", sock, "http://cellblockd/metrics").Output()
		return string(out), err
	}
	out, err = curl(65534)
	if err != nil || !strings.HasSuffix(out, "\n403") || strings.Contains(out, "cellblock_runs_total") {
		t.Errorf("GET /metrics as uid 65534 (--allow-uid): %v %q; want 403 and no figures", err, out)
	}
	out, err = curl(0)
	if err != nil || !strings.HasSuffix(out, "\n200") || !strings.Contains(out, "cellblock_runs_total") {
		t.Errorf("GET /metrics as root: %v %.200q", err, out)
	}
}

// The same through systemd's socket activation: the socket is systemd's
// (0660 here, as cellblockd.socket makes it), and the daemon gives the
// uids of --allow-uid their ACL entries on it when it starts.
func TestAllowUIDReachesAnActivatedSocket(t *testing.T) {
	requireRoot(t)
	activate, err := exec.LookPath("systemd-socket-activate")
	if err != nil {
		t.Skip("systemd-socket-activate is missing (Debian package systemd; .ci/run installs it)")
	}
	dir := searchableDir(t, "cellblock-it-allow-sd-")
	activated := filepath.Join(dir, "activated.sock")
	d := launchUnder(t, []string{activate, "-l", activated, "--fdname=cellblockd"}, nil, activated,
		"--socket", filepath.Join(dir, "own.sock"), "--allow-uid", "65534")
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := d.WaitLog(ctx, "Listening on "+activated); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(activated, 0o660); err != nil {
		t.Fatal(err)
	}
	// Root's first connection starts the daemon.
	if err := d.Client.Health(ctx); err != nil {
		t.Fatalf("the activated daemon did not answer: %v\n%s", err, d.Log())
	}
	out, errs, err := asUser(t, 65534, "--socket", activated, "run", "-c", "print(1)")
	if err != nil || out != "1\n" {
		t.Errorf("uid 65534 (--allow-uid) on the activated socket: %v, stdout %q, stderr %q", err, out, errs)
	}
	if _, errs, err := asUser(t, 65533, "--socket", activated, "run", "-c", "print(1)"); err == nil || !strings.Contains(errs, "permission denied") {
		t.Errorf("uid 65533 (not allowed) on the activated socket: %v, stderr %q", err, errs)
	}
}

// A second daemon with the same --cgroup-name (and its own state
// directory) refuses to start, naming the first one's pid, and removes
// nothing of it: the first daemon's session keeps its variables and its
// run in progress ends as it would have.
func TestSecondDaemonOnTheSameCgroupName(t *testing.T) {
	requireRoot(t)
	name := cgroupName(t)
	first := startDaemon(t, "--cgroup-name", name)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sess, err := first.Client.CreateSession(ctx, &api.SessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Client.Run(ctx, &api.RunRequest{Session: sess.ID, Code: "kept = 41"}); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		res *api.Result
		err error
	}
	running := make(chan answer, 1)
	started := make(chan struct{})
	go func() {
		var once bool
		res, err := first.Client.RunStream(ctx, &api.RunRequest{Code: "import time\nprint('started', flush=True)\ntime.sleep(8)\nprint('finished')", TimeoutMs: 120000},
			func(stream, data string) {
				if !once {
					once = true
					close(started)
				}
			})
		running <- answer{res, err}
	}()
	select {
	case <-started:
	case a := <-running:
		t.Fatalf("the run ended before it started: %v %+v", a.err, a.res)
	}
	before := leftoverCgroups()
	if len(before) == 0 {
		t.Fatal("the first daemon's jails have no cgroups")
	}

	dir := searchableDir(t, "cellblock-it-second-")
	cfg, state := daemonConfig(t, filepath.Join(dir, "cellblockd.sock"), "--cgroup-name", name)
	second := launch(t, cfg, state)
	rctx, rcancel := context.WithTimeout(ctx, readyTimeout)
	defer rcancel()
	if err := second.WaitReady(rctx); err == nil {
		t.Errorf("the second daemon started:\n%s", second.Log())
		second.Stop(t)
	} else if !second.Exited() {
		t.Fatalf("the second daemon neither started nor stopped: %v", err)
	}
	if second.ExitErr() == nil {
		t.Errorf("the second daemon exited 0:\n%s", second.Log())
	}
	if want := "pid " + strconv.Itoa(first.Cmd.Process.Pid); !strings.Contains(second.Log(), want) {
		t.Errorf("the second daemon's error does not name %s:\n%s", want, second.Log())
	}
	if strings.Contains(second.Log(), "left behind") {
		t.Errorf("the second daemon swept:\n%s", second.Log())
	}
	for _, c := range before {
		if _, err := os.Stat(c); err != nil {
			t.Errorf("the first daemon's cgroup %s is gone: %v", c, err)
		}
	}

	a := <-running
	if a.err != nil || a.res.Error != nil || a.res.ExitCode != 0 || a.res.Stdout != "started\nfinished\n" {
		t.Errorf("the first daemon's run: %v %+v", a.err, a.res)
	}
	res, err := first.Client.Run(ctx, &api.RunRequest{Session: sess.ID, Code: "kept + 1", Mode: api.ModeCell})
	if err != nil || res.Error != nil || res.Value == nil || res.Value.Repr != "42" {
		t.Errorf("the first daemon's session after the second start: %v %+v", err, res)
	}
}

// Only a session's owner runs code in it or writes files into it: root
// is refused, in words that say whose it is, and still lists, shows and
// deletes it; the owner goes on. And what the docs say of a thread an
// earlier run left: it is still there, and what it prints lands in the
// run in progress.
func TestOnlyTheOwnerRunsInASession(t *testing.T) {
	d := daemon(t) // uid 65533 is allowed on its socket
	code, body := asUID(t, d, "POST", api.PathSessions, `{}`)
	var sess api.Session
	mustJSON(t, string(body), &sess)
	if code != 200 || sess.ID == "" {
		t.Fatalf("uid 65533 creating a session: %d %s", code, body)
	}
	start := `import threading, time
stop = False
def tick():
    while not stop:
        print("tick", flush=True)
        time.sleep(0.05)
threading.Thread(target=tick, daemon=True).start()
x = 41`
	req, _ := json.Marshal(api.RunRequest{Session: sess.ID, Code: start})
	if code, body := asUID(t, d, "POST", api.PathRuns, string(req)); code != 200 {
		t.Fatalf("the owner's first run: %d %s", code, body)
	}

	ctx := context.Background()
	rootRun, err := d.Client.Run(ctx, &api.RunRequest{Session: sess.ID, Code: "print(x)"})
	if err != nil {
		t.Fatal(err)
	}
	if e := rootRun.Error; e == nil || e.Type != api.ErrForbidden || !strings.Contains(e.Message, "belongs to uid 65533") || !strings.Contains(e.Message, "only its owner runs code") || rootRun.Stdout != "" {
		t.Errorf("root running in uid 65533's session: %+v", rootRun)
	}
	var e *api.Error
	_, err = d.Client.PutSessionFile(ctx, sess.ID, "from-root.txt", strings.NewReader("root's"), 6)
	if !errors.As(err, &e) || e.Type != api.ErrForbidden {
		t.Errorf("root putting a file into uid 65533's session: %v", err)
	}
	shown, err := d.Client.Session(ctx, sess.ID)
	if err != nil || shown.OwnerUID != 65533 || shown.ExecutionCount != 1 {
		t.Errorf("root's look at the session: %+v %v", shown, err)
	}

	req, _ = json.Marshal(api.RunRequest{Session: sess.ID, Mode: api.ModeCell, Code: "time.sleep(1)\nx + 1"})
	code, body = asUID(t, d, "POST", api.PathRuns, string(req))
	var res api.Result
	mustJSON(t, string(body), &res)
	if code != 200 || res.Value == nil || res.Value.Repr != "42" || res.Session == nil || res.Session.ExecutionCount != 2 {
		t.Errorf("the owner's second run: %d %s", code, body)
	}
	if !strings.Contains(res.Stdout, "tick") {
		t.Errorf("the first run's thread printed nothing into the second run: %q", res.Stdout)
	}
	req, _ = json.Marshal(api.RunRequest{Session: sess.ID, Code: "stop = True"})
	if code, body := asUID(t, d, "POST", api.PathRuns, string(req)); code != 200 {
		t.Errorf("the owner's last run: %d %s", code, body)
	}
	if err := d.Client.DeleteSession(ctx, sess.ID); err != nil {
		t.Errorf("root deleting uid 65533's session: %v", err)
	}
}

// flood is the program of a caller that never finishes its requests, run
// as uid 65534 by the tests below. "bodies N": N run requests with a body
// of 40 MiB, all but its last bytes sent; "headers N": N run requests
// whose headers promise a body that never comes. It prints a line per
// request as its fate is known: "N refused STATUS" (answered before the
// body went), "N sent" (the body, but its end, was taken), "N answer
// STATUS" (answered after), "N closed" (closed without an answer); then
// holds every connection until its stdin closes.
const flood = `
import resource, select, socket, sys, threading
mode, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
size = 40 << 20 if mode == "bodies" else 100
head = b"POST /v1/runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % size
lock = threading.Lock()
def say(*a):
    with lock:
        print(*a, flush=True)
def status(s):
    try:
        s.settimeout(None)
        data = s.recv(64)
    except OSError:
        return None
    return data.split(b" ")[1].decode() if data.startswith(b"HTTP/1.1 ") else None
def send(i, s):
    try:
        s.sendall(head + b'{"code": "' + b"a" * (size - 20))
    except OSError:
        st = status(s)
        say(i, "refused", st) if st else say(i, "closed")
        return
    say(i, "sent")
    st = status(s)
    say(i, "answer", st) if st else say(i, "closed")
conns = []
answered = 0
for i in range(n):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
    except OSError:
        answered += 1  # nobody took it: refused all the same
        continue
    conns.append(s)
if mode == "bodies":
    for i, s in enumerate(conns):
        threading.Thread(target=send, args=(i, s), daemon=True).start()
else:
    for s in conns:
        try:
            s.sendall(head)
        except OSError:
            pass  # answered and closed already: counted below
    say("connected", n)
    p = select.poll()
    byfd = {}
    for s in conns:
        p.register(s, select.POLLIN)
        byfd[s.fileno()] = s
    while True:
        ready = p.poll(3000)
        if not ready:
            break
        for fd, _ in ready:
            s = byfd.pop(fd)
            p.unregister(fd)
            status(s)
            s.close()
            answered += 1
    say("refused", answered)
sys.stdin.read()
`

// startFlood runs flood as uid 65534 against socket and returns its
// lines; it is stopped when the test ends.
func startFlood(t *testing.T, mode, socket string, n int) <-chan string {
	t.Helper()
	cmd := exec.Command("/usr/bin/python3", "-c", flood, mode, socket, strconv.Itoa(n))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/"}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 4*n)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	t.Cleanup(func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Logf("flood %s: %v\n%s", mode, err, stderr.String())
		}
	})
	return lines
}

// rootRuns says whether root's print(1) is answered, within a minute,
// while d is flooded.
func rootRuns(t *testing.T, d *Daemon) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := client.New(d.Socket)
	defer c.CloseIdleConnections()
	res, err := c.Run(ctx, &api.RunRequest{Code: "print(1)"})
	if err != nil || res.Error != nil || res.Stdout != "1\n" {
		t.Errorf("root's print(1) during the flood: %v %+v\n%s", err, res, d.LogTail(10))
	}
}

// One uid's requests that never finish (eight 40 MiB bodies short of
// their last bytes; 1,100 requests with headers and no body, on a daemon
// with 1,024 descriptors) hold the daemon's memory only up to that uid's
// share and only until the bodies' deadline, and its descriptors only up
// to the uid's connections; root's print(1) is answered throughout.
func TestUnfinishedRequestsOfOneUID(t *testing.T) {
	requireRoot(t)
	dir := searchableDir(t, "cellblock-it-flood-")
	sock := filepath.Join(dir, "cellblockd.sock")
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skipf("prlimit (util-linux) not installed: %v", err)
	}
	cfg, state := daemonConfig(t, sock, "--allow-uid", "65534", "--prestart", "1")
	cfg.Prefix = []string{prlimit, "--nofile=1024:1024", "--"}
	d := launch(t, cfg, state)
	d.waitReady(t)
	rootRuns(t, d)

	t.Run("bodies", func(t *testing.T) {
		before := peakRSS(t, d.Cmd.Process.Pid)
		lines := startFlood(t, "bodies", sock, 8)
		refused, sent, cut := 0, 0, 0
		timeout := time.After(4 * time.Minute)
		for refused+cut < 8 {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the flood ended early: %d refused, %d sent, %d cut", refused, sent, cut)
				}
				f := strings.Fields(l)
				switch {
				case len(f) == 3 && f[1] == "refused" && f[2] == "429":
					refused++
				case len(f) == 2 && f[1] == "sent":
					sent++
					if sent == 2 {
						// Both held bodies are in: the daemon's memory
						// holds them, and root still runs.
						if grown := peakRSS(t, d.Cmd.Process.Pid) - before; grown > 200<<20 {
							t.Errorf("the daemon's peak memory grew by %d MiB", grown>>20)
						}
						rootRuns(t, d)
					}
				case len(f) >= 2 && (f[1] == "answer" || f[1] == "closed"):
					cut++
				default:
					t.Errorf("flood: %q", l)
					cut++
				}
			case <-timeout:
				t.Fatalf("the stalled bodies were not cut: %d refused, %d sent, %d cut\n%s", refused, sent, cut, d.LogTail(10))
			}
		}
		if refused != 6 || sent != 2 || cut != 2 {
			t.Errorf("%d refused, %d sent, %d cut; want 6 refused at once and 2 held until their deadline", refused, sent, cut)
		}
		grown := peakRSS(t, d.Cmd.Process.Pid) - before
		if grown > 200<<20 {
			t.Errorf("the daemon's peak memory grew by %d MiB", grown>>20)
		}
		t.Logf("the daemon's peak memory grew by %d MiB", grown>>20)
		rootRuns(t, d)
	})

	t.Run("headers", func(t *testing.T) {
		lines := startFlood(t, "headers", sock, 1100)
		timeout := time.After(2 * time.Minute)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatal("the flood ended early")
				}
				if strings.HasPrefix(l, "connected") {
					rootRuns(t, d)
					continue
				}
				var n int
				if _, err := fmt.Sscanf(l, "refused %d", &n); err != nil || n < 1100-128 {
					t.Errorf("flood: %q; want at least %d of 1100 refused at once", l, 1100-128)
				}
				t.Logf("%d of 1100 refused at once", n)
				rootRuns(t, d)
				return
			case <-timeout:
				t.Fatalf("the flood did not finish\n%s", d.LogTail(10))
			}
		}
	})
}
