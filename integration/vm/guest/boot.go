package guest

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// cgroupRoot is where the guest mounts the cgroup2 hierarchy: the fixed
// path libcontainer and the cgroup package read the mode from.
const cgroupRoot = "/sys/fs/cgroup"

// rootControllers are enabled in the root cgroup's subtree_control, as
// systemd does on a v2 host.
var rootControllers = []string{"cpu", "memory", "pids"}

// ninePOptions are the mount options of every 9p share.
const ninePOptions = "trans=virtio,version=9p2000.L,msize=524288,cache=loose"

// readConfig reads the host's Config from the initramfs.
func readConfig() (Config, error) {
	var cfg Config
	b, err := os.ReadFile(ConfigPath)
	if err != nil {
		return cfg, fmt.Errorf("read config: %w", err)
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return cfg, fmt.Errorf("parse %s: %w", ConfigPath, err)
	}
	return cfg, nil
}

// boot turns the initramfs into a machine that can run the daemon. Each
// step is one function; they run in this order.
func boot(cfg Config) error {
	steps := []struct {
		name string
		fn   func(Config) error
	}{
		{"mount pseudo filesystems", mountPseudo},
		{"load modules", loadModules},
		{"switch to a tmpfs root", switchRoot},
		{"mount cgroup2", mountCgroup2},
		{"mount shares", mountShares},
		{"prepare the root", prepareRoot},
	}
	for _, s := range steps {
		if err := s.fn(cfg); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return nil
}

type mountSpec struct {
	source, target, fstype string
	flags                  uintptr
	data                   string
}

func mountAll(ms []mountSpec) error {
	for _, m := range ms {
		if err := os.MkdirAll(m.target, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.source, m.target, m.fstype, m.flags, m.data); err != nil {
			return fmt.Errorf("mount %s on %s: %w", m.fstype, m.target, err)
		}
	}
	return nil
}

// mountPseudo mounts /proc, /sys and /dev in the initramfs; switchRoot moves
// them along.
func mountPseudo(Config) error {
	const nosuid = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	return mountAll([]mountSpec{
		{"proc", "/proc", "proc", nosuid, ""},
		{"sysfs", "/sys", "sysfs", nosuid, ""},
		{"devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, "mode=0755"},
	})
}

// loadModules loads the modules in order with finit_module. There is no
// modprobe, so the parameters the kernel command line gives a module
// ("virtio_mmio.device=...") are passed on here, as modprobe would.
func loadModules(cfg Config) error {
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return err
	}
	for _, file := range cfg.Modules {
		name := strings.ReplaceAll(strings.TrimSuffix(file, ".ko"), "-", "_")
		var params []string
		for _, tok := range strings.Fields(string(cmdline)) {
			if p, ok := strings.CutPrefix(tok, name+"."); ok {
				params = append(params, p)
			}
		}
		f, err := os.Open(filepath.Join(ModuleDir, file))
		if err != nil {
			return err
		}
		err = unix.FinitModule(int(f.Fd()), strings.Join(params, " "), 0)
		f.Close()
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("finit_module %s: %w", file, err)
		}
	}
	return nil
}

// switchRoot moves the machine onto a tmpfs root. A jail cannot
// pivot_root while the root of the mount namespace is the initramfs
// (rootfs has no parent mount), so the guest does what switch_root does:
// mount a tmpfs, move /dev, /proc and /sys into it, move it over / and
// chroot into it.
func switchRoot(Config) error {
	const newRoot = "/newroot"
	if err := mountAll([]mountSpec{{"tmpfs", newRoot, "tmpfs", 0, "mode=0755"}}); err != nil {
		return err
	}
	for _, d := range []string{"/dev", "/proc", "/sys"} {
		if err := os.MkdirAll(newRoot+d, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(d, newRoot+d, "", unix.MS_MOVE, ""); err != nil {
			return fmt.Errorf("move %s: %w", d, err)
		}
	}
	if err := os.Chdir(newRoot); err != nil {
		return err
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move the new root over /: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return err
	}
	return os.Chdir("/")
}

// mountCgroup2 mounts the unified hierarchy (the kernel command line
// disables every v1 controller) and enables the run controllers at the
// root, as systemd does.
func mountCgroup2(Config) error {
	if err := mountAll([]mountSpec{
		{"cgroup2", cgroupRoot, "cgroup2", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, "nsdelegate"},
	}); err != nil {
		return err
	}
	var add []string
	for _, c := range rootControllers {
		add = append(add, "+"+c)
	}
	return os.WriteFile(filepath.Join(cgroupRoot, "cgroup.subtree_control"), []byte(strings.Join(add, " ")), 0)
}

// mountShares mounts the host's 9p exports (/usr, /etc, the binaries, the
// output directory, ...) at their paths.
func mountShares(cfg Config) error {
	var ms []mountSpec
	for _, s := range cfg.Shares {
		flags := uintptr(unix.MS_NODEV)
		if !s.Writable {
			flags |= unix.MS_RDONLY
		}
		ms = append(ms, mountSpec{s.Tag, s.Path, "9p", flags, ninePOptions})
	}
	return mountAll(ms)
}

// prepareRoot adds the merged-/usr links, scratch space and environment
// the host's programs expect.
func prepareRoot(Config) error {
	for link, target := range map[string]string{
		"/bin": "usr/bin", "/sbin": "usr/sbin", "/lib": "usr/lib", "/lib64": "usr/lib64",
	} {
		if err := os.Symlink(target, link); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	for _, d := range []string{"/tmp", "/run", "/var/tmp", "/var/lib", "/root"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	for _, d := range []string{"/tmp", "/var/tmp"} {
		if err := os.Chmod(d, 0o1777); err != nil {
			return err
		}
	}
	for k, v := range map[string]string{
		"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME": "/root", "LANG": "C.UTF-8", "TMPDIR": "/tmp",
	} {
		if err := os.Setenv(k, v); err != nil {
			return err
		}
	}
	return nil
}

// checkPureV2 proves the machine is what the checks need: cgroup2 mounted
// at /sys/fs/cgroup, no v1 hierarchy anywhere, and the run controllers
// available and enabled below the root.
func checkPureV2() (string, error) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	v2 := false
	for _, line := range strings.Split(string(mi), "\n") {
		_, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f := strings.Fields(line)
		switch strings.Fields(post)[0] {
		case "cgroup":
			return "", fmt.Errorf("a cgroup v1 hierarchy is mounted: %s", line)
		case "cgroup2":
			v2 = v2 || f[4] == cgroupRoot
		}
	}
	if !v2 {
		return "", fmt.Errorf("cgroup2 is not mounted at %s", cgroupRoot)
	}
	ctl, err := readTrim(filepath.Join(cgroupRoot, "cgroup.controllers"))
	if err != nil {
		return "", err
	}
	sub, err := readTrim(filepath.Join(cgroupRoot, "cgroup.subtree_control"))
	if err != nil {
		return "", err
	}
	for _, c := range rootControllers {
		if !strings.Contains(" "+sub+" ", " "+c+" ") {
			return "", fmt.Errorf("controller %s not enabled at the root (controllers %q, subtree_control %q)", c, ctl, sub)
		}
	}
	var uname unix.Utsname
	_ = unix.Uname(&uname)
	return fmt.Sprintf("kernel %s; cgroup2 only at %s; controllers %q; subtree_control %q",
		unix.ByteSliceToString(uname.Release[:]), cgroupRoot, ctl, sub), nil
}

func readTrim(path string) (string, error) {
	b, err := os.ReadFile(path)
	return strings.TrimSpace(string(b)), err
}

// PowerOff flushes the filesystems and turns the machine off; if that
// fails, returning from PID 1 panics the kernel, which panic=-1 turns into
// a reboot that qemu's -no-reboot turns into an exit.
func PowerOff() {
	unix.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
}
