package nsjail

import (
	"testing"

	"github.com/opencontainers/runc/libcontainer/configs"
	"golang.org/x/sys/unix"

	"github.com/cellblock/cellblock/nsjail/layout"
)

// TestBuildJailOptions covers what only the daemon's dependency build jails
// use: a writable bind mount and the host's network namespace. A run spec
// that sets neither keeps every mount read-only and its own network.
func TestBuildJailOptions(t *testing.T) {
	r := &Runner{initBinary: "/init", seccomp: &configs.Seccomp{DefaultAction: configs.Errno}, userns: &IDMap{HostID: 1e9, Size: 65536}, uid: layout.UID, gid: layout.GID}
	s := validSpec()
	s.Mounts = []Mount{{Source: "/envs/.build-x", Destination: "/site", Writable: true}, {Source: "/wheels", Destination: "/tmp/links/0"}}
	cfg := s.libcontainerConfig(r, "x")
	flags := map[string]int{}
	for _, m := range cfg.Mounts {
		flags[m.Destination] = m.Flags
	}
	if f := flags["/site"]; f&unix.MS_RDONLY != 0 || f&unix.MS_NOSUID == 0 || f&unix.MS_NODEV == 0 {
		t.Errorf("writable mount flags %#x: want writable, nosuid, nodev", f)
	}
	if f := flags["/tmp/links/0"]; f&unix.MS_RDONLY == 0 {
		t.Errorf("mount without Writable is writable: %#x", f)
	}
	if !cfg.Namespaces.Contains(configs.NEWNET) || len(cfg.Networks) == 0 {
		t.Errorf("a spec without HostNetwork must get its own network namespace with loopback")
	}

	s.HostNetwork = true
	cfg = s.libcontainerConfig(r, "x")
	if cfg.Namespaces.Contains(configs.NEWNET) || len(cfg.Networks) != 0 {
		t.Errorf("HostNetwork: namespaces %v networks %v", cfg.Namespaces, cfg.Networks)
	}
	for _, ns := range []configs.NamespaceType{configs.NEWNS, configs.NEWPID, configs.NEWIPC, configs.NEWUTS, configs.NEWCGROUP, configs.NEWUSER} {
		if !cfg.Namespaces.Contains(ns) {
			t.Errorf("HostNetwork dropped namespace %s", ns)
		}
	}

	if uid, gid := r.JailHostID(); uid != 1e9+layout.UID || gid != 1e9+layout.GID {
		t.Errorf("JailHostID with a user namespace = %d, %d", uid, gid)
	}
	r.userns, r.uid, r.gid = nil, layout.Nobody, layout.Nobody
	if uid, gid := r.JailHostID(); uid != layout.Nobody || gid != layout.Nobody {
		t.Errorf("JailHostID without a user namespace = %d, %d", uid, gid)
	}
}
