package nsjail

import (
	"net"
	"testing"

	"github.com/opencontainers/runc/libcontainer/configs"
	"golang.org/x/sys/unix"

	"github.com/cellblock/cellblock/nsjail/layout"
)

// TestBuildJailOptions covers what only the daemon's dependency build jails
// use: a writable bind mount. A run spec without it keeps every mount
// read-only.
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
	// Every jail, a build's too, has its own network namespace with only
	// loopback: a build reaches its index through the daemon's proxy.
	for _, spec := range []*Spec{s, func() *Spec { b := *s; b.Egress = stubEgress{}; return &b }()} {
		cfg := spec.libcontainerConfig(r, "x")
		if !cfg.Namespaces.Contains(configs.NEWNET) || len(cfg.Networks) != 1 || cfg.Networks[0].Type != "loopback" {
			t.Errorf("egress %v: namespaces %v networks %v", spec.Egress != nil, cfg.Namespaces, cfg.Networks)
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

// stubEgress serves nothing: what a spec with network looks like to the
// parts that do not open its socket.
type stubEgress struct{}

func (stubEgress) Serve(ln net.Listener) map[string]string {
	ln.Close()
	return nil
}
