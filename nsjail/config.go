package nsjail

import (
	"fmt"

	"github.com/opencontainers/cgroups"
	// The device rules need libcontainer's device cgroup support.
	_ "github.com/opencontainers/cgroups/devices"
	devices "github.com/opencontainers/cgroups/devices/config"
	"github.com/opencontainers/runc/libcontainer/configs"
	"golang.org/x/sys/unix"

	"github.com/cellblock/cellblock/nsjail/layout"
)

// IDMap maps the jail's ids 0..Size-1 onto host ids HostID.. in the user
// namespace. The host range must own nothing on the host.
type IDMap struct {
	HostID int64
	Size   int64
}

// jailDevices are layout.Devices as libcontainer takes them.
var jailDevices = func() []*devices.Device {
	list := make([]*devices.Device, 0, len(layout.Devices))
	for _, d := range layout.Devices {
		list = append(list, charDevice(d.Path, d.Major, d.Minor))
	}
	return list
}()

func charDevice(path string, major, minor int64) *devices.Device {
	return &devices.Device{
		Path:     path,
		FileMode: 0o666,
		Rule: devices.Rule{
			Type:        devices.CharDevice,
			Major:       major,
			Minor:       minor,
			Permissions: "rwm",
			Allow:       true,
		},
	}
}

// libcontainerConfig is the whole containment of a run, in the order the
// kernel objects come into being. Seccomp is loaded last by libcontainer's
// init, just before it executes the jail's init binary.
func (s *Spec) libcontainerConfig(r *Runner, cgroupPath string) *configs.Config {
	const noexec = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	tmpfs := func(dst, opts string, flags int) *configs.Mount {
		return &configs.Mount{Source: "tmpfs", Device: "tmpfs", Destination: dst, Flags: flags, Data: opts}
	}
	size := fmt.Sprintf("size=%d", s.Limits.TmpBytes)

	cfg := &configs.Config{
		// 1. Namespaces: a private everything. The network namespace has
		// only the loopback interface (brought up below), in every jail:
		// a run or build that may reach the network does so through a
		// socket the daemon opens on that loopback (Egress).
		Namespaces: configs.Namespaces{
			{Type: configs.NEWNS},
			{Type: configs.NEWPID},
			{Type: configs.NEWNET},
			{Type: configs.NEWIPC},
			{Type: configs.NEWUTS},
			{Type: configs.NEWCGROUP},
		},
		Hostname: layout.Hostname,
		Networks: []*configs.Network{{Type: "loopback", Address: "127.0.0.1/0", Gateway: "localhost"}},

		// 2. Filesystem: the Python rootfs read-only as /, then small
		// size-limited tmpfs mounts for what a program may write.
		Rootfs:          s.Rootfs,
		Readonlyfs:      true,
		RootPropagation: unix.MS_PRIVATE | unix.MS_REC,
		Mounts: []*configs.Mount{
			// Read-only: nothing in the jail writes /proc, and a read-only
			// proc is what keeps a program from lowering its own or pid 1's
			// oom_score_adj (the kernel's floor for it is set only by a
			// writer with CAP_SYS_RESOURCE, which the daemon may lack).
			{Source: "proc", Device: "proc", Destination: layout.Proc, Flags: noexec | unix.MS_RDONLY},
			tmpfs(layout.Dev, "mode=755,size=64k", unix.MS_NOSUID|unix.MS_NOEXEC|unix.MS_STRICTATIME),
			tmpfs(layout.Shm, "mode=1777,"+size, noexec),
			tmpfs(layout.Tmp, "mode=1777,"+size, unix.MS_NOSUID|unix.MS_NODEV),
			tmpfs(layout.Work, fmt.Sprintf("mode=755,uid=%d,gid=%d,%s", r.uid, r.gid, size), unix.MS_NOSUID|unix.MS_NODEV),
			{Source: r.initBinary, Device: "bind", Destination: layout.Init, Flags: unix.MS_BIND | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV},
		},
		Devices:       jailDevices,
		MaskPaths:     layout.MaskedPaths,
		ReadonlyPaths: layout.ReadonlyPaths,

		// 3. Resources: rlimits here; memory, pids and CPU are set on the
		// cgroup by package cgroup, which owns it. libcontainer only places
		// the init into it and applies the device rules.
		Rlimits: []configs.Rlimit{
			{Type: unix.RLIMIT_CORE, Hard: 0, Soft: 0},
			{Type: unix.RLIMIT_FSIZE, Hard: uint64(s.Limits.TmpBytes), Soft: uint64(s.Limits.TmpBytes)},
			{Type: unix.RLIMIT_NOFILE, Hard: s.Limits.OpenFiles, Soft: s.Limits.OpenFiles},
		},
		Cgroups: &cgroups.Cgroup{
			Path:      cgroupPath,
			Resources: &cgroups.Resources{Devices: deviceRules()},
		},
		OomScoreAdj:       intPtr(1000),
		ParentDeathSignal: int(unix.SIGKILL),

		// 4. Identity: no capabilities at all and no way to gain any.
		Capabilities:    &configs.Capabilities{},
		NoNewPrivileges: true,
		NoNewKeyring:    false,

		// 5. Seccomp: the allowlist, loaded last.
		Seccomp: r.seccomp,
	}
	if r.runnerLib != "" {
		// The runner and the cellblock package, in every jail.
		cfg.Mounts = append(cfg.Mounts, &configs.Mount{
			Source: r.runnerLib, Device: "bind", Destination: layout.RunnerDir,
			Flags: unix.MS_BIND | unix.MS_REC | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV,
		})
	}
	for _, m := range s.Mounts {
		flags := unix.MS_BIND | unix.MS_REC | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV
		if m.Writable {
			flags &^= unix.MS_RDONLY
		}
		cfg.Mounts = append(cfg.Mounts, &configs.Mount{
			Source: m.Source, Device: "bind", Destination: m.Destination, Flags: flags,
		})
	}
	if r.userns != nil {
		cfg.Namespaces = append(cfg.Namespaces, configs.Namespace{Type: configs.NEWUSER})
		m := []configs.IDMap{{ContainerID: 0, HostID: r.userns.HostID, Size: r.userns.Size}}
		cfg.UIDMappings = m
		cfg.GIDMappings = m
	}
	return cfg
}

func deviceRules() []*devices.Rule {
	rules := make([]*devices.Rule, 0, len(jailDevices))
	for _, d := range jailDevices {
		rule := d.Rule
		rules = append(rules, &rule)
	}
	return rules
}

func intPtr(i int) *int { return &i }
