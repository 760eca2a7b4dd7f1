package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// containerdName maps libcontainer's hierarchy key to containerd's
// subsystem name.
func containerdName(key string) cgroup1.Name {
	if key == "name=systemd" {
		return "systemd"
	}
	return cgroup1.Name(key)
}

// v1Path returns containerd's cgroup1.Path for <own>/<name>/<suffix>:
// containerd places a subsystem's cgroups below /sys/fs/cgroup/<subsystem>,
// so the path is <own> relative to the hierarchy's mount point.
func (r *Root) v1Path(suffix string) cgroup1.Path {
	rel := make(map[cgroup1.Name]string)
	for _, h := range r.hiers {
		if h.key == "" {
			continue // cgroup2 in hybrid mode: handled by this package
		}
		p, err := filepath.Rel(h.mountpoint, h.own)
		if err != nil {
			continue
		}
		rel[containerdName(h.key)] = filepath.Join("/", p, r.name, suffix)
	}
	return func(n cgroup1.Name) (string, error) {
		p, ok := rel[n]
		if !ok {
			return "", cgroup1.ErrControllerNotActive
		}
		return p, nil
	}
}

type pather interface {
	Path(string) string
}

func (r *Root) openV1(mounts []mountEntry, own map[string]string) (err error) {
	r.hiers, err = layoutV1(mounts, own, r.mode == ModeHybrid)
	if err != nil {
		return err
	}
	markPrivate(r.hiers)
	// Create <own>/<name> everywhere; containerd copies cpuset.cpus/mems
	// down from the parent so that tasks can join.
	var created []string
	defer func() {
		if err != nil {
			for _, d := range created {
				_ = rmdirIfEmpty(d)
			}
		}
	}()
	// The private directories first, locked before anything else is
	// made: another daemon's are left as they are.
	private := r.privateRootDirs()
	for _, d := range private {
		ok, err := mkdirNew(d)
		if err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
		if ok {
			created = append(created, d)
		}
	}
	if r.locks, err = lockDirs(r.name, private); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			r.releaseLocks()
		}
	}()
	for _, d := range r.rootDirs() {
		ok, err := mkdirNew(d)
		if err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
		if ok {
			created = append(created, d)
		}
	}
	path := r.v1Path("")
	r.cg1, err = cgroup1.New(path, &specs.LinuxResources{})
	if err != nil {
		return fmt.Errorf("create root cgroups: %w", err)
	}
	// containerd must be looking at the same directories as libcontainer.
	want := make(map[cgroup1.Name]string)
	for _, h := range r.hiers {
		if h.key != "" {
			want[containerdName(h.key)] = filepath.Join(h.own, r.name)
		}
	}
	for _, s := range r.cg1.Subsystems() {
		ps, ok := s.(pather)
		if !ok {
			continue
		}
		p, err := path(s.Name())
		if err != nil {
			return err
		}
		if err := sameDir(ps.Path(p), want[s.Name()]); err != nil {
			return fmt.Errorf("%w: containerd's %s cgroup differs from libcontainer's: %v", ErrUnsupported, s.Name(), err)
		}
	}
	if mem := r.dirForRoot("memory"); mem != "" {
		if err := ensureUseHierarchy(mem); err != nil {
			return err
		}
		r.memsw = exists(filepath.Join(mem, "memory.memsw.limit_in_bytes"))
	}
	return nil
}

func sameDir(a, b string) error {
	if b == "" {
		return fmt.Errorf("%s is not one of ours", a)
	}
	sa, err := os.Stat(a)
	if err != nil {
		return err
	}
	sb, err := os.Stat(b)
	if err != nil {
		return err
	}
	if !os.SameFile(sa, sb) {
		return fmt.Errorf("%s is not %s", a, b)
	}
	return nil
}

// ensureUseHierarchy makes sure limits and accounting of the memory
// controller cover sub-cgroups (always on since Linux 6.0; the file is gone
// or fixed at 1 there).
func ensureUseHierarchy(dir string) error {
	v, err := readString(dir, "memory.use_hierarchy")
	if errors.Is(err, os.ErrNotExist) || (err == nil && v == "1") {
		return nil
	}
	if err != nil {
		return err
	}
	if err := writeFile(dir, "memory.use_hierarchy", "1"); err != nil {
		return fmt.Errorf("%w: memory.use_hierarchy is %s in %s: %v", ErrUnsupported, v, dir, err)
	}
	return nil
}

// dirForRoot returns <own>/<name> in the hierarchy with key, or "".
func (r *Root) dirForRoot(key string) string {
	for _, h := range r.hiers {
		if h.key == key {
			return filepath.Join(h.own, r.name)
		}
	}
	return ""
}

func (r *Root) hasHierarchy(key string) bool { return r.dirForRoot(key) != "" }

func (r *Root) createV1(c *Cgroup, l Limits) error {
	for _, need := range []struct {
		set bool
		key string
	}{{l.MemoryBytes > 0, "memory"}, {l.Pids > 0, "pids"}, {l.CPUs > 0, "cpu"}} {
		if need.set && !r.hasHierarchy(need.key) {
			return fmt.Errorf("%w: %s", ErrNoController, need.key)
		}
	}
	// Private directories first, so that a crash half-way leaves something
	// Sweep recognises (Delete removes them last for the same reason).
	for _, kd := range c.byKey {
		if kd.h.private {
			if _, err := mkdirNew(kd.dir); err != nil {
				return fmt.Errorf("create %s: %w", kd.dir, err)
			}
		}
	}
	cg, err := r.cg1.New(c.id, v1Resources(l, r.memsw))
	if err != nil {
		return fmt.Errorf("create v1 cgroups: %w", err)
	}
	c.cg1 = cg
	// Hierarchies containerd does not know (hybrid's cgroup2, misc).
	for _, d := range c.dirs {
		if _, err := mkdirNew(d); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	if mem := c.dirFor("memory"); mem != "" {
		// Keep anonymous memory out of swap even without swap accounting.
		// Refused (EINVAL) on some kernels for cgroups with use_hierarchy
		// parents; the memsw limit is what really matters.
		err := writeFile(mem, "memory.swappiness", "0")
		if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("set memory.swappiness: %w", err)
		}
	}
	return nil
}

func (c *Cgroup) statsV1() (Stats, error) {
	// Only the files a run reports, read directly: the library's Stat
	// reads every controller's (blkio's and memory.stat's among them),
	// which took a millisecond or more on the answer's path.
	var st Stats
	if dir := c.dirFor("cpuacct"); dir != "" {
		ns, err := readInt(dir, "cpuacct.usage")
		if err != nil {
			return Stats{}, err
		}
		st.CPUTime = time.Duration(ns)
	}
	if dir := c.dirFor("memory"); dir != "" {
		peak, err := readInt(dir, "memory.max_usage_in_bytes")
		if err != nil {
			return Stats{}, err
		}
		st.MemoryPeakBytes = peak
		n, found, err := readKeyed(dir, "memory.oom_control", "oom_kill")
		if err != nil {
			return Stats{}, err
		}
		if !found {
			// Kernels before 4.13 have no oom_kill counter; there the
			// best sign is that the limit was hit at all.
			n, err = readInt(dir, "memory.failcnt")
			if err != nil {
				return Stats{}, err
			}
		}
		st.OOMKilled = n > 0
	}
	if dir := c.dirFor("pids"); dir != "" {
		n, _, err := readKeyed(dir, "pids.events", "max")
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return Stats{}, err
		}
		st.PidsLimitHit = n > 0
	}
	return st, nil
}

// startAccountingV1 notes the CPU time used so far (cpuacct.usage, ns) and
// restarts the memory high-water mark from the current usage.
func (c *Cgroup) startAccountingV1() error {
	if dir := c.dirFor("cpuacct"); dir != "" {
		v, err := readString(dir, "cpuacct.usage")
		if err != nil {
			return err
		}
		ns, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("parse cpuacct.usage %q: %w", v, err)
		}
		c.cpuBefore = time.Duration(ns)
	}
	if dir := c.dirFor("memory"); dir != "" {
		return writeFile(dir, "memory.max_usage_in_bytes", "0")
	}
	return nil
}
