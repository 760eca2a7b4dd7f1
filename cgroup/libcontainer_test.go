package cgroup

import (
	"errors"
	"maps"
	"os"
	"slices"
	"testing"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"
)

// TestLibcontainerJoinsOnlyOurDirs proves the one-owner design: the cgroup
// manager libcontainer.Create builds from Cgroups.Path =
// c.LibcontainerPath() (and Resources with no limits) finds every directory
// it would join already created by this package, joins nothing else, leaves
// our limits alone, and its Destroy after our Delete finds nothing to do.
func TestLibcontainerJoinsOnlyOurDirs(t *testing.T) {
	r := openTestRoot(t)
	l := Limits{MemoryBytes: 64 << 20, Pids: 16, CPUs: 1}
	c := create(t, r, "lc", l)
	limitFiles := map[string]string{"pids.max": "16"}
	if r.Mode() == ModeV2 {
		limitFiles["memory.max"] = "67108864"
		limitFiles["cpu.max"] = "100000 100000"
	} else {
		limitFiles["memory.limit_in_bytes"] = "67108864"
		limitFiles["cpu.cfs_quota_us"] = "100000"
	}

	cfg := &cgroups.Cgroup{Path: c.LibcontainerPath(), Resources: &cgroups.Resources{}}
	m, err := manager.New(cfg)
	if err != nil {
		t.Fatalf("manager.New(%q): %v", cfg.Path, err)
	}
	paths := maps.Clone(m.GetPaths()) // Destroy empties the manager's map
	t.Logf("LibcontainerPath %q; libcontainer joins %v", c.LibcontainerPath(), paths)
	if len(paths) == 0 {
		t.Fatal("libcontainer joins nothing")
	}
	var joined []string
	for key, p := range paths {
		if !exists(p) {
			t.Errorf("libcontainer would create %s (%q)", p, key)
			continue
		}
		ours := ""
		for _, d := range c.dirs {
			if sameDir(p, d) == nil {
				ours = d
			}
		}
		if ours == "" {
			t.Errorf("libcontainer's %q path %s is not one of ours %v", key, p, c.dirs)
			continue
		}
		joined = append(joined, ours)
	}
	for _, d := range c.dirs {
		if !slices.Contains(joined, d) {
			t.Errorf("we create %s, libcontainer does not join it", d)
		}
	}
	if t.Failed() {
		return
	}

	// libcontainer.Create refuses a frozen or populated cgroup.
	if st, err := m.GetFreezerState(); err != nil || st != cgroups.Thawed {
		t.Errorf("freezer state %q, %v; libcontainer.Create wants THAWED", st, err)
	}
	if pids, err := m.GetAllPids(); err != nil || len(pids) != 0 {
		t.Errorf("GetAllPids = %v, %v; libcontainer.Create wants none", pids, err)
	}

	// What libcontainer does with the init process: Apply, then Set.
	ch := startGated(t, "sleep", "300")
	if err := m.Apply(ch.pid()); err != nil {
		t.Fatalf("libcontainer Apply: %v", err)
	}
	if err := m.Set(cfg.Resources); err != nil {
		t.Fatalf("libcontainer Set: %v", err)
	}
	if err := ch.open(); err != nil {
		t.Fatal(err)
	}
	for f, want := range limitFiles {
		if got := file(t, c, f); got != want {
			t.Errorf("after libcontainer Set, %s = %q, want %q", f, got, want)
		}
	}
	pids, err := c.Procs()
	if err != nil || !slices.Contains(pids, ch.pid()) {
		t.Errorf("Procs() = %v, %v; want %d", pids, err, ch.pid())
	}
	for _, p := range paths {
		if ok, _ := c.isMember(ch.pid()); !ok {
			t.Errorf("pid %d joined %s but is no member", ch.pid(), p)
		}
	}

	if err := c.Delete(); err != nil {
		t.Fatal(err)
	}
	ch.waitKilled(t)
	if err := m.Destroy(); err != nil {
		t.Errorf("libcontainer Destroy after our Delete: %v (ENOENT should be ignored)", err)
	}
	for _, p := range paths {
		if exists(p) {
			t.Errorf("left behind: %s", p)
		}
	}
}

// TestLibcontainerDestroysFirst covers the other order: if the jail calls
// container.Destroy before our Delete, libcontainer removes the directories
// (it rmdirs every path it joined), and Delete still succeeds. Stats are
// lost then, so the jail must read them (or Delete) first.
func TestLibcontainerDestroysFirst(t *testing.T) {
	r := openTestRoot(t)
	c := create(t, r, "lcfirst", Limits{MemoryBytes: 64 << 20})
	m, err := manager.New(&cgroups.Cgroup{Path: c.LibcontainerPath(), Resources: &cgroups.Resources{}})
	if err != nil {
		t.Fatal(err)
	}
	ch := startGated(t, "sleep", "300")
	if err := m.Apply(ch.pid()); err != nil {
		t.Fatal(err)
	}
	if err := ch.open(); err != nil {
		t.Fatal(err)
	}
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	ch.waitKilled(t)
	if err := m.Destroy(); err != nil {
		t.Fatalf("libcontainer Destroy: %v", err)
	}
	for _, d := range c.dirs {
		if exists(d) {
			t.Errorf("libcontainer Destroy left %s", d)
		}
	}
	if _, err := c.Stats(); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Stats after libcontainer Destroy: %v, want ErrNotExist", err)
	}
	if err := c.Delete(); err != nil {
		t.Errorf("Delete after libcontainer Destroy: %v", err)
	}
}
