package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
)

// soakKind is one kind of run in the soak: a request and the check its
// result must pass.
type soakKind struct {
	name  string
	req   func(i int) *api.RunRequest
	check func(i int, res *api.Result) error
}

// soakMarker marks the soak's grandchildren on the host's process list;
// the test's pid keeps apart two soaks on one machine.
var soakMarker = fmt.Sprintf("cellblock-soak-grandchild-%d", os.Getpid())

// soakKinds are a normal run, every bomb of bombs_test.go, with short
// timeouts so that 300 runs fit in a few minutes, and programs hostile to
// the runner in the jail (its channel, cellblock, sys.stdout, reprs,
// output that is not UTF-8).
var soakKinds = []soakKind{
	{"normal", func(i int) *api.RunRequest {
		return &api.RunRequest{Code: fmt.Sprintf("import sys\nprint(sum(range(%d)))\nprint('e', file=sys.stderr)\nsys.exit(%d)", i, i%3)}
	}, func(i int, r *api.Result) error {
		if r.Error != nil || r.ExitCode != i%3 || r.Stdout != fmt.Sprintf("%d\n", i*(i-1)/2) || r.Stderr != "e\n" || r.TimedOut || r.OOMKilled {
			return fmt.Errorf("exit %d stdout %q stderr %q", r.ExitCode, r.Stdout, r.Stderr)
		}
		return nil
	}},
	{"memory", func(int) *api.RunRequest {
		return &api.RunRequest{Code: "x = bytearray(1 << 30)\nprint('survived')", MemoryBytes: 128 << 20}
	}, func(_ int, r *api.Result) error {
		if r.Error != nil || !r.OOMKilled || r.ExitCode == 0 || strings.Contains(r.Stdout, "survived") {
			return fmt.Errorf("1 GiB under 128 MiB: oom_killed %v exit %d", r.OOMKilled, r.ExitCode)
		}
		return nil
	}},
	{"cpu", func(int) *api.RunRequest {
		return &api.RunRequest{Code: "while True: pass", TimeoutMs: 1000}
	}, func(_ int, r *api.Result) error {
		if r.Error != nil || !r.TimedOut || r.ExitCode != 137 || r.DurationMs > 3000 {
			return fmt.Errorf("spin under 1 s: timed_out %v exit %d after %d ms", r.TimedOut, r.ExitCode, r.DurationMs)
		}
		return nil
	}},
	{"fork", func(int) *api.RunRequest {
		return &api.RunRequest{Code: forkBombCode, Pids: 32, TimeoutMs: 20000}
	}, func(_ int, r *api.Result) error {
		var n int
		if _, err := fmt.Sscanf(r.Stdout, "fork failed after %d", &n); err != nil || r.Error != nil || n > 32 || r.TimedOut {
			return fmt.Errorf("fork bomb under 32 tasks: stdout %q exit %d timed_out %v", r.Stdout, r.ExitCode, r.TimedOut)
		}
		return nil
	}},
	{"tmp", func(int) *api.RunRequest {
		return &api.RunRequest{Code: fillTmpCode, TmpBytes: 16 << 20}
	}, func(_ int, r *api.Result) error {
		var mib int
		if _, err := fmt.Sscanf(r.Stdout, "stopped at %d", &mib); err != nil || r.Error != nil || mib > 16 {
			return fmt.Errorf("filling a 16 MiB /tmp: stdout %q exit %d", r.Stdout, r.ExitCode)
		}
		return nil
	}},
	{"stdout", func(int) *api.RunRequest {
		return &api.RunRequest{Code: `
import sys
chunk = b"y" * (1 << 20)
for _ in range(16):
    sys.stdout.buffer.write(chunk)
sys.stdout.flush()
print("done", file=sys.stderr)
`, OutputBytes: 1 << 20}
	}, func(_ int, r *api.Result) error {
		if r.Error != nil || r.ExitCode != 0 || !r.StdoutTruncated || len(r.Stdout) != 1<<20 || r.Stderr != "done\n" {
			return fmt.Errorf("16 MiB of stdout under 1 MiB: exit %d truncated %v kept %d stderr %q", r.ExitCode, r.StdoutTruncated, len(r.Stdout), r.Stderr)
		}
		return nil
	}},
	{"runner channel", func(i int) *api.RunRequest {
		// Garbage, a fake value and a closed channel, from the code.
		return &api.RunRequest{Mode: api.ModeCell, Code: findRunnerChannel + `
import struct, json
os.write(fd, struct.pack(">I", 1 << 30) + b"{" * 65536)
m = json.dumps({"type": "display", "data": {"image/png": "AAAA", "text/plain": "x" * 100000}}).encode()
os.write(fd, struct.pack(">I", len(m)) + m)
os.close(fd)
print("abused")
6 * 7
`}
	}, func(_ int, r *api.Result) error {
		if r.Error != nil || r.ExitCode != 0 || r.Stdout != "abused\n" || r.Value != nil {
			return fmt.Errorf("runner channel abuse: exit %d stdout %q value %+v stderr %q", r.ExitCode, r.Stdout, r.Value, r.Stderr)
		}
		return nil
	}},
	{"cell", func(i int) *api.RunRequest {
		return &api.RunRequest{Mode: api.ModeCell, Inputs: map[string]json.RawMessage{"i": json.RawMessage(fmt.Sprint(i))},
			Code: "import cellblock\ncellblock.display({'i': i})\ni * 2"}
	}, func(i int, r *api.Result) error {
		if r.Error != nil || r.ExitCode != 0 || r.Value == nil || string(r.Value.JSON) != fmt.Sprint(i*2) || len(r.Display) != 1 {
			return fmt.Errorf("cell %d: exit %d value %+v display %d stderr %q", i, r.ExitCode, r.Value, len(r.Display), r.Stderr)
		}
		return nil
	}},
	{"replace stdout", func(i int) *api.RunRequest {
		return &api.RunRequest{Mode: api.ModeCell, Code: fmt.Sprintf("import sys, io\nsys.stdout = io.StringIO()\nprint('lost')\nsys.__stdout__.write('kept %d\\n')\n%d * 2", i, i)}
	}, func(i int, r *api.Result) error {
		if r.Error != nil || r.ExitCode != 0 || r.Stdout != fmt.Sprintf("kept %d\n", i) || r.Value == nil || string(r.Value.JSON) != fmt.Sprint(i*2) {
			return fmt.Errorf("sys.stdout replaced: exit %d stdout %q value %+v stderr %q", r.ExitCode, r.Stdout, r.Value, r.Stderr)
		}
		return nil
	}},
	{"patch cellblock", func(i int) *api.RunRequest {
		return &api.RunRequest{Mode: api.ModeCell, Code: fmt.Sprintf(`
import sys, cellblock
cellblock.display = None
cellblock._channel = None
sys.modules["cellblock"] = None
print("patched")
raise ValueError("after %d")
`, i)}
	}, func(i int, r *api.Result) error {
		if x := r.Exception; r.Error != nil || r.ExitCode != 1 || r.Stdout != "patched\n" || x == nil || x.Type != "ValueError" || x.Message != fmt.Sprintf("after %d", i) {
			return fmt.Errorf("cellblock patched: exit %d stdout %q exception %+v stderr %q", r.ExitCode, r.Stdout, x, r.Stderr)
		}
		return nil
	}},
	{"exit from a thread", func(i int) *api.RunRequest {
		return &api.RunRequest{Mode: api.ModeCell, Code: fmt.Sprintf("import threading, sys\nt = threading.Thread(target=sys.exit, args=(4,))\nt.start(); t.join()\nprint('main goes on')\n%d", i)}
	}, func(i int, r *api.Result) error {
		if r.Error != nil || r.ExitCode != 0 || r.Stdout != "main goes on\n" || r.Value == nil || string(r.Value.JSON) != fmt.Sprint(i) {
			return fmt.Errorf("sys.exit in a thread: exit %d stdout %q value %+v stderr %q", r.ExitCode, r.Stdout, r.Value, r.Stderr)
		}
		return nil
	}},
	{"os._exit", func(i int) *api.RunRequest {
		return &api.RunRequest{Mode: api.ModeCell, Code: fmt.Sprintf("import os\nprint('bye', flush=True)\nos._exit(%d)\n1", 3+i%5)}
	}, func(i int, r *api.Result) error {
		if r.Error != nil || r.ExitCode != 3+i%5 || r.Stdout != "bye\n" || r.Value != nil || r.Exception != nil {
			return fmt.Errorf("os._exit(%d): exit %d stdout %q value %+v exception %+v", 3+i%5, r.ExitCode, r.Stdout, r.Value, r.Exception)
		}
		return nil
	}},
	{"repr raises", func(int) *api.RunRequest {
		return &api.RunRequest{Mode: api.ModeCell, Code: "class C:\n    def __repr__(self):\n        raise KeyError('k')\nC()"}
	}, func(_ int, r *api.Result) error {
		if r.Error != nil || r.ExitCode != 0 || r.Value == nil || r.Value.Repr != "<repr failed: KeyError: 'k'>" || r.Exception != nil {
			return fmt.Errorf("a repr that raises: exit %d value %+v exception %+v", r.ExitCode, r.Value, r.Exception)
		}
		return nil
	}},
	{"huge repr", func(int) *api.RunRequest {
		return &api.RunRequest{Mode: api.ModeCell, Code: "class Huge:\n    def __repr__(self):\n        return 'y' * (16 << 20)\nHuge()"}
	}, func(_ int, r *api.Result) error {
		if v := r.Value; r.Error != nil || r.ExitCode != 0 || v == nil || len(v.Repr) > 4096 || v.JSON != nil ||
			!strings.HasPrefix(v.Repr, "yyyy") || !strings.HasSuffix(v.Repr, "[cellblock: cut, 16777216 bytes in all]") {
			return fmt.Errorf("a 16 MiB repr: exit %d value %.200v", r.ExitCode, v)
		}
		return nil
	}},
	{"non-UTF-8 output", func(i int) *api.RunRequest {
		return &api.RunRequest{Code: fmt.Sprintf(`
import sys
sys.stdout.buffer.write(b"\xff\xfe ok\n")
print("x\udcffy %d")
sys.stderr.buffer.write(b"\xc3(\n")
`, i)}
	}, func(i int, r *api.Result) error {
		if r.Error != nil || r.ExitCode != 0 || r.Stdout != fmt.Sprintf("\ufffd\ufffd ok\nx\ufffdy %d\n", i) || r.Stderr != "\ufffd(\n" {
			return fmt.Errorf("non-UTF-8 output: exit %d stdout %q stderr %q", r.ExitCode, r.Stdout, r.Stderr)
		}
		return nil
	}},
	{"channel flood", func(i int) *api.RunRequest {
		// A second (at most 256 MiB) of frames the daemon must read and
		// refuse, garbage and messages of no known type, then the cell's
		// own value, which must still come through.
		return &api.RunRequest{Mode: api.ModeCell, Code: findRunnerChannel + fmt.Sprintf(`
import struct, sys, time
junk = struct.pack(">I", 65532) + b"\xff" * 65532
other = b'{"type":"flood","pad":"' + b"z" * 65000 + b'"}'
other = struct.pack(">I", len(other)) + other
end, sent = time.monotonic() + 1, 0
while time.monotonic() < end and sent < 256 << 20:
    os.write(fd, junk)
    os.write(fd, other)
    sent += len(junk) + len(other)
print("flooded")
print(sent >> 20, "MiB sent", file=sys.stderr)
%d * 3
`, i)}
	}, func(i int, r *api.Result) error {
		if r.Error != nil || r.ExitCode != 0 || r.Stdout != "flooded\n" || r.Value == nil || string(r.Value.JSON) != fmt.Sprint(i*3) || r.TimedOut {
			return fmt.Errorf("channel flood: exit %d stdout %q value %+v stderr %q", r.ExitCode, r.Stdout, r.Value, r.Stderr)
		}
		return nil
	}},
	{"tools", func(i int) *api.RunRequest {
		// Calls from two threads, one that gets no answer, one of a tool
		// not declared (soakToolRun answers the calls).
		return &api.RunRequest{Tools: []api.Tool{addTool, {Name: "hang"}}, ToolLimits: &api.ToolLimits{Calls: 20, TimeoutMs: 300},
			Code: fmt.Sprintf(`import cellblock, threading
r = []
def work(k):
    r.append(sum(cellblock.tools.add(x=i, y=k) for i in range(5)))
ts = [threading.Thread(target=work, args=(k,)) for k in range(2)]
for t in ts: t.start()
for t in ts: t.join()
try:
    cellblock.tools.hang()
except cellblock.ToolError:
    h = "timeout"
try:
    cellblock.call_tool("nope", {})
except cellblock.ToolError:
    u = "refused"
print(sorted(r), h, u, %d)
`, i)}
	}, func(i int, r *api.Result) error {
		if r.Error != nil || r.ExitCode != 0 || r.Stdout != fmt.Sprintf("[10, 15] timeout refused %d\n", i) || len(r.ToolCalls) != 12 {
			return fmt.Errorf("tools: exit %d stdout %q stderr %q tool_calls %d", r.ExitCode, r.Stdout, r.Stderr, len(r.ToolCalls))
		}
		return nil
	}},
	{"files", func(i int) *api.RunRequest {
		return &api.RunRequest{Code: `
import os
d = open("in/data.txt").read()
os.makedirs("out/sub", exist_ok=True)
open("out/sub/echo.txt", "w").write(d * 2)
open("out/n.txt", "w").write(str(len(d)))
`, Files: []api.FileInput{{Path: "in/data.txt", Content: fmt.Sprintf("run %d\n", i)}}, ReturnFiles: api.ReturnFilesInline}
	}, func(i int, r *api.Result) error {
		d := fmt.Sprintf("run %d\n", i)
		f := map[string]string{}
		for _, file := range r.Files {
			if file.Content != nil {
				f[file.Path] = *file.Content
			}
		}
		if r.Error != nil || r.ExitCode != 0 || len(r.Files) != 2 || f["n.txt"] != fmt.Sprint(len(d)) || f["sub/echo.txt"] != d+d {
			return fmt.Errorf("files in and out: exit %d error %+v files %+v stderr %q", r.ExitCode, r.Error, r.Files, r.Stderr)
		}
		return nil
	}},
	{"hostile out", func(i int) *api.RunRequest {
		return &api.RunRequest{Code: `
import os, socket
os.makedirs("out", exist_ok=True)
os.symlink("/etc/shadow", "out/shadow")
os.symlink("/proc/1/root", "out/root1")
os.symlink(".", "out/loop")
os.mkfifo("out/fifo")
socket.socket(socket.AF_UNIX).bind("out/sock")
for n in range(150):
    open("out/f%03d" % n, "w").close()
`}
	}, func(_ int, r *api.Result) error {
		why := map[string]string{}
		for _, s := range r.FilesSkipped {
			why[s.Path] = s.Reason
		}
		if r.Error != nil || r.ExitCode != 0 || len(r.Files) != 100 || !strings.Contains(why["fifo"], "FIFO") ||
			!strings.Contains(why["shadow"], "symbolic link") || !strings.Contains(why["root1"], "symbolic link") || !strings.Contains(why["sock"], "socket") {
			return fmt.Errorf("a hostile out/: exit %d error %+v, %d files, skipped %v", r.ExitCode, r.Error, len(r.Files), why)
		}
		return nil
	}},
	{"grandchild", func(i int) *api.RunRequest {
		return &api.RunRequest{Code: fmt.Sprintf(`
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/usr/bin/python3", ["python3", "-c", "import time; time.sleep(120)", "%s-%d"])
    os._exit(0)
time.sleep(0.3)
print("parent exits")
`, soakMarker, i)}
	}, func(_ int, r *api.Result) error {
		if r.Error != nil || r.ExitCode != 0 || r.Stdout != "parent exits\n" {
			return fmt.Errorf("double-forked grandchild: exit %d stdout %q stderr %q", r.ExitCode, r.Stdout, r.Stderr)
		}
		return nil
	}},
}

// soakKindOf mixes the kinds: every other run is normal, the rest go
// through the bombs in turn.
func soakKindOf(i int) soakKind {
	if i%2 == 0 {
		return soakKinds[0]
	}
	return soakKinds[1+(i/2)%(len(soakKinds)-1)]
}

// soakLeftovers lists the run cgroups and the jail processes that belong
// to the runs ids or to prestarted jails that are not idle, so that the
// check is not confused by the runs of other daemons on the machine (a
// developer's other test run). A jail process cannot leave its run's
// cgroup, nor can the cgroup go while it lives.
func soakLeftovers(ids map[string]bool) (cgroups, procs []string) {
	ours := func(name string) bool { return ids[name] || strings.HasPrefix(name, prestartPrefix) }
	for _, p := range runCgroups() {
		if ours(filepath.Base(p)) {
			cgroups = append(cgroups, p)
		}
	}
	for _, p := range runProcesses() {
		if inCgroup(p, ours) {
			procs = append(procs, p)
		}
	}
	return cgroups, procs
}

// soakRun posts one run with the soak's own client.
func soakRun(hc *http.Client, req *api.RunRequest) (*api.Result, error) {
	if len(req.Tools) > 0 {
		return soakToolRun(hc, req)
	}
	body, _ := json.Marshal(req)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	hreq, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://cellblockd"+api.PathRuns, bytes.NewReader(body))
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(hreq)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var res api.Result
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		return nil, fmt.Errorf("decode result (%s): %w", resp.Status, err)
	}
	return &res, nil
}

// procStatus reads one "Name: value kB" field of /proc/<pid>/status, in bytes.
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, field+":") {
			kb, _ := strconv.ParseInt(strings.Fields(l)[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

func openFDs(t *testing.T, pid int) int {
	t.Helper()
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// TestSoak300RunsAt16 pushes 300 runs, 16 at a time, through a daemon of
// its own, half of them bombs, and checks every result and that the daemon
// and the host are left as they were.
func TestSoak300RunsAt16(t *testing.T) {
	if testing.Short() {
		t.Skip("the soak takes minutes; not in -short")
	}
	const total, parallel = 300, 16
	d := startDaemon(t, "--max-concurrent", strconv.Itoa(parallel), "--queue", strconv.Itoa(2*parallel))
	pid := d.Cmd.Process.Pid
	hc := unixHTTP(d.Socket)
	hc.Transport.(*http.Transport).DisableKeepAlives = false
	hc.Transport.(*http.Transport).MaxIdleConnsPerHost = parallel

	// Warm up with one run of each kind, so that whatever the daemon
	// makes once (lazily) exists before the baseline.
	var mu sync.Mutex
	ids := map[string]bool{}
	for i, k := range soakKinds {
		res, err := soakRun(hc, k.req(i))
		if err != nil {
			t.Fatalf("warm-up %s: %v\n%s", k.name, err, d.Log())
		}
		if err := k.check(i, res); err != nil {
			t.Fatalf("warm-up %s: %v", k.name, err)
		}
		ids[res.RunID] = true
	}
	hc.CloseIdleConnections()
	settled := func() bool {
		mu.Lock()
		defer mu.Unlock()
		cgroups, procs := soakLeftovers(ids)
		return len(cgroups) == 0 && len(procs) == 0
	}
	if !waitFor(10*time.Second, settled) {
		cgroups, procs := soakLeftovers(ids)
		t.Fatalf("the warm-up left processes %v or cgroups %v", procs, cgroups)
	}
	// The baseline is taken once the daemon is quiet: its prestarted
	// jails refilled, the default shape's two and one for the "tmp"
	// kind's shape, and its descriptor count steady (the server closes
	// its side of the idle connections on its own time). No event says
	// so; poll for it.
	lastFDs := -1
	quiet := func() bool {
		n := openFDs(t, pid)
		info, err := d.Client.Info(context.Background())
		steady := err == nil && n == lastFDs && info.PrestartReady == 2 && info.PrestartShapesReady == 1 && len(idleInits(t, d)) == 3
		lastFDs = n
		return steady
	}
	if !waitFor(10*time.Second, quiet) {
		t.Fatalf("the daemon did not settle before the baseline: %d fds, %d idle jails", openFDs(t, pid), len(idleInits(t, d)))
	}
	fdsBefore := openFDs(t, pid)
	goroutinesBefore := scrapeMetrics(t, d.Socket)["go_goroutines"]
	mountsBefore := mountCount(t)
	t.Logf("baseline: %d fds, %v goroutines, %d mounts, RSS %d MiB", fdsBefore, goroutinesBefore, mountsBefore, procStatus(t, pid, "VmRSS")>>20)

	start := time.Now()
	jobs := make(chan int)
	var failures []string
	perKind := map[string]int{}
	var maxRSS int64
	var wg sync.WaitGroup
	for w := 0; w < parallel; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				k := soakKindOf(i)
				res, err := soakRun(hc, k.req(i))
				if err == nil {
					err = k.check(i, res)
				}
				mu.Lock()
				perKind[k.name]++
				if res != nil && res.RunID != "" {
					ids[res.RunID] = true
				}
				if err != nil {
					failures = append(failures, fmt.Sprintf("run %d (%s): %v", i, k.name, err))
				}
				mu.Unlock()
			}
		}()
	}
	// Sample the daemon's RSS while the runs go on.
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stopSampling:
				return
			case <-time.After(500 * time.Millisecond):
			}
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
				for _, l := range strings.Split(string(b), "\n") {
					if strings.HasPrefix(l, "VmRSS:") {
						kb, _ := strconv.ParseInt(strings.Fields(l)[1], 10, 64)
						mu.Lock()
						maxRSS = max(maxRSS, kb<<10)
						mu.Unlock()
					}
				}
			}
		}
	}()
	for i := 0; i < total; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	close(stopSampling)
	<-sampled
	elapsed := time.Since(start)
	t.Logf("%d runs at %d at a time took %v (%.1f runs/s); per kind %v", total, parallel, elapsed.Round(time.Millisecond),
		float64(total)/elapsed.Seconds(), perKind)
	for i, f := range failures {
		if i == 20 {
			t.Errorf("... and %d more failures", len(failures)-20)
			break
		}
		t.Error(f)
	}

	// Nothing leaked.
	hc.CloseIdleConnections()
	if !waitFor(15*time.Second, settled) {
		cgroups, procs := soakLeftovers(ids)
		t.Errorf("left behind: processes %v, cgroups %v", procs, cgroups)
	}
	if len(ids) != total+len(soakKinds) {
		t.Errorf("%d run ids for %d runs", len(ids), total+len(soakKinds))
	}
	if hostHasCmdline(soakMarker) {
		t.Errorf("a double-forked grandchild outlived its run")
	}
	if n := mountCount(t); n != mountsBefore {
		t.Errorf("mounts: %d before, %d after", mountsBefore, n)
	}
	var fdsAfter int
	var goroutinesAfter float64
	same := waitFor(15*time.Second, func() bool {
		fdsAfter = openFDs(t, pid)
		goroutinesAfter = scrapeMetrics(t, d.Socket)["go_goroutines"]
		return fdsAfter == fdsBefore && goroutinesAfter == goroutinesBefore
	})
	if !same {
		t.Errorf("the daemon leaked: fds %d before, %d after; goroutines %v before, %v after", fdsBefore, fdsAfter, goroutinesBefore, goroutinesAfter)
		if entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
			var targets []string
			for _, e := range entries {
				l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name()))
				targets = append(targets, e.Name()+"->"+l)
			}
			t.Logf("open fds: %v", targets)
		}
	}
	rss, hwm := procStatus(t, pid, "VmRSS"), procStatus(t, pid, "VmHWM")
	t.Logf("daemon RSS: %d MiB after, %d MiB at most while sampled, peak (VmHWM) %d MiB", rss>>20, maxRSS>>20, hwm>>20)
	if rss > 150<<20 || maxRSS > 150<<20 {
		t.Errorf("the daemon's RSS is not bounded: %d MiB after, %d MiB sampled during the soak (limit 150 MiB)", rss>>20, maxRSS>>20)
	}
	m := scrapeMetrics(t, d.Socket)
	ran := 0.0
	for _, o := range []string{"ok", "exit_nonzero", "timeout", "oom"} {
		ran += m[`cellblock_runs_total{outcome="`+o+`"}`]
	}
	if want := float64(total + len(soakKinds)); ran != want {
		t.Errorf("metrics count %v runs carried out, want %v: %v", ran, want, m)
	}
}

// soakToolRun carries out a run with tools with the soak's own client: it
// streams the run and answers its calls of add (x + y); other calls get
// no answer.
func soakToolRun(hc *http.Client, req *api.RunRequest) (*api.Result, error) {
	body, _ := json.Marshal(req)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	hreq, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://cellblockd"+api.PathRuns, bytes.NewReader(body))
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", api.StreamContentType)
	resp, err := hc.Do(hreq)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") != api.StreamContentType {
		// Refused before it ran: one result.
		var res api.Result
		if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
			return nil, fmt.Errorf("decode result (%s): %w", resp.Status, err)
		}
		return &res, nil
	}
	var answers sync.WaitGroup
	defer answers.Wait()
	dec := json.NewDecoder(resp.Body)
	for {
		var ev api.Event
		if err := dec.Decode(&ev); err != nil {
			return nil, fmt.Errorf("decode event (%s): %w", resp.Status, err)
		}
		if ev.Result != nil {
			return ev.Result, nil
		}
		if c := ev.ToolCall; c != nil && c.Name == "add" {
			var a struct{ X, Y int }
			_ = json.Unmarshal(c.Arguments, &a)
			answers.Add(1)
			go func() {
				defer answers.Done()
				b := fmt.Sprintf(`{"result": %d}`, a.X+a.Y)
				areq, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://cellblockd"+api.ToolCallPath(ev.RunID, c.ID), strings.NewReader(b))
				areq.Header.Set("Content-Type", "application/json")
				if r, err := hc.Do(areq); err == nil {
					_, _ = io.Copy(io.Discard, r.Body)
					r.Body.Close()
				}
			}()
		}
	}
}
