package integration

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
)

// waitPrestarted waits until d has all its prestarted jails ready again.
func waitPrestarted(t *testing.T, d *Daemon) {
	t.Helper()
	var info *api.Info
	ok := waitFor(30*time.Second, func() bool {
		var err error
		info, err = d.Client.Info(context.Background())
		return err == nil && info.PrestartReady == info.Prestart
	})
	if !ok {
		t.Fatalf("prestarted jails not ready: %+v\n%s", info, d.Log())
	}
}

// prestartedCgroups lists the cgroup directories (in every hierarchy) of
// d's prestarted jails, waiting or claimed.
func prestartedCgroups(d *Daemon) []string {
	name := flagValue(d.Cmd.Args, "--cgroup-name")
	var dirs []string
	for _, p := range leftoverCgroups() {
		if strings.HasPrefix(filepath.Base(p), prestartPrefix) && strings.Contains(p, "/"+name+"/") {
			dirs = append(dirs, p)
		}
	}
	return dirs
}

// idleInits returns the pids of the waiting inits of d's prestarted jails.
func idleInits(t *testing.T, d *Daemon) []int {
	t.Helper()
	var pids []int
	seen := map[string]bool{}
	for _, p := range prestartedCgroups(d) {
		b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		for _, pid := range strings.Fields(string(b)) {
			if !seen[pid] && idleInit(pid) {
				seen[pid] = true
				n, _ := strconv.Atoi(pid)
				pids = append(pids, n)
			}
		}
	}
	return pids
}

func TestPrestartedJails(t *testing.T) {
	// Other shapes' jails are TestPrestartedJailsForOtherShapes's.
	d := startDaemon(t, "--prestart-shapes", "0")
	waitPrestarted(t, d)
	info, err := d.Client.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.Prestart != 2 {
		t.Fatalf("prestart %d, want the default 2", info.Prestart)
	}
	// A jail counts as ready once libcontainer has started its init, which
	// may still be finishing its exec.
	if !waitFor(5*time.Second, func() bool { return len(idleInits(t, d)) == 2 }) {
		t.Fatalf("%d idle jail inits, want 2", len(idleInits(t, d)))
	}

	// Waiting jails are built and kept at the smallest CPU weight; a
	// claimed one runs at the default.
	weights := func(idle bool) []string {
		var w []string
		for _, p := range prestartedCgroups(d) {
			if idleJailCgroup(p) != idle {
				continue
			}
			for _, f := range []string{"cpu.shares", "cpu.weight"} {
				if v, err := os.ReadFile(filepath.Join(p, f)); err == nil {
					w = append(w, f+"="+strings.TrimSpace(string(v)))
				}
			}
		}
		return w
	}
	for _, w := range weights(true) {
		if w != "cpu.shares=2" && w != "cpu.weight=1" {
			t.Errorf("a waiting jail has %s, want the smallest weight", w)
		}
	}
	busy := make(chan *api.Result, 1)
	go func() { busy <- run(t, d, &api.RunRequest{Code: "import time; time.sleep(2)"}) }()
	var claimed []string
	waitFor(10*time.Second, func() bool { claimed = weights(false); return len(claimed) > 0 })
	if len(claimed) == 0 {
		t.Error("never saw the claimed jail's cgroup")
	}
	for _, w := range claimed {
		if w != "cpu.shares=1024" && w != "cpu.weight=100" {
			t.Errorf("a claimed jail has %s, want the default weight", w)
		}
	}
	if res := <-busy; res.Phases == nil || !res.Phases.Prestarted {
		t.Errorf("the sleeping run did not get a prestarted jail: %+v", res)
	}

	// prestarted runs req in a prestarted jail and returns its result.
	prestarted := func(req *api.RunRequest, want bool) *api.Result {
		t.Helper()
		waitPrestarted(t, d)
		res := run(t, d, req)
		if res.Phases == nil || res.Phases.Prestarted != want {
			t.Fatalf("prestarted = %v, want %v: %+v", res.Phases != nil && res.Phases.Prestarted, want, res)
		}
		return res
	}

	// One run leaves files everywhere it may write; the next (another
	// prestarted jail) sees none of them.
	res := prestarted(&api.RunRequest{Code: `
import os
for d in ("/tmp", "/work", "/dev/shm"):
    open(os.path.join(d, "left-by-first"), "w").write("x")
print(os.getppid())
`}, true)
	if res.ExitCode != 0 || res.Stdout != "1\n" {
		t.Fatalf("first run: exit %d stdout %q stderr %q (want the program as the init's child)", res.ExitCode, res.Stdout, res.Stderr)
	}
	res = prestarted(&api.RunRequest{Code: `
import os
print(sorted(f for d in ("/tmp", "/work", "/dev/shm") for f in os.listdir(d)))
`, Filename: "second.py"}, true)
	if res.ExitCode != 0 || res.Stdout != "['second.py']\n" {
		t.Errorf("second run sees %q (stderr %q); want only its own script", res.Stdout, res.Stderr)
	}
	programOnlyCPU(t, res)

	// Limits other than the defaults are applied when a jail is claimed.
	res = prestarted(&api.RunRequest{Code: "b = bytearray(300 << 20)\nprint('survived')", MemoryBytes: 64 << 20}, true)
	if !res.OOMKilled || strings.Contains(res.Stdout, "survived") {
		t.Errorf("300 MiB under 64 MiB in a prestarted jail: oom_killed %v, stdout %q", res.OOMKilled, res.Stdout)
	}
	res = prestarted(&api.RunRequest{Code: `
import threading, time
n = 0
try:
    for _ in range(40):
        threading.Thread(target=time.sleep, args=(2,), daemon=True).start()
        n += 1
except RuntimeError:
    pass
print(n)
`, Pids: 8}, true)
	// Python's main thread and 7 more: the init's own threads do not
	// count against the program's limit (and its room for a late thread
	// may give one more).
	if got := strings.TrimSpace(res.Stdout); res.ExitCode != 0 || (got != "7" && got != "8") {
		t.Errorf("threads under pids 8 in a prestarted jail: exit %d stdout %q stderr %q; want 7 started (8 at most)", res.ExitCode, res.Stdout, res.Stderr)
	}
	res = prestarted(&api.RunRequest{Code: "import os; print(os.environ['OMP_NUM_THREADS'], os.environ['MINE'])", CPUs: 2, Env: map[string]string{"MINE": "yes"}}, true)
	if res.Stdout != "2 yes\n" {
		t.Errorf("environment of a prestarted run: %q %q", res.Stdout, res.Stderr)
	}
	res = prestarted(&api.RunRequest{Code: "print(input()[::-1])", Stdin: "olleh\n"}, true)
	if res.Stdout != "hello\n" {
		t.Errorf("stdin of a prestarted run: %q %q", res.Stdout, res.Stderr)
	}
	start := time.Now()
	res = prestarted(&api.RunRequest{Code: "while True: pass", TimeoutMs: 1000}, true)
	if !res.TimedOut || time.Since(start) > 5*time.Second {
		t.Errorf("spin under 1 s in a prestarted jail: timed_out %v after %v", res.TimedOut, time.Since(start))
	}

	// A run that needs a differently built jail gets a fresh one.
	res = prestarted(&api.RunRequest{Code: "import os; s = os.statvfs('/tmp'); print(s.f_blocks * s.f_frsize >> 20)", TmpBytes: 8 << 20}, false)
	if res.Stdout != "8\n" {
		t.Errorf("/tmp of a fresh jail with tmp 8 MiB is %q MiB", res.Stdout)
	}

	// The pool is back to two idle jails, and runs left nothing.
	waitPrestarted(t, d)
	if !waitFor(5*time.Second, func() bool { return len(idleInits(t, d)) == 2 }) {
		t.Errorf("%d idle jail inits after the runs, want 2", len(idleInits(t, d)))
	}
	assertNothingLeft(t, mountCount(t))
}

// A prestarted jail whose init dies while it waits is never handed a run;
// the daemon builds another.
func TestPrestartedJailDiesWhileWaiting(t *testing.T) {
	d := startDaemon(t)
	waitPrestarted(t, d)
	var pids []int
	if !waitFor(5*time.Second, func() bool { pids = idleInits(t, d); return len(pids) == 2 }) {
		t.Fatalf("%d idle jail inits, want 2", len(pids))
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	res := runOK(t, d, &api.RunRequest{Code: "print('still works')"})
	if res.Stdout != "still works\n" {
		t.Errorf("stdout %q", res.Stdout)
	}
	waitPrestarted(t, d)
	var now []int
	waitFor(5*time.Second, func() bool { now = idleInits(t, d); return len(now) == 2 })
	for _, p := range now {
		for _, old := range pids {
			if p == old {
				t.Errorf("the killed init %d is still listed", p)
			}
		}
	}
	if len(now) != 2 {
		t.Errorf("%d idle jail inits after the refill, want 2\n%s", len(now), d.Log())
	}
	assertNothingLeft(t, mountCount(t))
}

// With --prestart 0 every jail is built when its request arrives; the same
// containment holds.
func TestFreshJailsOnly(t *testing.T) {
	d := startDaemon(t, "--prestart", "0")
	info, err := d.Client.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.Prestart != 0 || info.PrestartReady != 0 {
		t.Errorf("info: prestart %d ready %d, want 0 and 0", info.Prestart, info.PrestartReady)
	}
	if n := len(idleInits(t, d)); n != 0 {
		t.Errorf("%d idle jail inits with --prestart 0", n)
	}
	res := run(t, d, &api.RunRequest{Code: `
import os, sys
status = open("/proc/self/status").read()
fields = dict(l.split(":\t", 1) for l in status.splitlines() if ":\t" in l)
print(fields["Seccomp"].strip(), fields["NoNewPrivs"].strip(), fields["CapEff"].strip(), input())
sys.exit(3)
`, Stdin: "in\n"})
	if res.Phases == nil || res.Phases.Prestarted {
		t.Errorf("a run with --prestart 0 reports a prestarted jail: %+v", res.Phases)
	}
	if res.ExitCode != 3 || res.Stdout != "2 1 0000000000000000 in\n" {
		t.Errorf("fresh jail: exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	programOnlyCPU(t, res)

	// A jail built for its request is built under a roomier tasks limit
	// than a small one the program asks for, which then is the program's
	// alone: with 2, Python forks one child (two with the init's room for
	// a late thread), never none and never three.
	res = run(t, d, &api.RunRequest{Code: forkBombCode, Pids: 2})
	if !strings.HasPrefix(res.Stdout, "fork failed after 1 children: Resource temporarily unavailable") &&
		!strings.HasPrefix(res.Stdout, "fork failed after 2 children: Resource temporarily unavailable") {
		t.Errorf("fork bomb under pids 2 in a fresh jail: exit %d stdout %q stderr %q; want 1 or 2 children, then EAGAIN", res.ExitCode, res.Stdout, res.Stderr)
	}
}

// programOnlyCPU checks that a single-threaded program's cpu_ms is its own:
// one thread cannot use more CPU than its wall time, while the jail's
// set-up, which runs in the same cgroup before it, took 100 ms and more
// of CPU here when it was counted too. The slack covers the init's fork
// and exec of Python, which run before the program's clock starts.
func programOnlyCPU(t *testing.T, res *api.Result) {
	t.Helper()
	if res.CPUMs > res.DurationMs+25 {
		t.Errorf("cpu_ms %d for a single-threaded program that ran %d ms: the jail's set-up is counted as the run's", res.CPUMs, res.DurationMs)
	}
}
