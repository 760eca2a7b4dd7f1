package seccomp

import "golang.org/x/sys/unix"

// Argument values the rules below compare against.
const (
	// cloneNewFlags are all namespace-creating clone flags. CLONE_NEWTIME
	// (0x80) is only meaningful for clone3 and unshare; for clone(2) that bit
	// lies in the exit-signal byte (CSIGNAL), and no valid signal number has
	// it set, so including it in the mask costs nothing.
	cloneNewFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS |
		unix.CLONE_NEWIPC | unix.CLONE_NEWUSER | unix.CLONE_NEWPID |
		unix.CLONE_NEWNET | unix.CLONE_NEWTIME

	// sockTypeMask separates the socket type from SOCK_NONBLOCK/SOCK_CLOEXEC
	// in socket(2)'s type argument (SOCK_TYPE_MASK in the kernel).
	sockTypeMask = 0xf

	// perLinux is the default personality; glibc and Python never set
	// anything else.
	perLinux = 0x0
	// perQuery asks personality(2) for the current value without changing it.
	perQuery = 0xffffffff
)

// Argument indexes, named for readability.
const (
	arg0 uint = iota
	arg1
	arg2
)

// policy is the allowlist. Every syscall not named here fails with EPERM (see
// Denied for the notable ones and why).
//
// The audience is CPython 3.8-3.13 and whatever it runs inside the jail
// (subprocesses, multiprocessing workers, C extensions loaded with ctypes),
// the static Go reaper that is pid 1 in the jail, and the last steps of
// libcontainer's init, which runs under this filter from the moment it is
// loaded until execve of the reaper (see standard_init_linux.go: a pipe
// write; re-opening the exec fifo through procfs with openat2, fstatfs,
// statx and faccessat2, after fsopen/open_tree attempts that fall back
// cleanly on EPERM; closing leftover fds by walking /proc/self/fd; execve;
// plus the Go runtime's own calls).
//
// Groups are ordered by area; entries within a group are roughly by how
// common they are. Obvious entries carry no comment.
var policy = []rule{
	// ---- Memory ----
	allow("brk"),
	allow("mmap"),     // PROT_EXEC included: dlopen, ctypes/libffi closures
	allow("mprotect"), // PROT_EXEC included, as above; also thread guard pages
	allow("munmap"),
	allow("mremap"), // mmap.mmap.resize, realloc of large blocks
	allow("madvise"),
	allow("msync"),
	allow("mincore"),
	allow("membarrier"), // used by some runtimes (JITs, liburcu) for fences
	allow("memfd_create"),
	allow("get_mempolicy"), // read-only; libnuma probes it and copes with "no NUMA"
	// Memory protection keys only restrict the caller's own access.
	allow("pkey_alloc"),
	allow("pkey_free"),
	allow("pkey_mprotect"),

	// ---- Files and directories ----
	// Paths resolve inside the jail's root; permissions are the kernel's job.
	allow("read"),
	allow("write"),
	allow("readv"),
	allow("writev"),
	allow("pread64"), // sqlite
	allow("pwrite64"),
	allow("preadv"),
	allow("pwritev"),
	allow("preadv2"),
	allow("pwritev2"),
	allow("lseek"),
	allow("open"), // legacy form, used by some static binaries
	allow("openat"),
	allow("openat2"), // libcontainer's init re-opens the exec fifo with it
	allow("creat"),
	allow("close"),
	allow("close_range"), // subprocess (close_fds) and glibc's closefrom
	allow("dup"),
	allow("dup2"),
	allow("dup3"),
	allow("fcntl"), // includes sqlite's F_SETLK/F_OFD_SETLK locks
	allow("flock"),
	allow("ioctl"), // see the note on ioctl below
	allow("fsync"),
	allow("fdatasync"),
	allow("syncfs"), // only the caller's filesystem, unlike sync(2)
	allow("sync_file_range"),
	allow("ftruncate"), // also sizes POSIX shared memory
	allow("truncate"),
	allow("fallocate"),
	allow("fadvise64"),
	allow("readahead"),
	allow("sendfile"), // shutil.copyfile
	allow("copy_file_range"),
	allow("splice"),
	allow("tee"),
	allow("stat"),
	allow("fstat"),
	allow("lstat"),
	allow("newfstatat"),
	allow("statx"),
	allow("statfs"),
	allow("fstatfs"), // libcontainer's init checks procfs with it
	allow("access"),
	allow("faccessat"),
	allow("faccessat2"),
	allow("getdents"),
	allow("getdents64"),
	allow("getcwd"),
	allow("chdir"),
	allow("fchdir"),
	allow("readlink"),
	allow("readlinkat"),
	allow("mkdir"),
	allow("mkdirat"),
	allow("rmdir"),
	allow("unlink"),
	allow("unlinkat"),
	allow("rename"),
	allow("renameat"),
	allow("renameat2"),
	allow("link"),
	allow("linkat"),
	allow("symlink"),
	allow("symlinkat"),
	allow("chmod"),
	allow("fchmod"),
	allow("fchmodat"),
	allow("chown"), // sqlite fchowns its journal when running as uid 0
	allow("fchown"),
	allow("fchownat"),
	allow("lchown"),
	allow("umask"),
	allow("utime"),
	allow("utimes"),
	allow("futimesat"),
	allow("utimensat"),
	// Extended attributes: shutil.copy2 copies them; trusted.* and
	// security.* still need capabilities the jail does not have.
	allow("getxattr"),
	allow("lgetxattr"),
	allow("fgetxattr"),
	allow("listxattr"),
	allow("llistxattr"),
	allow("flistxattr"),
	allow("setxattr"),
	allow("lsetxattr"),
	allow("fsetxattr"),
	allow("removexattr"),
	allow("lremovexattr"),
	allow("fremovexattr"),
	// mknod only for FIFOs (os.mkfifo), sockets and regular files; device
	// nodes are refused here even if a capability slipped through. The mode
	// is a umode_t, so masking the 64-bit argument is exact.
	allow("mknod", argMaskedEq(arg1, unix.S_IFMT, unix.S_IFIFO)),
	allow("mknod", argMaskedEq(arg1, unix.S_IFMT, unix.S_IFSOCK)),
	allow("mknod", argMaskedEq(arg1, unix.S_IFMT, unix.S_IFREG)),
	allow("mknod", argMaskedEq(arg1, unix.S_IFMT, 0)), // 0 means regular file
	allow("mknodat", argMaskedEq(arg2, unix.S_IFMT, unix.S_IFIFO)),
	allow("mknodat", argMaskedEq(arg2, unix.S_IFMT, unix.S_IFSOCK)),
	allow("mknodat", argMaskedEq(arg2, unix.S_IFMT, unix.S_IFREG)),
	allow("mknodat", argMaskedEq(arg2, unix.S_IFMT, 0)),
	// inotify watches only what the caller can read, bounded by
	// fs.inotify.max_user_watches; file-watching libraries use it.
	allow("inotify_init"),
	allow("inotify_init1"),
	allow("inotify_add_watch"),
	allow("inotify_rm_watch"),

	// ---- Event loops and polling (asyncio, selectors, Go netpoller) ----
	allow("select"),
	allow("pselect6"),
	allow("poll"),
	allow("ppoll"),
	allow("epoll_create"),
	allow("epoll_create1"),
	allow("epoll_ctl"),
	allow("epoll_wait"),
	allow("epoll_pwait"),
	allow("epoll_pwait2"),
	allow("eventfd"),
	allow("eventfd2"),
	allow("pipe"),
	allow("pipe2"),

	// ---- Processes and threads ----
	// clone is allowed for threads, fork and vfork, but never with a
	// CLONE_NEW* flag: a new namespace (above all a user namespace) would
	// hand the caller capabilities over it and expose kernel code that
	// unprivileged callers otherwise cannot reach.
	allow("clone", argMaskedEq(arg0, cloneNewFlags, 0)),
	// clone3 passes its flags inside a struct in user memory, which seccomp
	// cannot read, so it cannot be filtered the way clone is. Claiming it
	// does not exist (ENOSYS) makes glibc (pthread_create, posix_spawn,
	// fork) and Go fall back to clone, which is filtered. EPERM would not
	// do: glibc only falls back on ENOSYS.
	fail("clone3", unix.ENOSYS),
	allow("fork"),  // glibc forks through clone; static and older binaries use fork
	allow("vfork"), // subprocess (_posixsubprocess) uses it since 3.10
	allow("execve"),
	allow("execveat"), // fexecve
	allow("exit"),
	allow("exit_group"),
	allow("wait4"),
	allow("waitid"),
	allow("kill"), // the jail has its own pid namespace: only jail processes are visible
	allow("tkill"),
	allow("tgkill"),     // also Go's goroutine preemption (SIGURG)
	allow("pidfd_open"), // os.pidfd_open, asyncio's PidfdChildWatcher, Go's os.Process
	allow("pidfd_send_signal"),
	allow("getpid"),
	allow("getppid"),
	allow("gettid"),
	allow("getpgid"),
	allow("getpgrp"),
	allow("setpgid"),
	allow("getsid"),
	allow("setsid"),
	allow("getuid"),
	allow("geteuid"),
	allow("getgid"),
	allow("getegid"),
	allow("getgroups"),
	allow("getresuid"),
	allow("getresgid"),
	allow("capget"), // read-only
	allow("set_tid_address"),
	allow("set_robust_list"),
	allow("rseq"), // glibc registers every thread
	allow("futex"),
	allow("futex_waitv"), // futex2: wait on several futexes at once
	allow("arch_prctl"),  // thread pointer (ARCH_SET_FS), CET status queries
	// prctl: thread names, PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS,
	// PR_SET_CHILD_SUBREAPER (reaper), PR_SET_VMA (allocator region names).
	// The options that matter for security need capabilities.
	allow("prctl"),
	// personality only to ask for the current value or to keep the default;
	// anything else (e.g. ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC) weakens
	// the caller's own hardening and nothing we run needs it. The kernel
	// takes an unsigned int, and the 64-bit comparison is exact for both
	// values.
	allow("personality", argEq(arg0, perLinux)),
	allow("personality", argEq(arg0, perQuery)),
	// Resource limits: read them for any process (arg2, new_limit, is
	// NULL), change them only for the caller (pid 0). Without
	// CAP_SYS_RESOURCE a process can only lower hard limits or move a soft
	// limit up to its hard limit (Go's runtime raises RLIMIT_NOFILE so).
	allow("prlimit64", argEq(arg2, 0)),
	allow("prlimit64", argEq(arg0, 0)),
	allow("getrlimit"),
	allow("setrlimit"),
	allow("getrusage"),
	allow("times"),
	allow("sysinfo"),
	allow("uname"),
	allow("getcpu"),
	allow("getpriority"),
	allow("setpriority"), // os.nice; raising priority needs CAP_SYS_NICE
	allow("ioprio_get"),
	allow("sched_yield"),
	allow("sched_getaffinity"), // os.cpu_count, Go's runtime
	allow("sched_setaffinity"), // bounded by the jail's cpuset
	allow("sched_getparam"),
	allow("sched_getscheduler"),
	allow("sched_getattr"),
	allow("sched_get_priority_max"),
	allow("sched_get_priority_min"),
	allow("sched_rr_get_interval"),
	// Self-sandboxing can only narrow what the caller may do.
	allow("seccomp"),
	allow("landlock_create_ruleset"),
	allow("landlock_add_rule"),
	allow("landlock_restrict_self"),

	// ---- Signals ----
	allow("rt_sigaction"),
	allow("rt_sigprocmask"),
	allow("rt_sigreturn"),
	allow("rt_sigpending"),
	allow("rt_sigsuspend"),
	allow("rt_sigtimedwait"),
	allow("rt_sigqueueinfo"),
	allow("rt_tgsigqueueinfo"),
	allow("sigaltstack"), // faulthandler, Go's runtime
	allow("signalfd"),    // signals as a readable fd, for event loops
	allow("signalfd4"),
	allow("pause"),
	allow("restart_syscall"), // the kernel restarts interrupted sleeps with it

	// ---- Time and timers ----
	// Reading clocks only; setting them is in Denied.
	allow("clock_gettime"),
	allow("clock_getres"),
	allow("gettimeofday"),
	allow("time"),
	allow("nanosleep"),
	allow("clock_nanosleep"),
	allow("alarm"),
	allow("getitimer"),
	allow("setitimer"),
	allow("timer_create"), // POSIX timers; also Go's CPU profiler
	allow("timer_settime"),
	allow("timer_gettime"),
	allow("timer_getoverrun"),
	allow("timer_delete"),
	allow("timerfd_create"),
	allow("timerfd_settime"),
	allow("timerfd_gettime"),

	// ---- Inter-process communication ----
	// System V IPC objects live in the jail's IPC namespace. POSIX shared
	// memory and semaphores (multiprocessing) are files in /dev/shm and
	// need only openat, ftruncate, mmap and futex above.
	allow("shmget"),
	allow("shmat"),
	allow("shmdt"),
	allow("shmctl"),
	allow("semget"),
	allow("semop"),
	allow("semtimedop"),
	allow("semctl"),
	allow("msgget"),
	allow("msgsnd"),
	allow("msgrcv"),
	allow("msgctl"),

	// ---- Network ----
	// Socket families: AF_UNIX (multiprocessing, forkserver, asyncio's
	// self-pipe, nscd), AF_INET and AF_INET6 (loopback; the jail's network
	// namespace has only lo) and AF_NETLINK (glibc's getifaddrs and
	// getaddrinfo's address-family check). Every other family (AF_PACKET,
	// AF_VSOCK, AF_ALG, AF_BLUETOOTH, ...) is refused: those are rarely used
	// and have a long record of kernel bugs.
	//
	// Socket types are restricted too: no SOCK_RAW or SOCK_PACKET for IP,
	// and only NETLINK_ROUTE for netlink (netfilter, audit, xfrm etc. stay
	// closed even if the jail held CAP_NET_ADMIN in its own namespace).
	// Only the type bits are compared, so SOCK_NONBLOCK/SOCK_CLOEXEC pass.
	allow("socket", argEq(arg0, unix.AF_UNIX), argMaskedEq(arg1, sockTypeMask, unix.SOCK_STREAM)),
	allow("socket", argEq(arg0, unix.AF_UNIX), argMaskedEq(arg1, sockTypeMask, unix.SOCK_DGRAM)),
	allow("socket", argEq(arg0, unix.AF_UNIX), argMaskedEq(arg1, sockTypeMask, unix.SOCK_SEQPACKET)),
	//
	// For IP the protocol is pinned as well: TCP for streams, UDP for
	// datagrams, each as 0 (the default) or by number. MPTCP, UDP-Lite,
	// SCTP, ICMP datagrams and the rest are refused (DeniedSockets says
	// why, one by one).
	allow("socket", argEq(arg0, unix.AF_INET), argMaskedEq(arg1, sockTypeMask, unix.SOCK_STREAM), argEq(arg2, 0)),
	allow("socket", argEq(arg0, unix.AF_INET), argMaskedEq(arg1, sockTypeMask, unix.SOCK_STREAM), argEq(arg2, ipprotoTCP)),
	allow("socket", argEq(arg0, unix.AF_INET), argMaskedEq(arg1, sockTypeMask, unix.SOCK_DGRAM), argEq(arg2, 0)),
	allow("socket", argEq(arg0, unix.AF_INET), argMaskedEq(arg1, sockTypeMask, unix.SOCK_DGRAM), argEq(arg2, ipprotoUDP)),
	allow("socket", argEq(arg0, unix.AF_INET6), argMaskedEq(arg1, sockTypeMask, unix.SOCK_STREAM), argEq(arg2, 0)),
	allow("socket", argEq(arg0, unix.AF_INET6), argMaskedEq(arg1, sockTypeMask, unix.SOCK_STREAM), argEq(arg2, ipprotoTCP)),
	allow("socket", argEq(arg0, unix.AF_INET6), argMaskedEq(arg1, sockTypeMask, unix.SOCK_DGRAM), argEq(arg2, 0)),
	allow("socket", argEq(arg0, unix.AF_INET6), argMaskedEq(arg1, sockTypeMask, unix.SOCK_DGRAM), argEq(arg2, ipprotoUDP)),
	allow("socket", argEq(arg0, unix.AF_NETLINK), argMaskedEq(arg1, sockTypeMask, unix.SOCK_RAW), argEq(arg2, unix.NETLINK_ROUTE)),
	allow("socket", argEq(arg0, unix.AF_NETLINK), argMaskedEq(arg1, sockTypeMask, unix.SOCK_DGRAM), argEq(arg2, unix.NETLINK_ROUTE)),
	// socketpair exists only for AF_UNIX anyway.
	allow("socketpair", argEq(arg0, unix.AF_UNIX)),
	allow("bind"),
	allow("listen"),
	allow("accept"),
	allow("accept4"),
	allow("connect"),
	allow("shutdown"),
	allow("sendto"),
	allow("recvfrom"),
	allow("sendmsg"), // also SCM_RIGHTS for multiprocessing's forkserver
	allow("recvmsg"),
	allow("sendmmsg"),
	allow("recvmmsg"),
	allow("setsockopt"),
	allow("getsockopt"),
	allow("getsockname"),
	allow("getpeername"),

	// ---- Randomness ----
	allow("getrandom"), // hash seeds, os.urandom, OpenSSL, glibc malloc
}

// Note on ioctl: it is allowed for every request. Filtering it by request
// number is not workable with libcontainer's rule format: the kernel
// truncates the request to 32 bits while seccomp compares 64, so a
// "request != X" rule is bypassed by setting an upper bit, and a correct
// exclusion needs two conditions on the same argument, which libcontainer
// turns into an OR. The dangerous terminal requests (TIOCSTI, TIOCLINUX) need
// a terminal shared with something outside the jail; a jail must never be
// given one (its stdio are pipes).
