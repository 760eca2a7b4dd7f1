package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The cgroup v2 code runs for real only on a v2 host, where the tests in
// root_test.go cover it. On a hybrid host these tests drive the same code
// over a private subtree of the (controller-less) cgroup2 hierarchy at
// /sys/fs/cgroup/unified: daemon leaf, runs directory, creation, membership,
// cgroup.kill and the freeze fallback, CPU statistics, sweep and removal.
// Limits cannot be tested there (no memory, pids or cpu controller).

// openUnifiedV2Root moves the test process into a fresh cgroup below its own
// cgroup in the hybrid unified hierarchy and opens a v2 Root there. At
// cleanup the process moves back and every directory must be gone.
func openUnifiedV2Root(t *testing.T) *Root {
	t.Helper()
	needRoot(t)
	if detectMode() != ModeHybrid {
		t.Skip("drives the v2 code on a hybrid host's unified hierarchy; on v2 hosts the root tests do")
	}
	mounts, err := readMountinfo()
	if err != nil {
		t.Fatal(err)
	}
	m, ok := lastMountAt(mounts, hybridMountpoint)
	if !ok {
		t.Fatal("no unified mount")
	}
	own, err := readProcCgroup(0)
	if err != nil {
		t.Fatal(err)
	}
	origDir, ok := cgroupDir(hybridMountpoint, m.root, own[""])
	if !ok {
		t.Fatalf("own cgroup2 %q outside the mount", own[""])
	}
	name := fmt.Sprintf("cbtest-v2-%d-%d", os.Getpid(), testSeq.Add(1))
	l := v2Layout{
		mountpoint: hybridMountpoint,
		mountRoot:  m.root,
		ownPath:    path.Join(own[""], name),
		ownDir:     filepath.Join(origDir, name),
	}
	if err := os.Mkdir(l.ownDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := writeFile(origDir, "cgroup.procs", strconv.Itoa(os.Getpid())); err != nil {
			t.Errorf("move test process back: %v", err)
		}
		for _, d := range []string{filepath.Join(l.ownDir, daemonLeaf), l.ownDir} {
			if err := removeTree(d); err != nil {
				t.Errorf("remove %s: %v", d, err)
			}
		}
	})
	// The daemon's "own" cgroup: it sits there alone, as a service would.
	if err := writeFile(l.ownDir, "cgroup.procs", strconv.Itoa(os.Getpid())); err != nil {
		t.Fatal(err)
	}
	return initTestV2Root(t, name, l)
}

func initTestV2Root(t *testing.T, name string, l v2Layout) *Root {
	t.Helper()
	r := &Root{mode: ModeV2, name: name, live: make(map[string]*Cgroup)}
	if err := r.initV2(l); err != nil {
		t.Fatalf("initV2: %v", err)
	}
	t.Cleanup(func() {
		if _, err := r.Sweep(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("cleanup sweep: %v", err)
		}
		if err := r.Close(); err != nil {
			t.Errorf("cleanup close: %v", err)
		}
		if exists(r.runsDir) {
			t.Errorf("left behind: %s", r.runsDir)
		}
	})
	return r
}

func TestV2DaemonLeafAndRuns(t *testing.T) {
	r := openUnifiedV2Root(t)
	own, err := readProcCgroup(0)
	if err != nil {
		t.Fatal(err)
	}
	if want := path.Join(r.v2.ownPath, daemonLeaf); own[""] != want {
		t.Errorf("daemon in %q, want %q", own[""], want)
	}
	if procs, err := readString(r.v2.ownDir, "cgroup.procs"); err != nil || procs != "" {
		t.Errorf("processes left in <own>: %q, %v", procs, err)
	}
	if !exists(r.runsDir) {
		t.Fatalf("no %s", r.runsDir)
	}

	c := create(t, r, "v2run", Limits{})
	if got, want := c.LibcontainerPath(), path.Join(r.v2.ownPath, "runs", "v2run"); got != want {
		t.Errorf("LibcontainerPath = %q, want %q", got, want)
	}
	if !strings.HasPrefix(c.LibcontainerPath(), "/") {
		t.Error("v2 path must be absolute")
	}
	for _, l := range []Limits{{MemoryBytes: 1 << 20}, {Pids: 4}, {CPUs: 1}} {
		if _, err := r.Create("nolimit", l); !errors.Is(err, ErrNoController) {
			t.Errorf("Create(%+v) without controllers: %v, want ErrNoController", l, err)
		}
		if exists(filepath.Join(r.runsDir, "nolimit")) {
			t.Error("failed Create left its directory")
		}
	}

	ch := runIn(t, c, "sleep", "300")
	pids, err := c.Procs()
	if err != nil || !slices.Contains(pids, ch.pid()) {
		t.Fatalf("Procs() = %v, %v; want %d", pids, err, ch.pid())
	}
	if ok, err := c.isMember(ch.pid()); !ok || err != nil {
		t.Errorf("isMember(child) = %v, %v", ok, err)
	}
	if ok, _ := c.isMember(os.Getpid()); ok {
		t.Error("the daemon is a member of a run")
	}
	if !c.hasKillFile {
		t.Fatal("kernel without cgroup.kill")
	}
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	ch.waitKilled(t)

	// A sub-cgroup inside the run (as a nested manager might make) goes too.
	sub := filepath.Join(c.dirs[0], "inner")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	ch = startGated(t, "sleep", "300")
	if err := writeFile(sub, "cgroup.procs", strconv.Itoa(ch.pid())); err != nil {
		t.Fatal(err)
	}
	if err := ch.open(); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(); err != nil {
		t.Fatal(err)
	}
	ch.waitKilled(t)
	if exists(c.dirs[0]) {
		t.Errorf("Delete left %s", c.dirs[0])
	}
}

func TestV2KillFallbackDetached(t *testing.T) {
	r := openUnifiedV2Root(t)
	c := create(t, r, "fallback", Limits{})
	c.hasKillFile = false // kernel < 5.14: freeze, SIGKILL members, thaw
	ch := runIn(t, c, "sh", "-c", `setsid sh -c 'sleep 300 </dev/null >/dev/null 2>&1 & echo $!'; exec sleep 300`)
	line, err := ch.stdout.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	gpid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	pfd, err := unix.PidfdOpen(gpid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pfd)
	start := time.Now()
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Logf("fallback kill took %v", time.Since(start))
	ch.waitKilled(t)
	if pids, _ := c.Procs(); len(pids) != 0 {
		t.Errorf("left: %v", pids)
	}
	// Exited (perhaps not yet reaped by init, so /proc still shows it).
	if n, err := unix.Poll([]unix.PollFd{{Fd: int32(pfd), Events: unix.POLLIN}}, 1000); n != 1 {
		t.Errorf("grandchild %d alive after Kill (%v)", gpid, err)
	}
	if frozen, _, _ := readKeyed(c.dirs[0], "cgroup.events", "frozen"); frozen != 0 {
		t.Error("run left frozen")
	}
}

func TestV2CPUStatsAndSweep(t *testing.T) {
	r := openUnifiedV2Root(t)
	c := create(t, r, "cpu", Limits{})
	const burn = 200 * time.Millisecond
	script := fmt.Sprintf("import time\nt = time.process_time()\nwhile time.process_time() - t < %v: pass", burn.Seconds())
	ch := runIn(t, c, python(t), "-c", script)
	if err := ch.wait(); err != nil {
		t.Fatal(err)
	}
	st, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.CPUTime < burn || st.OOMKilled || st.PidsLimitHit {
		t.Errorf("stats %+v", st)
	}

	// A crashed daemon restarts in its leaf and sweeps.
	left, err := r.Create("left", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	sleeper := runIn(t, left, "sleep", "300")
	l := r.v2
	l.inLeaf = true
	r.releaseLocks() // the crash: the kernel drops a dead process's locks
	fresh := initTestV2Root(t, r.name, l)
	n, err := fresh.Sweep()
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("Sweep removed %d, want 2 (cpu and left)", n)
	}
	sleeper.waitKilled(t)
	for _, d := range append(left.dirs, c.dirs...) {
		if exists(d) {
			t.Errorf("Sweep left %s", d)
		}
	}
}
