package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/containerd/cgroups/v3/cgroup1"
)

// Root is the daemon's subtree for runs. Its methods are safe for concurrent
// use.
type Root struct {
	mode Mode
	name string

	// v1 and hybrid
	hiers []hierarchy    // every hierarchy a run joins, libcontainer's order
	cg1   cgroup1.Cgroup // <own>/<name> in the hierarchies containerd knows
	memsw bool           // memory.memsw.* exists (swap accounting on)

	// v2
	v2       v2Layout
	runsDir  string     // <own>/runs
	controls v2Controls // controllers enabled for runs

	// locks are the directories whose flock makes the subtree this
	// Root's alone (lock.go); released by Close.
	locks []*os.File

	mu sync.Mutex
	// live are the runs created, or being created, and not deleted yet.
	live   map[string]*Cgroup
	closed bool
}

// OpenRoot prepares the daemon's subtree for runs. name (e.g. "cellblock",
// [a-zA-Z0-9_-]{1,64}) is the directory below the daemon's own cgroup that
// holds the runs on cgroup v1 and hybrid hosts.
//
// On cgroup v2 it moves the calling process (all its threads) into
// <own>/daemon, enables the cpu, memory and pids controllers (those that are
// available) in <own> and <own>/runs, and runs live in <own>/runs/<id>; name
// is not part of the v2 layout, which is the daemon's own delegated subtree.
//
// The subtree is this Root's alone until Close: OpenRoot locks it first
// (see lock.go), and fails with an *InUseError (ErrInUse) naming the
// holder's pid when another process, such as a second daemon with the same
// name and own cgroup, holds it. Then it has changed nothing of it.
func OpenRoot(name string) (*Root, error) {
	if err := ValidateID(name); err != nil {
		return nil, fmt.Errorf("open cgroup root: name: %w", err)
	}
	mounts, err := readMountinfo()
	if err != nil {
		return nil, fmt.Errorf("open cgroup root %s: %w", name, err)
	}
	own, err := readProcCgroup(0)
	if err != nil {
		return nil, fmt.Errorf("open cgroup root %s: %w", name, err)
	}
	r := &Root{mode: modeFromMounts(mounts), name: name, live: make(map[string]*Cgroup)}
	switch r.mode {
	case ModeV1, ModeHybrid:
		err = r.openV1(mounts, own)
	case ModeV2:
		err = r.openV2(mounts, own)
	default:
		err = fmt.Errorf("%w: no cgroup hierarchy mounted", ErrUnsupported)
	}
	if err != nil {
		return nil, fmt.Errorf("open cgroup root %s (%s): %w", name, r.mode, err)
	}
	return r, nil
}

// Mode reports the host's cgroup layout.
func (r *Root) Mode() Mode { return r.mode }

// Create creates the cgroup of run id in every hierarchy, with the limits
// set, and returns it. On error nothing of it is left behind.
//
// The directories are made and limited without holding the root's lock,
// so that jails built at the same time do not wait for each other here
// (on v1, containerd's cgroup1 still makes the directories it knows one
// run at a time); id is reserved first, which keeps other Creates of it
// and Sweep away.
func (r *Root) Create(id string, l Limits) (*Cgroup, error) {
	if err := ValidateID(id); err != nil {
		return nil, fmt.Errorf("create cgroup for run: %w", err)
	}
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("create cgroup for run %s: %w", id, err)
	}
	c := r.newCgroup(id)
	if err := r.reserve(c); err != nil {
		return nil, fmt.Errorf("create cgroup for run %s: %w", id, err)
	}
	for _, d := range c.dirs {
		if exists(d) {
			r.forget(c)
			return nil, fmt.Errorf("create cgroup for run %s: %w: %s", id, ErrExists, d)
		}
	}
	var err error
	if r.mode == ModeV2 {
		err = r.createV2(c, l)
	} else {
		err = r.createV1(c, l)
	}
	if err != nil {
		if rerr := c.removeDirs(); rerr != nil {
			err = errors.Join(err, fmt.Errorf("clean up: %w", rerr))
		}
		r.forget(c)
		return nil, fmt.Errorf("create cgroup for run %s: %w", id, err)
	}
	c.limits = l
	return c, nil
}

// reserve enters c into the live runs, unless the root is closed or c's
// id is live already.
func (r *Root) reserve(c *Cgroup) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	if _, ok := r.live[c.id]; ok {
		return ErrExists
	}
	r.live[c.id] = c
	return nil
}

// Sweep kills every process left in run cgroups under the root (from a
// crashed daemon) and removes those cgroups; it returns how many it removed.
// Runs created through this Root and not yet deleted are left alone. On
// v1/hybrid a leftover counts only if it has a directory in a hierarchy
// where the daemon has a cgroup of its own (see markPrivate): where a
// hierarchy is shared at its root, a run directory found only there may
// belong to somebody else and is not touched.
func (r *Root) Sweep() (int, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return 0, fmt.Errorf("sweep cgroups: %w", ErrClosed)
	}
	var parents []string
	if r.mode == ModeV2 {
		parents = []string{r.runsDir}
	} else {
		parents = r.privateRootDirs()
	}
	seen := make(map[string]bool)
	for _, p := range parents {
		entries, err := os.ReadDir(p)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			r.mu.Unlock()
			return 0, fmt.Errorf("sweep cgroups: %w", err)
		}
		for _, e := range entries {
			if e.IsDir() && r.live[e.Name()] == nil {
				seen[e.Name()] = true
			}
		}
	}
	var leftovers []*Cgroup
	for id := range seen {
		leftovers = append(leftovers, r.newCgroup(id))
	}
	r.mu.Unlock()

	slices.SortFunc(leftovers, func(a, b *Cgroup) int { return strings.Compare(a.id, b.id) })
	n := 0
	var errs []error
	for _, c := range leftovers {
		if err := c.Delete(); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	if err := errors.Join(errs...); err != nil {
		return n, fmt.Errorf("sweep cgroups: %w", err)
	}
	return n, nil
}

// Close removes the root's own directories if they are empty. On cgroup v2
// the daemon stays in its leaf <own>/daemon. Runs that still exist keep
// their directories; Close does not delete them.
func (r *Root) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	var dirs []string
	if r.mode == ModeV2 {
		dirs = []string{r.runsDir}
	} else {
		dirs = r.rootDirs()
	}
	var errs []error
	for _, d := range dirs {
		if err := rmdirIfEmpty(d); err != nil {
			errs = append(errs, err)
		}
	}
	r.releaseLocks()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close cgroup root %s: %w", r.name, err)
	}
	return nil
}

// releaseLocks lets the subtree go, to the next daemon.
func (r *Root) releaseLocks() {
	for _, f := range r.locks {
		f.Close()
	}
	r.locks = nil
}

func (r *Root) forget(c *Cgroup) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.live[c.id] == c {
		delete(r.live, c.id)
	}
}

// rootDirs lists <own>/<name> once per distinct directory (v1/hybrid).
func (r *Root) rootDirs() []string {
	var out []string
	for _, h := range r.hiers {
		d := filepath.Join(h.own, r.name)
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// privateRootDirs lists <own>/<name> in the private hierarchies (v1/hybrid).
func (r *Root) privateRootDirs() []string {
	var out []string
	for _, h := range r.hiers {
		d := filepath.Join(h.own, r.name)
		if h.private && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// newCgroup builds the Go object for run id without touching the system.
func (r *Root) newCgroup(id string) *Cgroup {
	c := &Cgroup{root: r, id: id}
	if r.mode == ModeV2 {
		d := filepath.Join(r.runsDir, id)
		c.dirs = []string{d}
		c.hasKillFile = exists(filepath.Join(r.runsDir, "cgroup.kill"))
		c.hasFreezeFile = exists(filepath.Join(r.runsDir, "cgroup.freeze"))
		return c
	}
	for _, h := range r.hiers {
		c.byKey = append(c.byKey, keyDir{h: h, dir: filepath.Join(h.own, r.name, id)})
	}
	// Private hierarchies first: removeDirs goes backwards, so they are
	// removed last.
	for _, private := range []bool{true, false} {
		for _, kd := range c.byKey {
			if kd.h.private == private && !slices.Contains(c.dirs, kd.dir) {
				c.dirs = append(c.dirs, kd.dir)
			}
		}
	}
	return c
}
