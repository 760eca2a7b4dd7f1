package cgroup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Root tests: they create real cgroups below the test process's own cgroups
// under a root name unique to the test (never the daemon's "cellblock"), put
// processes they start themselves into them, and check in t.Cleanup that
// every directory is gone again.

var testSeq atomic.Int64

// needRoot skips unless the test can manage cgroups here.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	switch detectMode() {
	case ModeNone:
		t.Skip("no cgroup hierarchy mounted")
	case ModeV2:
		// OpenRoot moves this process into <own>/daemon and enables
		// controllers in <own>: only sound in a delegated cgroup of our own.
		own, err := readProcCgroup(0)
		if err != nil {
			t.Fatal(err)
		}
		p := own[""]
		if filepath.Base(p) == daemonLeaf {
			return
		}
		pids, err := readProcs(filepath.Join(unifiedMountpoint, p))
		if err != nil {
			t.Fatal(err)
		}
		if len(pids) != 1 || pids[0] != os.Getpid() {
			t.Skipf("cgroup v2: the test process must be alone in a delegated cgroup (e.g. systemd-run --scope -p Delegate=yes go test ...); %s has %v", p, pids)
		}
	}
}

// openTestRoot opens a root under a fresh test-only name.
func openTestRoot(t *testing.T) *Root {
	t.Helper()
	return openNamedRoot(t, fmt.Sprintf("cbtest-%d-%d", os.Getpid(), testSeq.Add(1)))
}

// openNamedRoot opens a root and, at cleanup, sweeps it, closes it and
// fails the test if any of its directories is left.
func openNamedRoot(t *testing.T, name string) *Root {
	t.Helper()
	needRoot(t)
	r, err := OpenRoot(name)
	if err != nil {
		t.Fatalf("OpenRoot(%s): %v", name, err)
	}
	if r.Mode() != detectMode() {
		t.Errorf("root mode %s, detectMode %s", r.Mode(), detectMode())
	}
	t.Cleanup(func() {
		if _, err := r.Sweep(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("cleanup sweep: %v", err)
		}
		if err := r.Close(); err != nil {
			t.Errorf("cleanup close: %v", err)
		}
		dirs := []string{r.runsDir}
		if r.mode != ModeV2 {
			dirs = r.rootDirs()
		}
		for _, d := range dirs {
			if exists(d) {
				entries, _ := os.ReadDir(d)
				t.Errorf("left behind: %s (%d entries)", d, len(entries))
			}
		}
	})
	return r
}

// create creates a run cgroup that is deleted at cleanup.
func create(t *testing.T, r *Root, id string, l Limits) *Cgroup {
	t.Helper()
	c, err := r.Create(id, l)
	if err != nil {
		t.Fatalf("Create(%s): %v", id, err)
	}
	t.Cleanup(func() {
		if err := c.Delete(); err != nil {
			t.Errorf("cleanup delete: %v", err)
		}
		for _, d := range c.dirs {
			if exists(d) {
				t.Errorf("left behind: %s", d)
			}
		}
	})
	return c
}

// child is a process the test started and holds at a gate until it has
// been moved into a cgroup.
type child struct {
	cmd    *exec.Cmd
	gate   *os.File
	stdout *bufio.Reader

	waitOnce sync.Once
	waitErr  error
}

// startGated starts argv behind a gate: sh waits on fd 3 and then execs argv.
func startGated(t *testing.T, argv ...string) *child {
	t.Helper()
	gr, gw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer gr.Close()
	cmd := exec.Command("sh", append([]string{"-c", `read _ <&3 && exec "$@" 3<&-`, "sh"}, argv...)...)
	cmd.ExtraFiles = []*os.File{gr}
	// A file, not a pipe: a grandchild that keeps it open cannot hold up
	// Wait. Not the test's stderr either: a line a child prints there
	// (sh's "Cannot fork" in TestPidsLimit) can land in the middle of a
	// "--- PASS" line and hide it from whatever reads the -v output.
	errFile, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer errFile.Close()
	cmd.Stderr = errFile
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		gw.Close()
		t.Fatal(err)
	}
	ch := &child{cmd: cmd, gate: gw, stdout: bufio.NewReader(out)}
	t.Cleanup(func() {
		ch.gate.Close()
		_ = cmd.Process.Kill() // our own child; no-op if it is gone
		_ = ch.wait()
		if b, _ := os.ReadFile(errFile.Name()); len(bytes.TrimSpace(b)) > 0 {
			t.Logf("stderr of %q: %s", argv, bytes.TrimSpace(b))
		}
	})
	return ch
}

func (ch *child) pid() int { return ch.cmd.Process.Pid }

func (ch *child) open() error {
	_, err := ch.gate.Write([]byte("go\n"))
	ch.gate.Close()
	return err
}

func (ch *child) wait() error {
	ch.waitOnce.Do(func() { ch.waitErr = ch.cmd.Wait() })
	return ch.waitErr
}

// waitSignaled waits for the child and checks it died of SIGKILL.
func (ch *child) waitKilled(t *testing.T) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- ch.wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("child exited with %v, want SIGKILL", err)
		}
		ws := ee.Sys().(syscall.WaitStatus)
		if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("child exited with %v, want SIGKILL", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("child did not die")
	}
}

// moveInto puts pid into every directory of the run (what libcontainer's
// Apply does for the jail; here only for tests).
func moveInto(t *testing.T, c *Cgroup, pid int) {
	t.Helper()
	for _, d := range c.dirs {
		if err := writeFile(d, "cgroup.procs", strconv.Itoa(pid)); err != nil {
			t.Fatalf("move %d: %v", pid, err)
		}
	}
}

// runIn starts argv gated, moves it into c and opens the gate.
func runIn(t *testing.T, c *Cgroup, argv ...string) *child {
	t.Helper()
	ch := startGated(t, argv...)
	moveInto(t, c, ch.pid())
	if err := ch.open(); err != nil {
		t.Fatal(err)
	}
	return ch
}

var pythonOnce = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
	return strings.TrimSpace(string(out)), err
})

// python returns the real interpreter (not a pyenv shim script).
func python(t *testing.T) string {
	t.Helper()
	p, err := pythonOnce()
	if err != nil || p == "" {
		t.Fatalf("find python3: %v", err)
	}
	return p
}

// file returns the first run directory holding name, and its content.
func file(t *testing.T, c *Cgroup, name string) string {
	t.Helper()
	for _, d := range c.dirs {
		if b, err := os.ReadFile(filepath.Join(d, name)); err == nil {
			return strings.TrimSpace(string(b))
		}
	}
	t.Fatalf("no run directory has %s", name)
	return ""
}

func TestCreateSetsLimits(t *testing.T) {
	r := openTestRoot(t)
	c := create(t, r, "limits", Limits{MemoryBytes: 64 << 20, Pids: 8, CPUs: 0.5})
	if len(c.dirs) == 0 {
		t.Fatal("no directories")
	}
	for _, d := range c.dirs {
		if !exists(d) {
			t.Errorf("missing %s", d)
		}
	}
	want := map[string]string{}
	switch r.Mode() {
	case ModeV2:
		want["memory.max"] = "67108864"
		want["memory.oom.group"] = "1"
		want["pids.max"] = "8"
		want["cpu.max"] = "50000 100000"
		if exists(filepath.Join(c.dirs[0], "memory.swap.max")) {
			want["memory.swap.max"] = "0"
		}
	default:
		want["memory.limit_in_bytes"] = "67108864"
		want["memory.swappiness"] = "0"
		want["pids.max"] = "8"
		want["cpu.cfs_quota_us"] = "50000"
		want["cpu.cfs_period_us"] = "100000"
		want["freezer.state"] = "THAWED"
		if r.memsw {
			want["memory.memsw.limit_in_bytes"] = "67108864"
		}
		if v, _ := readString(c.dirFor("memory"), "memory.use_hierarchy"); v != "" && v != "1" {
			t.Errorf("memory.use_hierarchy = %s", v)
		}
		if cs := c.dirFor("cpuset"); cs != "" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				got, _ := readString(cs, f)
				parent, _ := readString(filepath.Dir(filepath.Dir(cs)), f)
				if got == "" || got != parent {
					t.Errorf("%s = %q, parent has %q", f, got, parent)
				}
			}
		}
	}
	for f, v := range want {
		if got := file(t, c, f); got != v {
			t.Errorf("%s = %q, want %q", f, got, v)
		}
	}

	// An empty cgroup uses (almost) nothing, and the file is there.
	if n, err := c.MemoryUsage(); err != nil || n < 0 || n > 1<<20 {
		t.Errorf("memory usage of an empty cgroup: %d %v", n, err)
	}

	if _, err := r.Create("limits", Limits{}); !errors.Is(err, ErrExists) {
		t.Errorf("second Create: %v, want ErrExists", err)
	}
	if _, err := r.Create("../x", Limits{}); !errors.Is(err, ErrInvalidID) {
		t.Errorf("bad id: %v, want ErrInvalidID", err)
	}

	// No limits: nothing written beyond the defaults.
	free := create(t, r, "free", Limits{})
	if r.Mode() == ModeV2 {
		if got := file(t, free, "memory.max"); got != "max" {
			t.Errorf("memory.max = %s", got)
		}
		if got := file(t, free, "pids.max"); got != "max" {
			t.Errorf("pids.max = %s", got)
		}
	} else {
		if got := file(t, free, "pids.max"); got != "max" {
			t.Errorf("pids.max = %s", got)
		}
		if got := file(t, free, "cpu.cfs_quota_us"); got != "-1" {
			t.Errorf("cpu.cfs_quota_us = %s", got)
		}
	}

	if err := c.Delete(); err != nil {
		t.Fatal(err)
	}
	for _, d := range c.dirs {
		if exists(d) {
			t.Errorf("Delete left %s", d)
		}
	}
	if err := c.Delete(); err != nil {
		t.Errorf("second Delete: %v", err)
	}
	if pids, err := c.Procs(); err != nil || len(pids) != 0 {
		t.Errorf("Procs after Delete: %v, %v", pids, err)
	}
}

func TestUpdate(t *testing.T) {
	r := openTestRoot(t)
	c := create(t, r, "update", Limits{MemoryBytes: 256 << 20, Pids: 64, CPUs: 1})
	// Lower memory and raise CPU, then raise memory again: v1 needs the
	// memory and memory+swap limits written in the right order each way.
	steps := []Limits{
		{MemoryBytes: 32 << 20, Pids: 8, CPUs: 2},
		{MemoryBytes: 512 << 20, Pids: 128, CPUs: 0.25},
	}
	for _, l := range steps {
		if err := c.Update(l); err != nil {
			t.Fatalf("Update(%+v): %v", l, err)
		}
		want := map[string]string{}
		mem := fmt.Sprint(l.MemoryBytes)
		quota := fmt.Sprint(int64(l.CPUs * 100000))
		if r.Mode() == ModeV2 {
			want["memory.max"] = mem
			want["pids.max"] = fmt.Sprint(l.Pids)
			want["cpu.max"] = quota + " 100000"
		} else {
			want["memory.limit_in_bytes"] = mem
			want["pids.max"] = fmt.Sprint(l.Pids)
			want["cpu.cfs_quota_us"] = quota
			if r.memsw {
				want["memory.memsw.limit_in_bytes"] = mem
			}
		}
		for f, v := range want {
			if got := file(t, c, f); got != v {
				t.Errorf("after Update(%+v): %s = %q, want %q", l, f, got, v)
			}
		}
	}
	// A jail built ahead of its run gets the smallest CPU weight, and the
	// default back when it is claimed.
	weightFile, background, normal := "cpu.shares", "2", "1024"
	if r.Mode() == ModeV2 {
		weightFile, background, normal = "cpu.weight", "1", "100"
	}
	for _, bg := range []bool{true, false} {
		if err := c.Update(Limits{MemoryBytes: 64 << 20, Background: bg}); err != nil {
			t.Fatalf("Update(background %v): %v", bg, err)
		}
		want := map[bool]string{true: background, false: normal}[bg]
		if got := file(t, c, weightFile); got != want {
			t.Errorf("background %v: %s = %s, want %s", bg, weightFile, got, want)
		}
	}
	// Only the tasks limit (and the weight) changing: the files alone.
	for _, pids := range []int64{5, 0, 7} {
		if err := c.Update(Limits{MemoryBytes: 64 << 20, Pids: pids, Background: pids == 7}); err != nil {
			t.Fatalf("Update(pids %d): %v", pids, err)
		}
		want := map[int64]string{5: "5", 0: "max", 7: "7"}[pids]
		if got := file(t, c, "pids.max"); got != want {
			t.Errorf("after Update(pids %d): pids.max = %s, want %s", pids, got, want)
		}
	}
	if got := file(t, c, weightFile); got != background {
		t.Errorf("after Update(pids 7, background): %s = %s, want %s", weightFile, got, background)
	}
	if err := c.Update(Limits{Pids: -1}); !errors.Is(err, ErrInvalidLimits) {
		t.Errorf("Update with bad limits: %v, want ErrInvalidLimits", err)
	}
	if err := c.Delete(); err != nil {
		t.Fatal(err)
	}
	if err := c.Update(steps[0]); err == nil {
		t.Error("Update after Delete succeeded")
	}
}

func TestCreateFailureLeavesNothing(t *testing.T) {
	r := openTestRoot(t)
	// Passes Validate, but the kernel refuses pids.max above PID_MAX_LIMIT
	// after the first hierarchies have been created.
	_, err := r.Create("refused", Limits{MemoryBytes: 64 << 20, Pids: 1 << 40})
	if err == nil {
		t.Fatal("Create succeeded")
	}
	if errors.Is(err, ErrInvalidLimits) || errors.Is(err, ErrExists) {
		t.Fatalf("failed too early to test clean-up: %v", err)
	}
	for _, d := range r.newCgroup("refused").dirs {
		if exists(d) {
			t.Errorf("failed Create left %s", d)
		}
	}
	// The id is free again.
	create(t, r, "refused", Limits{})
}

func TestProcsAndKill(t *testing.T) {
	r := openTestRoot(t)
	c := create(t, r, "procs", Limits{Pids: 16})
	ch := runIn(t, c, "sleep", "300")
	pids, err := c.Procs()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pids, ch.pid()) {
		t.Fatalf("Procs() = %v, want %d in it", pids, ch.pid())
	}
	if ok, err := c.isMember(ch.pid()); !ok || err != nil {
		t.Errorf("isMember(%d) = %v, %v", ch.pid(), ok, err)
	}
	if ok, err := c.isMember(os.Getpid()); ok || err != nil {
		t.Errorf("isMember(self) = %v, %v", ok, err)
	}
	start := time.Now()
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Kill took %v", time.Since(start))
	// Kill returns once the cgroup is empty, before we reap: the zombie is
	// no member any more.
	if pids, err := c.Procs(); err != nil || len(pids) != 0 {
		t.Errorf("Procs() after Kill = %v, %v", pids, err)
	}
	ch.waitKilled(t)
	if err := c.Kill(); err != nil {
		t.Errorf("Kill of an empty cgroup: %v", err)
	}
}

func TestOOMKill(t *testing.T) {
	r := openTestRoot(t)
	const limit = 64 << 20
	c := create(t, r, "oom", Limits{MemoryBytes: limit, Pids: 16})
	ch := runIn(t, c, python(t), "-c", "b = bytearray(512 << 20)")
	ch.waitKilled(t)

	// Read after every process has exited, before Delete.
	st, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stats after OOM: %+v", st)
	if !st.OOMKilled {
		t.Error("OOMKilled = false")
	}
	if st.MemoryPeakBytes < limit/2 || st.MemoryPeakBytes > limit {
		t.Errorf("MemoryPeakBytes = %d, want in [%d, %d]", st.MemoryPeakBytes, limit/2, limit)
	}
	if st.CPUTime <= 0 {
		t.Errorf("CPUTime = %v", st.CPUTime)
	}
	if err := c.Delete(); err != nil {
		t.Fatal(err)
	}
	after, err := c.Stats()
	if err != nil || after != st {
		t.Errorf("Stats after Delete = %+v, %v; want the final %+v", after, err, st)
	}
}

func TestNoOOMWithoutPressure(t *testing.T) {
	r := openTestRoot(t)
	c := create(t, r, "nooom", Limits{MemoryBytes: 64 << 20})
	ch := runIn(t, c, python(t), "-c", "b = bytearray(8 << 20)")
	if err := ch.wait(); err != nil {
		t.Fatalf("python: %v", err)
	}
	st, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.OOMKilled || st.PidsLimitHit {
		t.Errorf("stats %+v", st)
	}
	if st.MemoryPeakBytes < 8<<20 {
		t.Errorf("MemoryPeakBytes = %d, want >= 8 MiB", st.MemoryPeakBytes)
	}
}

func TestCPUTime(t *testing.T) {
	r := openTestRoot(t)
	c := create(t, r, "cpu", Limits{CPUs: 1})
	const burn = 200 * time.Millisecond
	script := fmt.Sprintf("import time\nt = time.process_time()\nwhile time.process_time() - t < %v: pass", burn.Seconds())
	ch := runIn(t, c, python(t), "-c", script)
	if err := ch.wait(); err != nil {
		t.Fatalf("python: %v", err)
	}
	st, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("CPU time %v", st.CPUTime)
	if st.CPUTime < burn || st.CPUTime > 30*time.Second {
		t.Errorf("CPUTime = %v, want >= %v", st.CPUTime, burn)
	}
}

func TestStartAccounting(t *testing.T) {
	r := openTestRoot(t)
	c := create(t, r, "acct", Limits{MemoryBytes: 256 << 20})
	// What a jail's set-up stands for: CPU time and memory used before
	// the program starts.
	burn := func(d time.Duration, mib int) {
		t.Helper()
		script := fmt.Sprintf("import time\nb = bytearray(%d << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\n"+
			"t = time.process_time()\nwhile time.process_time() - t < %v: pass", mib, d.Seconds())
		if err := runIn(t, c, python(t), "-c", script).wait(); err != nil {
			t.Fatalf("python: %v", err)
		}
	}
	burn(400*time.Millisecond, 96)
	before, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.StartAccounting(); err != nil {
		t.Fatal(err)
	}
	burn(100*time.Millisecond, 8)
	st, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("before: %+v; after StartAccounting: %+v", before, st)
	if st.CPUTime < 100*time.Millisecond || st.CPUTime >= before.CPUTime {
		t.Errorf("CPUTime = %v, want the second process's alone (>= 100ms, < the first's %v)", st.CPUTime, before.CPUTime)
	}
	resettable := r.Mode() != ModeV2 || c.peakFile != nil
	if r.Mode() == ModeV2 && !resettable && kernelAtLeast(t, 6, 12) {
		t.Error("kernel 6.12 or later, yet memory.peak was not reset")
	}
	switch {
	case before.MemoryPeakBytes < 96<<20:
		t.Errorf("first peak %d, want >= 96 MiB", before.MemoryPeakBytes)
	case resettable && (st.MemoryPeakBytes < 8<<20 || st.MemoryPeakBytes >= 64<<20):
		t.Errorf("MemoryPeakBytes = %d after the reset, want the second process's (8 MiB and Python)", st.MemoryPeakBytes)
	case !resettable && st.MemoryPeakBytes < before.MemoryPeakBytes:
		t.Errorf("MemoryPeakBytes = %d, want the unresettable peak (>= %d)", st.MemoryPeakBytes, before.MemoryPeakBytes)
	case !resettable:
		t.Log("memory.peak is read-only on this kernel (before 6.12): the peak still counts from the cgroup's creation")
	}
	// The final snapshot taken by Delete counts from the same point.
	if err := c.Delete(); err != nil {
		t.Fatal(err)
	}
	if final, err := c.Stats(); err != nil || final.CPUTime != st.CPUTime || final.MemoryPeakBytes != st.MemoryPeakBytes {
		t.Errorf("Stats after Delete = %+v, %v; want %+v", final, err, st)
	}
	if err := c.StartAccounting(); err == nil {
		t.Error("StartAccounting after Delete succeeded")
	}
}

// kernelAtLeast reports whether the running kernel is major.minor or later.
func kernelAtLeast(t *testing.T, major, minor int) bool {
	t.Helper()
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	var maj, min int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &maj, &min); err != nil {
		t.Fatalf("kernel release %q: %v", u.Release, err)
	}
	return maj > major || (maj == major && min >= minor)
}

func TestPidsLimit(t *testing.T) {
	r := openTestRoot(t)
	const limit = 8
	c := create(t, r, "pids", Limits{Pids: limit})
	ch := runIn(t, c, "sh", "-c", "i=0; while [ $i -lt 40 ]; do sleep 300 & i=$((i+1)); done; wait")
	// Let the loop run into the limit.
	deadline := time.Now().Add(5 * time.Second)
	var st Stats
	for {
		var err error
		if st, err = c.Stats(); err != nil {
			t.Fatal(err)
		}
		if st.PidsLimitHit || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !st.PidsLimitHit {
		t.Error("PidsLimitHit = false")
	}
	pids, err := c.Procs()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d processes in the cgroup", len(pids))
	if len(pids) == 0 || len(pids) > limit {
		t.Errorf("%d processes, want 1..%d", len(pids), limit)
	}
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = ch.wait() // sh may have died of SIGKILL or exited on the fork error
}

func TestKillDetached(t *testing.T) {
	r := openTestRoot(t)
	c := create(t, r, "detached", Limits{})
	// The grandchild leaves sh's session and process tree: setsid, double
	// fork, reparented to init. Only its cgroup still ties it to the run.
	ch := runIn(t, c, "sh", "-c", `setsid sh -c 'sleep 300 </dev/null >/dev/null 2>&1 & echo $!'; exec sleep 300`)
	line, err := ch.stdout.ReadString('\n')
	if err != nil {
		t.Fatalf("read grandchild pid: %v", err)
	}
	gpid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	pfd, err := unix.PidfdOpen(gpid, 0)
	if err != nil {
		t.Fatalf("pidfd_open(%d): %v", gpid, err)
	}
	defer unix.Close(pfd)
	if ok, err := c.isMember(gpid); !ok || err != nil {
		t.Fatalf("grandchild %d not in the run: %v %v", gpid, ok, err)
	}
	if sid, _ := unix.Getsid(gpid); sid == ch.pid() || sid == mySid(t) {
		t.Fatalf("grandchild session %d is not its own", sid)
	}
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	// The pidfd turns readable when the process has exited.
	fds := []unix.PollFd{{Fd: int32(pfd), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, 1000); err != nil || n != 1 {
		t.Fatalf("grandchild %d still alive after Kill (poll %d, %v)", gpid, n, err)
	}
	ch.waitKilled(t)
}

func TestSweep(t *testing.T) {
	name := fmt.Sprintf("cbtest-%d-sweep", os.Getpid())
	crashed := openNamedRoot(t, name)
	var chs []*child
	for _, id := range []string{"left1", "left2"} {
		c, err := crashed.Create(id, Limits{MemoryBytes: 64 << 20})
		if err != nil {
			t.Fatal(err)
		}
		chs = append(chs, runIn(t, c, "sleep", "300"))
		// The daemon "crashes": the Go object is dropped without Delete.
	}
	crashed.releaseLocks() // as the kernel does when a process dies
	fresh := openNamedRoot(t, name)
	live := create(t, fresh, "live", Limits{})
	n, err := fresh.Sweep()
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("Sweep removed %d, want 2", n)
	}
	for _, ch := range chs {
		ch.waitKilled(t)
	}
	for _, id := range []string{"left1", "left2"} {
		for _, d := range fresh.newCgroup(id).dirs {
			if exists(d) {
				t.Errorf("Sweep left %s", d)
			}
		}
	}
	for _, d := range live.dirs {
		if !exists(d) {
			t.Errorf("Sweep removed a live run: %s", d)
		}
	}
	if n, err := fresh.Sweep(); n != 0 || err != nil {
		t.Errorf("second Sweep = %d, %v", n, err)
	}
}

func TestClose(t *testing.T) {
	r := openTestRoot(t)
	c := create(t, r, "open", Limits{})
	// A run that still exists keeps the root directories.
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	for _, d := range c.dirs {
		if !exists(d) {
			t.Errorf("Close removed %s of a live run", d)
		}
	}
	if _, err := r.Create("late", Limits{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Create after Close: %v, want ErrClosed", err)
	}
	if err := c.Delete(); err != nil {
		t.Fatal(err)
	}
	// Now empty: a new root of the same name closes them away (checked by
	// openNamedRoot's clean-up).
	again := openNamedRoot(t, r.name)
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
}

func mySid(t *testing.T) int {
	t.Helper()
	sid, err := unix.Getsid(0)
	if err != nil {
		t.Fatal(err)
	}
	return sid
}

func TestKillForkLoop(t *testing.T) {
	r := openTestRoot(t)
	c := create(t, r, "forkloop", Limits{Pids: 256, MemoryBytes: 256 << 20})
	// Orphaned sleepers pile up while short-lived children churn. bash,
	// not sh: dash exits with status 2 on the first fork that the pids
	// limit refuses, and the test must kill a loop that is still going.
	ch := runIn(t, c, "bash", "-c", `while :; do (sleep 300 &); true & done 2>/dev/null`)
	// A few dozen is plenty; under emulation (the VM test) the loop
	// starts about three a second.
	var before []int
	for deadline := time.Now().Add(60 * time.Second); len(before) < 16; {
		if time.Now().After(deadline) {
			t.Fatalf("the loop started only %d processes", len(before))
		}
		time.Sleep(5 * time.Millisecond)
		before, _ = c.Procs()
	}
	start := time.Now()
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed %d+ processes in %v", len(before), time.Since(start))
	if pids, err := c.Procs(); err != nil || len(pids) != 0 {
		t.Errorf("after Kill: %v, %v", pids, err)
	}
	ch.waitKilled(t)
}

func TestConcurrentCreateDelete(t *testing.T) {
	r := openTestRoot(t)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 8 {
				id := fmt.Sprintf("g%d-%d", g, i)
				c, err := r.Create(id, Limits{MemoryBytes: 32 << 20, Pids: 8, CPUs: 0.5})
				if err != nil {
					errs <- err
					return
				}
				if err := c.Delete(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestConcurrentCreateSameID(t *testing.T) {
	r := openTestRoot(t)
	const n = 6
	var wg sync.WaitGroup
	made := make(chan *Cgroup, n)
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := r.Create("same", Limits{MemoryBytes: 32 << 20, Pids: 8, CPUs: 0.5})
			if err != nil {
				errs <- err
				return
			}
			made <- c
		}()
	}
	wg.Wait()
	close(made)
	close(errs)
	var got []*Cgroup
	for c := range made {
		got = append(got, c)
		t.Cleanup(func() {
			if err := c.Delete(); err != nil {
				t.Errorf("cleanup delete: %v", err)
			}
		})
	}
	if len(got) != 1 {
		t.Fatalf("%d of %d concurrent Creates of one id succeeded, want 1", len(got), n)
	}
	for err := range errs {
		if !errors.Is(err, ErrExists) {
			t.Errorf("a concurrent Create of a live id: %v, want ErrExists", err)
		}
	}
	for _, d := range got[0].dirs {
		if !exists(d) {
			t.Errorf("the created run lacks %s", d)
		}
	}
}

// TestSweepDuringCreate sweeps over and over while runs are being created:
// a run being created is not a leftover.
func TestSweepDuringCreate(t *testing.T) {
	r := openTestRoot(t)
	stop := make(chan struct{})
	swept := make(chan error, 1)
	go func() {
		n := 0
		var err error
		for err == nil {
			select {
			case <-stop:
				if n > 0 {
					err = fmt.Errorf("Sweep removed %d cgroups of runs being created", n)
				}
				swept <- err
				return
			default:
			}
			var k int
			k, err = r.Sweep()
			n += k
		}
		swept <- err
	}()
	var live []*Cgroup
	for i := range 16 {
		c, err := r.Create(fmt.Sprintf("s%d", i), Limits{MemoryBytes: 32 << 20, Pids: 8})
		if err != nil {
			t.Error(err)
			continue
		}
		live = append(live, c)
	}
	close(stop)
	if err := <-swept; err != nil {
		t.Error(err)
	}
	for _, c := range live {
		for _, d := range c.dirs {
			if !exists(d) {
				t.Errorf("run %s lost %s", c.id, d)
			}
		}
		if err := c.Delete(); err != nil {
			t.Error(err)
		}
	}
}

func TestSweepLeavesSharedHierarchiesAlone(t *testing.T) {
	r := openTestRoot(t)
	var shared hierarchy
	for _, h := range r.hiers {
		if !h.private && h.key != "" && h.key != "cpuset" { // cpuset would need cpus and mems
			shared = h
			break
		}
	}
	if shared.key == "" {
		t.Skip("no hierarchy shared at its root on this host")
	}
	// Somebody else's run, visible only in a hierarchy shared at its root.
	foreign := filepath.Join(shared.own, r.name, "foreign")
	if err := os.Mkdir(foreign, 0o755); err != nil {
		t.Fatal(err)
	}
	ch := startGated(t, "sleep", "300")
	t.Cleanup(func() {
		_ = ch.cmd.Process.Kill()
		_ = ch.wait()
		if err := removeTree(foreign); err != nil {
			t.Error(err)
		}
	})
	if err := writeFile(foreign, "cgroup.procs", strconv.Itoa(ch.pid())); err != nil {
		t.Fatal(err)
	}
	if err := ch.open(); err != nil {
		t.Fatal(err)
	}
	n, err := r.Sweep()
	if err != nil || n != 0 {
		t.Errorf("Sweep = %d, %v; want 0, nil", n, err)
	}
	if !exists(foreign) {
		t.Error("Sweep removed a foreign directory")
	}
	if err := unix.Kill(ch.pid(), 0); err != nil {
		t.Errorf("Sweep killed a foreign process: %v", err)
	}
}

// A second root of the same name is refused while the first is open,
// naming the holder (this process), and has changed nothing; once the
// first is closed it opens.
func TestOpenRootInUse(t *testing.T) {
	first := openTestRoot(t)
	c := create(t, first, "live", Limits{})
	_, err := OpenRoot(first.name)
	var inUse *InUseError
	if !errors.Is(err, ErrInUse) || !errors.As(err, &inUse) {
		t.Fatalf("second OpenRoot: %v, want ErrInUse", err)
	}
	if inUse.PID != os.Getpid() || inUse.Name != first.name || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Errorf("the error names %+v: %v", inUse, err)
	}
	for _, d := range c.dirs {
		if !exists(d) {
			t.Errorf("the refused root removed %s", d)
		}
	}
	if err := c.Delete(); err != nil {
		t.Fatal(err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	openNamedRoot(t, first.name)
}

func TestParseLocks(t *testing.T) {
	const locks = `1: POSIX  ADVISORY  WRITE 100 00:20:72866 0 EOF
2: FLOCK  ADVISORY  WRITE 24659 00:20:72866 0 EOF
2: -> FLOCK  ADVISORY  WRITE 300 00:20:72866 0 EOF
3: FLOCK  ADVISORY  WRITE 400 fd:01:72866 0 EOF
`
	for _, c := range []struct {
		major, minor uint32
		ino          uint64
		want         int
	}{
		{0, 0x20, 72866, 24659},
		{0xfd, 1, 72866, 400},
		{0, 0x20, 1, 0},
		{0, 0x21, 72866, 0},
	} {
		if got := parseLocks(bufio.NewScanner(strings.NewReader(locks)), c.major, c.minor, c.ino); got != c.want {
			t.Errorf("%x:%x:%d: pid %d, want %d", c.major, c.minor, c.ino, got, c.want)
		}
	}
}
