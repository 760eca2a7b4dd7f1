// Package layout is the shape of a jail seen from inside it: where the
// program works and writes, where the jail's init sits, who the program
// runs as, what is mounted over the read-only root, and the files /etc
// holds. The side that builds the jail (package nsjail), the side that
// builds the root filesystem it runs on (package rootfs) and the prose the
// daemon shows its clients all take these facts from here, so they cannot
// drift apart.
//
// It owns names and contents only: it creates, mounts and runs nothing. It
// must stay tiny and import nothing but the standard library, so that the
// static, cgo-free cellblock-init may link it.
package layout

import (
	"fmt"
	"path"
	"strings"
)

// Paths inside every jail.
const (
	// Work is the program's working directory and HOME: a size-limited
	// tmpfs owned by the jail's user, where its script is written.
	Work = "/work"
	// OutDir is the directory under Work whose files come back from a run
	// (api.OutDir).
	OutDir = "out"
	// Tmp is the writable scratch directory (TMPDIR), a size-limited tmpfs.
	Tmp = "/tmp"
	// Dev is the jail's own small /dev: a tmpfs holding only Devices.
	Dev = "/dev"
	// Shm is POSIX shared memory (multiprocessing's semaphores), a
	// size-limited tmpfs inside Dev.
	Shm = "/dev/shm"
	// Proc is the jail's procfs, with MaskedPaths hidden and
	// ReadonlyPaths read-only.
	Proc = "/proc"
	// Init is where the jail's init binary is bind-mounted, read-only.
	// The rootfs carries an empty file here to mount it over.
	Init = "/.cellblock/init"
	// RunnerDir is where the runner (package runner's Python files) is
	// bind-mounted, read-only: the runner program RunnerScript and the
	// package cellblock, importable through PYTHONPATH.
	RunnerDir = "/usr/lib/cellblock"
	// RunnerScript is the program the init starts in a runner jail.
	RunnerScript = RunnerDir + "/_cellblock_runner.py"
	// CABundle is, when the daemon declares secrets, the CA bundle that
	// jails of runs with secrets trust (the system's roots and the
	// daemon's egress CA), CABundleName in RunnerDir.
	CABundleName = "egress-ca-bundle.pem"
	CABundle     = RunnerDir + "/" + CABundleName
)

// Hostname is the jail's host name, in its own UTS namespace.
const Hostname = "cellblock"

// ProxyPort is where a jail that may reach the network finds the daemon's
// proxy: 127.0.0.1:ProxyPort on the jail's own loopback (another port when
// that one is taken; the proxy variables of the environment say which).
const ProxyPort = 3128

// The identity the program runs as.
const (
	// User is the jail user's name, with UID and GID, inside the user
	// namespace. Its home is Work.
	User = "sandbox"
	UID  = 1000
	GID  = 1000
	// Nobody is the overflow uid and gid (nobody and nogroup): what a jail
	// without a user namespace runs as on the host, which owns nothing.
	Nobody = 65534
)

// MountPoints are the directories the jail mounts over. The root is
// mounted read-only, so each must already exist in it, and nothing may be
// put below them at build time: the mounts would hide it. Shm is made by
// the jail inside its Dev.
var MountPoints = []string{Tmp, Work, Dev, Proc, path.Dir(Init), RunnerDir}

// Device is a character device node in Dev, which the jail may open.
type Device struct {
	Path         string
	Major, Minor int64
}

// Devices are the only device nodes in the jail's Dev, and the only
// devices the device cgroup lets it open.
var Devices = []Device{
	{"/dev/null", 1, 3},
	{"/dev/zero", 1, 5},
	{"/dev/full", 1, 7},
	{"/dev/random", 1, 8},
	{"/dev/urandom", 1, 9},
}

// MaskedPaths hide kernel information in Proc from the jail; ReadonlyPaths
// keep the rest of its knobs out of reach (the jail's user cannot write
// them anyway: this is defence in depth).
var (
	MaskedPaths = []string{
		"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
		"/proc/interrupts", "/proc/kallsyms", "/proc/kmsg", "/proc/sysrq-trigger",
		"/proc/config.gz", "/proc/modules", "/proc/vmallocinfo", "/proc/slabinfo",
		"/proc/pagetypeinfo", "/proc/iomem", "/proc/ioports", "/proc/mtrr",
	}
	ReadonlyPaths = []string{
		"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys",
	}
)

// EtcFile is one file of the jail's /etc.
type EtcFile struct {
	Name    string // below /etc
	Content string
}

// Etc returns the files the rootfs writes to /etc: the accounts of root,
// the jail's user and nobody, localhost, a name service switch that needs
// no dlopened module, and an empty resolv.conf. Nothing of the host's /etc
// is in them.
func Etc() []EtcFile {
	return []EtcFile{
		{"passwd", lines(
			"root:x:0:0:root:/root:/usr/sbin/nologin",
			fmt.Sprintf("%s:x:%d:%d:%s:%s:/usr/sbin/nologin", User, UID, GID, User, Work),
			fmt.Sprintf("nobody:x:%d:%d:nobody:/nonexistent:/usr/sbin/nologin", Nobody, Nobody),
		)},
		{"group", lines(
			"root:x:0:",
			fmt.Sprintf("%s:x:%d:", User, GID),
			fmt.Sprintf("nogroup:x:%d:", Nobody),
		)},
		{"hosts", lines(
			"127.0.0.1\tlocalhost",
			"::1\tlocalhost",
		)},
		// Only sources built into glibc (files, dns), so no NSS module is
		// dlopened; dns is harmless when the jail has no network.
		{"nsswitch.conf", lines(
			"passwd: files",
			"group: files",
			"shadow: files",
			"hosts: files dns",
			"networks: files",
			"protocols: files",
			"services: files",
		)},
		{"resolv.conf", ""},
	}
}

// lines joins ls, each ended by a newline.
func lines(ls ...string) string {
	return strings.Join(ls, "\n") + "\n"
}
