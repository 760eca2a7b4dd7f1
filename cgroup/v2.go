package cgroup

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/cgroups/v3/cgroup2"
	"golang.org/x/sys/unix"
)

// runControllers are the controllers runs need on cgroup v2.
var runControllers = []string{"cpu", "memory", "pids"}

func (r *Root) openV2(mounts []mountEntry, own map[string]string) error {
	l, err := layoutV2(mounts, own)
	if err != nil {
		return err
	}
	return r.initV2(l)
}

// initV2 sets up the daemon's subtree described by l.
func (r *Root) initV2(l v2Layout) (err error) {
	r.v2 = l
	r.runsDir = filepath.Join(l.ownDir, runsDir)
	// <own> is locked before anything in it changes; it is the daemon's
	// delegated cgroup, never removed by this package.
	if r.locks, err = lockDirs(r.name, []string{l.ownDir}); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			r.releaseLocks()
		}
	}()

	// No internal processes: the daemon leaves <own> for the leaf
	// <own>/daemon before controllers are enabled in <own>. Writing the pid
	// to cgroup.procs moves every thread of the process.
	leaf := filepath.Join(l.ownDir, daemonLeaf)
	if _, err := mkdirNew(leaf); err != nil {
		return fmt.Errorf("%w: create %s: %v", ErrNotDelegated, leaf, err)
	}
	if !l.inLeaf {
		m, err := cgroup2.Load(path.Join(l.ownPath, daemonLeaf), cgroup2.WithMountpoint(l.mountpoint))
		if err == nil {
			err = m.AddProc(uint64(os.Getpid()))
		}
		if err != nil {
			return fmt.Errorf("%w: move daemon into %s: %v", ErrNotDelegated, leaf, err)
		}
	}
	own, err := cgroup2.Load(l.ownPath, cgroup2.WithMountpoint(l.mountpoint))
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrUnsupported, l.ownDir, err)
	}
	avail, err := own.Controllers()
	if err != nil {
		return fmt.Errorf("read controllers of %s: %w", l.ownDir, err)
	}
	var want []string
	for _, c := range runControllers {
		if slices.Contains(avail, c) {
			want = append(want, c)
		}
	}
	if err := enableControllers(l.ownDir, want); err != nil {
		return err
	}
	created, err := mkdirNew(r.runsDir)
	if err != nil {
		return fmt.Errorf("create %s: %w", r.runsDir, err)
	}
	if err := enableControllers(r.runsDir, want); err != nil {
		if created {
			_ = rmdirIfEmpty(r.runsDir)
		}
		return err
	}
	r.controls = v2Controls{
		cpu:    slices.Contains(want, "cpu"),
		memory: slices.Contains(want, "memory"),
		pids:   slices.Contains(want, "pids"),
	}
	return nil
}

// enableControllers turns on ctls in dir's cgroup.subtree_control (those
// not on already). EBUSY means dir still has processes of its own. A
// direct write (doc.go): containerd's ToggleControllers writes the
// subtree_control of every ancestor too, which are not the daemon's.
func enableControllers(dir string, ctls []string) error {
	cur, err := readString(dir, "cgroup.subtree_control")
	if err != nil {
		return fmt.Errorf("read subtree_control of %s: %w", dir, err)
	}
	var add []string
	for _, c := range ctls {
		if !slices.Contains(strings.Fields(cur), c) {
			add = append(add, "+"+c)
		}
	}
	if len(add) == 0 {
		return nil
	}
	if err := writeFile(dir, "cgroup.subtree_control", strings.Join(add, " ")); err != nil {
		if errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("%w: %s has processes besides the daemon: %v", ErrNotDelegated, dir, err)
		}
		return fmt.Errorf("%w: %v", ErrNotDelegated, err)
	}
	return nil
}

func (r *Root) createV2(c *Cgroup, l Limits) error {
	for _, need := range []struct {
		set, have bool
		name      string
	}{{l.MemoryBytes > 0, r.controls.memory, "memory"}, {l.Pids > 0, r.controls.pids, "pids"}, {l.CPUs > 0, r.controls.cpu, "cpu"}} {
		if need.set && !need.have {
			return fmt.Errorf("%w: %s", ErrNoController, need.name)
		}
	}
	dir := c.dirs[0]
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%w: %s", ErrExists, dir)
		}
		return err
	}
	ctl := r.controls
	ctl.swap = exists(filepath.Join(dir, "memory.swap.max"))
	// Load, not NewManager: NewManager would write subtree_control in every
	// ancestor up to the root, which is systemd's, not ours.
	m, err := cgroup2.Load(c.LibcontainerPath(), cgroup2.WithMountpoint(r.v2.mountpoint))
	if err != nil {
		return err
	}
	if err := m.Update(v2Resources(l, ctl)); err != nil {
		return fmt.Errorf("set limits: %w", err)
	}
	c.cg2 = m
	c.v2ctl = ctl
	c.hasPeak = exists(filepath.Join(dir, "memory.peak"))
	return nil
}

func (c *Cgroup) statsV2() (Stats, error) {
	// Only the files a run reports, read directly (memory.stat, which the
	// library parses whole, is not one of them).
	dir := c.dirs[0]
	var st Stats
	// cpu.stat's usage is there with or without the cpu controller.
	us, _, err := readKeyed(dir, "cpu.stat", "usage_usec")
	if err != nil {
		return Stats{}, err
	}
	st.CPUTime = time.Duration(us) * time.Microsecond
	if c.v2ctl.memory {
		var err error
		switch {
		case c.peakFile != nil:
			// Reset by StartAccounting: this descriptor's own peak.
			st.MemoryPeakBytes, err = readPeak(c.peakFile)
		case c.hasPeak:
			st.MemoryPeakBytes, err = readInt(dir, "memory.peak") // kernel >= 5.19
		default:
			// Without memory.peak the best there is: the highest
			// memory.current any Stats call has seen.
			var cur int64
			cur, err = readInt(dir, "memory.current")
			c.peakSeen = max(c.peakSeen, cur)
			st.MemoryPeakBytes = c.peakSeen
		}
		if err != nil {
			return Stats{}, err
		}
		n, _, err := readKeyed(dir, "memory.events", "oom_kill")
		if err != nil {
			return Stats{}, err
		}
		st.OOMKilled = n > 0
	}
	n, _, err := readKeyed(dir, "pids.events", "max")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return Stats{}, err
	}
	st.PidsLimitHit = n > 0
	return st, nil
}

// startAccountingV2 notes the CPU time used so far (cpu.stat usage_usec)
// and, where the kernel allows it (6.12 and later: memory.peak is
// writable), resets memory.peak for a descriptor that Stats reads from.
func (c *Cgroup) startAccountingV2() error {
	dir := c.dirs[0]
	usec, _, err := readKeyed(dir, "cpu.stat", "usage_usec")
	if err != nil {
		return err
	}
	c.cpuBefore = time.Duration(usec) * time.Microsecond
	if !c.hasPeak || c.peakFile != nil {
		return nil
	}
	p := filepath.Join(dir, "memory.peak")
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o200 == 0 {
		return nil // read-only before 6.12: the peak counts from the cgroup's creation
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString("reset\n"); err != nil {
		f.Close()
		return fmt.Errorf("reset %s: %w", p, err)
	}
	c.peakFile = f
	return nil
}

// readPeak reads memory.peak through f from its start.
func readPeak(f *os.File) (int64, error) {
	buf := make([]byte, 32)
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("read %s: %w", f.Name(), err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(buf[:n])), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s %q: %w", f.Name(), buf[:n], err)
	}
	return v, nil
}
