package seccomp

import "golang.org/x/sys/unix"

// Denied lists the syscalls the policy refuses on purpose, each with its
// reason. They fail with EPERM like every syscall missing from the allowlist,
// except clone3, which fails with ENOSYS (see its rule in policy.go).
//
// The list documents the policy and drives the tests; the filter does not
// need it. It names only syscalls that exist on x86_64: stime and umount,
// for example, are i386-only (x86_64 sets the time through settimeofday,
// clock_settime, clock_adjtime and adjtimex, and unmounts through umount2).
// Syscalls numbered above the newest one in the allowlist get ENOSYS from
// libcontainer's stub instead, so none of those are listed here.
var Denied = []DeniedSyscall{
	// Mounts and the filesystem tree.
	{"mount", "changes the jail's mount tree"},
	{"umount2", "changes the jail's mount tree"},
	{"pivot_root", "changes the jail's root"},
	{"chroot", "changes the root; with an open directory fd it is a classic jail escape"},
	{"fsopen", "new mount API: creates filesystem contexts"},
	{"fsconfig", "new mount API: configures filesystem contexts"},
	{"fsmount", "new mount API: creates mounts"},
	{"fspick", "new mount API: reconfigures existing mounts"},
	{"move_mount", "new mount API: attaches mounts"},
	{"open_tree", "new mount API: clones mount trees"},
	{"mount_setattr", "changes mount attributes (e.g. drops read-only)"},
	{"open_by_handle_at", "opens files by handle, bypassing path lookup (the 'shocker' container escape)"},
	{"name_to_handle_at", "produces file handles for open_by_handle_at; leaks host file identities"},
	{"quotactl", "administers disk quotas"},
	{"quotactl_fd", "administers disk quotas"},
	{"swapon", "administers swap"},
	{"swapoff", "administers swap"},
	{"nfsservctl", "obsolete NFS server control"},
	{"uselib", "obsolete a.out loader with a record of kernel bugs"},

	// Namespaces.
	{"unshare", "creates namespaces; a user namespace grants capabilities and opens kernel attack surface"},
	{"setns", "joins other namespaces"},
	{"clone3", "flags live in user memory where seccomp cannot check them for CLONE_NEW*; fails with ENOSYS so libc falls back to the filtered clone"},

	// Other processes' memory and state.
	{"ptrace", "inspects and controls other processes"},
	{"process_vm_readv", "reads other processes' memory"},
	{"process_vm_writev", "writes other processes' memory"},
	{"process_madvise", "acts on another process's memory"},
	{"process_mrelease", "reaps another process's memory"},
	{"pidfd_getfd", "steals file descriptors from other processes (ptrace access check)"},
	{"kcmp", "compares kernel objects of other processes; the ordering leaks kernel pointers"},

	// Kernel attack surface with no use for sandboxed Python.
	{"bpf", "loads eBPF programs and maps"},
	{"perf_event_open", "performance monitoring; large kernel attack surface and side channels"},
	{"io_uring_setup", "io_uring bypasses seccomp for the operations it submits and has a long record of kernel bugs"},
	{"io_uring_enter", "io_uring, see io_uring_setup"},
	{"io_uring_register", "io_uring, see io_uring_setup"},
	{"userfaultfd", "lets user space stall kernel page faults, a staple of kernel race exploits"},
	{"keyctl", "kernel keyring is not namespaced"},
	{"add_key", "kernel keyring is not namespaced"},
	{"request_key", "kernel keyring is not namespaced"},
	{"fanotify_init", "filesystem-wide event monitoring"},
	{"lookup_dcookie", "profiling interface that reveals paths"},
	{"modify_ldt", "16-bit segments; old kernel bugs, nothing 64-bit needs it"},
	{"memfd_secret", "secret memory is pinned and removed from the kernel's direct map; not needed"},

	// NUMA placement. The jail runs on whatever nodes its cpuset gives it;
	// moving memory or other processes' pages is the host's decision, and
	// these calls have had reference-counting bugs. get_mempolicy (read) is
	// allowed so that libnuma notices it should not try.
	{"mbind", "sets NUMA memory placement"},
	{"set_mempolicy", "sets NUMA memory placement"},
	{"migrate_pages", "moves another process's pages between NUMA nodes"},
	{"move_pages", "moves pages between NUMA nodes"},

	// Memory pinning: nothing in CPython needs it, and pinned memory cannot
	// be reclaimed under memory pressure.
	{"mlock", "pins memory"},
	{"mlock2", "pins memory"},
	{"mlockall", "pins memory"},

	// Kernel and machine administration.
	{"kexec_load", "replaces the running kernel"},
	{"kexec_file_load", "replaces the running kernel"},
	{"init_module", "loads kernel modules"},
	{"finit_module", "loads kernel modules"},
	{"delete_module", "unloads kernel modules"},
	{"reboot", "reboots the machine"},
	{"syslog", "reads and clears the kernel log (leaks kernel addresses)"},
	{"acct", "switches process accounting"},
	{"vhangup", "hangs up the controlling terminal"},
	{"iopl", "raw I/O port access"},
	{"ioperm", "raw I/O port access"},
	{"sethostname", "changes the host name"},
	{"setdomainname", "changes the NIS domain name"},
	{"personality", "only the default (0) and the query (0xffffffff) are allowed; other values, e.g. ADDR_NO_RANDOMIZE, weaken hardening"},

	// Time. Clocks are shared with the host.
	{"settimeofday", "sets the system clock"},
	{"clock_settime", "sets a system clock"},
	{"clock_adjtime", "adjusts a system clock"},
	{"adjtimex", "adjusts the system clock"},
}

// IP protocol numbers the socket rules name (netinet/in.h); x/sys/unix
// lacks some of them.
const (
	ipprotoICMP    = 1
	ipprotoTCP     = 6
	ipprotoUDP     = 17
	ipprotoICMPv6  = 58
	ipprotoSCTP    = 132
	ipprotoUDPLite = 136
	ipprotoRaw     = 255
	ipprotoMPTCP   = 262
)

// DeniedSockets lists the IP sockets the policy refuses on purpose. For
// AF_INET and AF_INET6 the policy allows only SOCK_STREAM with TCP and
// SOCK_DGRAM with UDP (protocol 0 or named): what ordinary Python
// (socket, asyncio, urllib, requests, database drivers) asks for. Each
// other protocol is its own kernel code, reachable without privilege, with
// its own record of bugs; the jail has no use for any of them.
var DeniedSockets = []DeniedSocket{
	{"socket(AF_INET, SOCK_STREAM, IPPROTO_MPTCP)", unix.AF_INET, unix.SOCK_STREAM, ipprotoMPTCP, "Multipath TCP: a separate protocol stack with a record of kernel bugs; plain TCP serves every Python library"},
	{"socket(AF_INET6, SOCK_STREAM, IPPROTO_MPTCP)", unix.AF_INET6, unix.SOCK_STREAM, ipprotoMPTCP, "Multipath TCP, as for AF_INET"},
	{"socket(AF_INET, SOCK_DGRAM, IPPROTO_UDPLITE)", unix.AF_INET, unix.SOCK_DGRAM, ipprotoUDPLite, "UDP-Lite: rarely used kernel code (CVE-2016-10229 class of UDP bugs); plain UDP serves Python"},
	{"socket(AF_INET6, SOCK_DGRAM, IPPROTO_UDPLITE)", unix.AF_INET6, unix.SOCK_DGRAM, ipprotoUDPLite, "UDP-Lite, as for AF_INET"},
	{"socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP)", unix.AF_INET, unix.SOCK_STREAM, ipprotoSCTP, "SCTP: a large, rarely used protocol whose module the call would load; a long record of kernel bugs"},
	{"socket(AF_INET6, SOCK_STREAM, IPPROTO_SCTP)", unix.AF_INET6, unix.SOCK_STREAM, ipprotoSCTP, "SCTP, as for AF_INET"},
	{"socket(AF_INET, SOCK_SEQPACKET, IPPROTO_SCTP)", unix.AF_INET, unix.SOCK_SEQPACKET, ipprotoSCTP, "SCTP's one-to-many form, as above"},
	{"socket(AF_INET, SOCK_DGRAM, IPPROTO_ICMP)", unix.AF_INET, unix.SOCK_DGRAM, ipprotoICMP, "ICMP datagram (ping) sockets: the jail has no route out, and nothing in Python needs them"},
	{"socket(AF_INET6, SOCK_DGRAM, IPPROTO_ICMPV6)", unix.AF_INET6, unix.SOCK_DGRAM, ipprotoICMPv6, "ICMPv6 datagram (ping) sockets, as for AF_INET"},
	{"socket(AF_INET, SOCK_RAW, IPPROTO_RAW)", unix.AF_INET, unix.SOCK_RAW, ipprotoRaw, "raw IP: forges packets; needs CAP_NET_RAW in the jail's namespace, refused here whatever the capabilities"},
	{"socket(AF_INET6, SOCK_RAW, IPPROTO_RAW)", unix.AF_INET6, unix.SOCK_RAW, ipprotoRaw, "raw IPv6, as for AF_INET"},
	{"socket(AF_INET, SOCK_STREAM, IPPROTO_UDP)", unix.AF_INET, unix.SOCK_STREAM, ipprotoUDP, "a protocol that does not match its type: nothing legitimate asks for it"},
}
