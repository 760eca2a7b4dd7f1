package cgroup

import (
	"fmt"
	"path"
	"path/filepath"
	"strings"
)

// libcontainerV1Subsystems lists, in libcontainer's order, the v1 hierarchies
// libcontainer's fs manager joins when they are mounted and listed in
// /proc/self/cgroup (github.com/opencontainers/cgroups v0.1.0, fs/fs.go).
// In hybrid mode it also joins the cgroup2 hierarchy (key "").
var libcontainerV1Subsystems = []string{
	"cpuset", "devices", "memory", "cpu", "cpuacct", "pids", "blkio",
	"hugetlb", "net_cls", "net_prio", "perf_event", "freezer", "rdma",
	"name=systemd", "misc",
}

// hierarchy is one cgroup hierarchy the processes of a v1/hybrid run join.
type hierarchy struct {
	// key is libcontainer's name for it: a controller ("memory"), a named
	// hierarchy ("name=systemd"), or "" for the cgroup2 hierarchy in hybrid mode.
	key string
	// mountpoint and mountRoot locate the hierarchy; a cgroup path p from
	// /proc/<pid>/cgroup lives at mountpoint + (p relative to mountRoot).
	mountpoint string
	mountRoot  string
	// own is the absolute directory libcontainer resolves relative paths
	// against: the daemon's own cgroup (for "" libcontainer uses the mount
	// point itself).
	own string
	// private marks a hierarchy where the daemon has a cgroup of its own
	// (own is below the mount point), so <own>/<name> cannot be shared with
	// another daemon's or session's runs. See markPrivate.
	private bool
}

// toDir turns a cgroup path as printed in /proc/<pid>/cgroup into a directory.
func (h hierarchy) toDir(cgPath string) (string, bool) {
	return cgroupDir(h.mountpoint, h.mountRoot, cgPath)
}

func cgroupDir(mountpoint, mountRoot, cgPath string) (string, bool) {
	rel, err := filepath.Rel(mountRoot, cgPath)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", false
	}
	return filepath.Join(mountpoint, rel), true
}

// firstV1Mount mirrors libcontainer's lookup: the first "cgroup" mount whose
// super options name the subsystem.
func firstV1Mount(mounts []mountEntry, subsystem string) (mountEntry, bool) {
	for _, m := range mounts {
		if m.fstype == "cgroup" && m.hasOpt(subsystem) {
			return m, true
		}
	}
	return mountEntry{}, false
}

// ownCgroupPath mirrors libcontainer's getControllerPath lookup.
func ownCgroupPath(own map[string]string, key string) (string, bool) {
	if p, ok := own[key]; ok {
		return p, true
	}
	p, ok := own["name="+key]
	return p, ok
}

// layoutV1 computes the hierarchies libcontainer joins for a relative
// Cgroup.Path, given the cgroup mounts and the daemon's /proc/self/cgroup.
func layoutV1(mounts []mountEntry, own map[string]string, hybrid bool) ([]hierarchy, error) {
	var out []hierarchy
	for _, key := range libcontainerV1Subsystems {
		cgPath, ok := ownCgroupPath(own, key)
		var m mountEntry
		if ok {
			m, ok = firstV1Mount(mounts, key)
		}
		if !ok {
			if key == "devices" {
				// libcontainer refuses to run without it, and so do we.
				return nil, fmt.Errorf("%w: devices hierarchy not mounted or not in /proc/self/cgroup", ErrUnsupported)
			}
			continue
		}
		h := hierarchy{key: key, mountpoint: m.mountpoint, mountRoot: m.root}
		dir, ok := h.toDir(cgPath)
		if !ok {
			return nil, fmt.Errorf("%w: own %s cgroup %q is outside its mount root %q", ErrUnsupported, key, cgPath, m.root)
		}
		h.own = dir
		out = append(out, h)
	}
	if hybrid {
		if _, ok := own[""]; ok {
			m, ok := lastMountAt(mounts, hybridMountpoint)
			if !ok || m.fstype != "cgroup2" {
				return nil, fmt.Errorf("%w: hybrid mode without cgroup2 at %s", ErrUnsupported, hybridMountpoint)
			}
			// libcontainer joins <mount point>/<relative path> here, not
			// <own cgroup>/<relative path> (GetOwnCgroupPath("")).
			out = append(out, hierarchy{key: "", mountpoint: hybridMountpoint, mountRoot: m.root, own: hybridMountpoint})
		}
	}
	return out, nil
}

// v2Layout is where the daemon's subtree lives on a cgroup v2 host.
type v2Layout struct {
	mountpoint string // always /sys/fs/cgroup (libcontainer's fixed mount point)
	mountRoot  string
	ownPath    string // <own> as a cgroup path below the mount, e.g. /system.slice/cellblockd.service
	ownDir     string // <own> as a directory
	inLeaf     bool   // the daemon already sits in <own>/daemon
}

const (
	daemonLeaf = "daemon"
	runsDir    = "runs"
)

// layoutV2 computes the daemon's subtree from the cgroup mounts and the
// daemon's /proc/self/cgroup. If the daemon already sits in a leaf named
// "daemon" (a restart in the same cgroup), <own> is that leaf's parent.
func layoutV2(mounts []mountEntry, own map[string]string) (v2Layout, error) {
	cgPath, ok := own[""]
	if !ok {
		return v2Layout{}, fmt.Errorf("%w: no cgroup2 entry in /proc/self/cgroup", ErrUnsupported)
	}
	m, ok := lastMountAt(mounts, unifiedMountpoint)
	if !ok || m.fstype != "cgroup2" {
		return v2Layout{}, fmt.Errorf("%w: cgroup2 not mounted at %s", ErrUnsupported, unifiedMountpoint)
	}
	dir, ok := cgroupDir(m.mountpoint, m.root, cgPath)
	if !ok {
		return v2Layout{}, fmt.Errorf("%w: own cgroup %q is outside the cgroup2 mount root %q", ErrUnsupported, cgPath, m.root)
	}
	rel, _ := filepath.Rel(unifiedMountpoint, dir)
	l := v2Layout{mountpoint: m.mountpoint, mountRoot: m.root, ownPath: path.Clean("/" + rel)}
	if l.ownPath != "/" && path.Base(l.ownPath) == daemonLeaf {
		l.inLeaf = true
		l.ownPath = path.Dir(l.ownPath)
	}
	l.ownDir = filepath.Join(unifiedMountpoint, l.ownPath)
	return l, nil
}

// markPrivate sets hierarchy.private. A hierarchy is private when the
// daemon's own cgroup there is not the hierarchy's root; if there is no such
// hierarchy (the daemon runs in the root cgroup everywhere, it owns the
// machine) all are. Sweep only trusts run directories found in private
// hierarchies: on a host where, say, the memory cgroup is per session but
// cpu is shared at /, a directory in cpu alone may be somebody else's.
func markPrivate(hs []hierarchy) {
	found := false
	for i := range hs {
		hs[i].private = hs[i].own != hs[i].mountpoint
		found = found || hs[i].private
	}
	if !found {
		for i := range hs {
			hs[i].private = true
		}
	}
}
