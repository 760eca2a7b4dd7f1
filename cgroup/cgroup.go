package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Cgroup is the cgroup of one run, in every hierarchy its processes join.
// Its methods are safe for concurrent use.
type Cgroup struct {
	root *Root
	id   string
	// dirs are the distinct directories of the run, one per hierarchy on
	// v1/hybrid (co-mounted controllers share one), one on v2.
	dirs []string
	// byKey maps each v1/hybrid hierarchy to its directory.
	byKey []keyDir

	cg1   cgroup1.Cgroup   // v1/hybrid, nil for a swept leftover
	cg2   *cgroup2.Manager // v2, nil for a swept leftover
	v2ctl v2Controls       // v2: what the run's directory offers

	hasKillFile   bool // v2: cgroup.kill (kernel >= 5.14)
	hasFreezeFile bool // v2: cgroup.freeze (kernel >= 5.2)
	hasPeak       bool // v2: memory.peak (kernel >= 5.19)

	mu       sync.Mutex
	limits   Limits // as last written by Create or Update
	peakSeen int64  // v2 without memory.peak: highest memory.current seen
	deleted  bool   // Delete succeeded
	final    *Stats // snapshot taken by Delete, nil if it failed
	// Set by StartAccounting: the CPU time used before it, and on v2
	// (kernel >= 6.12) a memory.peak descriptor whose peak was reset.
	cpuBefore time.Duration
	peakFile  *os.File
}

type keyDir struct {
	h   hierarchy
	dir string
}

// ID returns the run id.
func (c *Cgroup) ID() string { return c.id }

// LibcontainerPath is the configs.Cgroup.Path to give libcontainer so that
// every directory it joins is one this package created: "<name>/<id>"
// (relative: libcontainer adds the daemon's own cgroup per hierarchy) on
// v1/hybrid, the absolute "<own>/runs/<id>" (libcontainer prepends
// /sys/fs/cgroup) on v2.
func (c *Cgroup) LibcontainerPath() string {
	if c.root.mode == ModeV2 {
		return path.Join(c.root.v2.ownPath, runsDir, c.id)
	}
	return c.root.name + "/" + c.id
}

// dirFor returns the run's directory in the v1 hierarchy with key, or "".
func (c *Cgroup) dirFor(key string) string {
	for _, kd := range c.byKey {
		if kd.h.key == key {
			return kd.dir
		}
	}
	return ""
}

// Stats reads the run's statistics. They remain readable after all its
// processes have exited (the OOM kill counter and the peaks included),
// until Delete; after Delete, Stats returns the snapshot Delete took.
func (c *Cgroup) Stats() (Stats, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.deleted {
		if c.final == nil {
			return Stats{}, fmt.Errorf("stats of cgroup for run %s: deleted without a final snapshot", c.id)
		}
		return *c.final, nil
	}
	st, err := c.stats()
	if err != nil {
		return Stats{}, fmt.Errorf("stats of cgroup for run %s: %w", c.id, err)
	}
	return st, nil
}

func (c *Cgroup) stats() (Stats, error) {
	// The libraries read a missing file as zero; a removed cgroup (e.g. by
	// libcontainer's Destroy) must not look like an idle run.
	if !exists(c.dirs[0]) {
		return Stats{}, &os.PathError{Op: "stat", Path: c.dirs[0], Err: os.ErrNotExist}
	}
	var st Stats
	var err error
	if c.root.mode == ModeV2 {
		st, err = c.statsV2()
	} else {
		st, err = c.statsV1()
	}
	st.CPUTime = max(st.CPUTime-c.cpuBefore, 0)
	return st, err
}

// MemoryUsage reads the run's memory usage now (v2 memory.current, v1
// memory.usage_in_bytes); 0 without the memory controller.
func (c *Cgroup) MemoryUsage() (int64, error) {
	var n int64
	var err error
	switch {
	case c.root.mode == ModeV2 && c.v2ctl.memory:
		n, err = readInt(c.dirs[0], "memory.current")
	case c.root.mode != ModeV2:
		if dir := c.dirFor("memory"); dir != "" {
			n, err = readInt(dir, "memory.usage_in_bytes")
		}
	}
	if err != nil {
		return 0, fmt.Errorf("memory usage of cgroup for run %s: %w", c.id, err)
	}
	return n, nil
}

// StartAccounting makes the statistics count from now on. A jail's own
// set-up (libcontainer's init, the jail's pid 1) runs in the run's cgroup
// before the program does, and for a jail built ahead of its request that
// can be several times the CPU time of a short program. After this call
// Stats leaves out the CPU time used so far and reports the memory peak
// from the current usage on: v1 resets memory.max_usage_in_bytes, v2
// resets memory.peak for a descriptor kept open (kernel >= 6.12). Older v2
// kernels cannot reset the peak, which then still includes the set-up's.
func (c *Cgroup) StartAccounting() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.deleted || (c.cg1 == nil && c.cg2 == nil) {
		return fmt.Errorf("start accounting of cgroup for run %s: %w", c.id, ErrUnsupported)
	}
	var err error
	if c.root.mode == ModeV2 {
		err = c.startAccountingV2()
	} else {
		err = c.startAccountingV1()
	}
	if err != nil {
		return fmt.Errorf("start accounting of cgroup for run %s: %w", c.id, err)
	}
	return nil
}

// Procs returns the pids of all processes in the run's cgroups (in any
// hierarchy, including sub-cgroups), sorted. After Delete it returns none.
func (c *Cgroup) Procs() ([]int, error) {
	pids, err := c.procs()
	if err != nil {
		return nil, fmt.Errorf("list processes of cgroup for run %s: %w", c.id, err)
	}
	return pids, nil
}

func (c *Cgroup) procs() ([]int, error) {
	var all []int
	for _, d := range c.dirs {
		pids, err := readProcs(d)
		if err != nil {
			return nil, err
		}
		all = append(all, pids...)
	}
	return sortUnique(all), nil
}

// isMember reports whether pid's /proc/<pid>/cgroup places it in (or below)
// one of the run's directories.
func (c *Cgroup) isMember(pid int) (bool, error) {
	own, err := readProcCgroup(pid)
	if err != nil {
		if isGone(err) {
			return false, nil
		}
		return false, err
	}
	if c.root.mode == ModeV2 {
		p, ok := own[""]
		if !ok {
			return false, nil
		}
		d, ok := cgroupDir(c.root.v2.mountpoint, c.root.v2.mountRoot, p)
		return ok && within(d, c.dirs[0]), nil
	}
	for _, kd := range c.byKey {
		p, ok := ownCgroupPath(own, kd.h.key)
		if !ok {
			continue
		}
		if d, ok := kd.h.toDir(p); ok && within(d, kd.dir) {
			return true, nil
		}
	}
	return false, nil
}

func within(dir, top string) bool {
	return dir == top || strings.HasPrefix(dir, top+"/")
}

// Kill sends SIGKILL to every process in the run's cgroups, however
// detached (new sessions, double forks, reparented orphans), and returns
// once the cgroups are empty, or an error wrapping ErrKillTimeout after a
// bounded wait (2 s). It does not reap: zombies of the caller's children do
// not count as members.
func (c *Cgroup) Kill() error {
	if err := c.kill(); err != nil {
		return fmt.Errorf("kill cgroup for run %s: %w", c.id, err)
	}
	return nil
}

// Delete kills whatever is left in the run, then removes every directory
// this package created for it. It keeps a final Stats snapshot. Calling it
// again after success is a no-op.
func (c *Cgroup) Delete() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.deleted {
		return nil
	}
	if err := c.kill(); err != nil {
		return fmt.Errorf("delete cgroup for run %s: %w", c.id, err)
	}
	if c.cg1 != nil || c.cg2 != nil {
		if st, err := c.stats(); err == nil {
			c.final = &st
		}
	}
	if c.peakFile != nil {
		c.peakFile.Close()
		c.peakFile = nil
	}
	if err := c.removeDirs(); err != nil {
		return fmt.Errorf("delete cgroup for run %s: %w", c.id, err)
	}
	c.deleted = true
	c.root.forget(c)
	return nil
}

func (c *Cgroup) removeDirs() error {
	var errs []error
	for _, d := range slices.Backward(c.dirs) {
		if err := removeTree(d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Update replaces the run's limits, e.g. when a jail built ahead of time
// is claimed by a request with limits of its own. It writes only what
// changed: nothing for the same limits, one file each for Background and
// Pids when only they do. Lowering the memory limit
// below what the run uses already fails (v1) or reclaims and OOM-kills
// (v2), so it is meant for a run whose program has not started.
func (c *Cgroup) Update(l Limits) error {
	if err := l.Validate(); err != nil {
		return fmt.Errorf("update cgroup for run %s: %w", c.id, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	sameMemoryAndCPU := c.limits
	sameMemoryAndCPU.Background, sameMemoryAndCPU.Pids = l.Background, l.Pids
	switch {
	case c.deleted:
		err = errors.New("already deleted")
	case c.cg1 == nil && c.cg2 == nil:
		err = fmt.Errorf("%w: a swept cgroup has no limits to update", ErrUnsupported)
	case l == c.limits:
		return nil // nothing to write
	case sameMemoryAndCPU == l:
		// The common claim of a prestarted jail: a file or two, not all.
		if l.Background != c.limits.Background {
			err = c.writeWeight(l)
		}
		if err == nil && l.Pids != c.limits.Pids {
			err = c.writePids(l)
		}
	case c.cg2 != nil:
		err = c.cg2.Update(v2Resources(l, c.v2ctl))
	default:
		err = c.raiseMemswFirst(l.MemoryBytes)
		if err == nil {
			err = c.cg1.Update(v1Resources(l, c.root.memsw))
		}
	}
	if err != nil {
		return fmt.Errorf("update cgroup for run %s: %w", c.id, err)
	}
	c.limits = l
	return nil
}

// writeWeight writes the CPU weight of l (Limits.Background) alone:
// cpu.weight on v2, cpu.shares on v1.
func (c *Cgroup) writeWeight(l Limits) error {
	if c.cg2 != nil {
		if !c.v2ctl.cpu {
			return nil
		}
		w := l.weight()
		return c.cg2.Update(&cgroup2.Resources{CPU: &cgroup2.CPU{Weight: &w}})
	}
	shares := l.shares()
	return c.updateV1(cgroup1.Cpu, &specs.LinuxResources{CPU: &specs.LinuxCPU{Shares: &shares}})
}

// writePids writes the tasks limit of l alone: pids.max.
func (c *Cgroup) writePids(l Limits) error {
	if c.cg2 != nil {
		if !c.v2ctl.pids {
			return nil
		}
		limit := l.Pids
		if limit <= 0 {
			limit = -1 // "max"
		}
		return c.cg2.Update(&cgroup2.Resources{Pids: &cgroup2.Pids{Max: limit}})
	}
	if l.Pids <= 0 {
		// No limit: containerd's v1 pids controller writes only a
		// positive one (doc.go).
		if dir := c.dirFor("pids"); dir != "" {
			return writeFile(dir, "pids.max", "max")
		}
		return nil
	}
	pids := l.Pids
	return c.updateV1(cgroup1.Pids, &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: &pids}})
}

// v1Updater is what containerd's cgroup1 controllers that take limits
// do: write res's part for them to the cgroup at path.
type v1Updater interface {
	Update(path string, res *specs.LinuxResources) error
}

// updateV1 writes res through containerd's controller of the v1 subsystem
// name alone: the run's cgroup1.Cgroup would give every subsystem res, a
// few dozen system calls on the path of a jail's claim. A subsystem not
// mounted has nothing to write.
func (c *Cgroup) updateV1(name cgroup1.Name, res *specs.LinuxResources) error {
	for _, s := range c.root.cg1.Subsystems() {
		if s.Name() != name {
			continue
		}
		u, ok := s.(v1Updater)
		if !ok {
			return fmt.Errorf("%w: containerd's %s controller takes no limits", ErrUnsupported, name)
		}
		p, err := c.root.v1Path(c.id)(name)
		if err != nil {
			return nil // not one of the run's hierarchies
		}
		return u.Update(p, res)
	}
	return nil
}

// raiseMemswFirst writes the v1 memory+swap limit ahead of a higher memory
// limit: the kernel refuses a memory limit above memory+swap, and
// containerd's cgroup1 (v3.1.3) reorders the wrong pair of settings when
// it tries to handle that case itself.
func (c *Cgroup) raiseMemswFirst(limit int64) error {
	mem := c.dirFor("memory")
	if !c.root.memsw || limit <= 0 || mem == "" {
		return nil
	}
	cur, err := readString(mem, "memory.limit_in_bytes")
	if err != nil {
		return err
	}
	n, err := strconv.ParseInt(cur, 10, 64)
	if err != nil || limit <= n {
		return nil // unlimited (a huge number) or lowering: containerd's order is right
	}
	return writeFile(mem, "memory.memsw.limit_in_bytes", strconv.FormatInt(limit, 10))
}
