// Package cgroup owns the control group of every run: it creates the
// directories, sets the resource limits, reads the statistics, kills what is
// left inside, and removes the directories again. At start-up it also sweeps
// the run cgroups a crashed daemon left behind.
//
// It is the only owner of those cgroups. The jail hands libcontainer
// [Cgroup.LibcontainerPath] and device rules only (no limits), so libcontainer
// merely joins directories this package has already created and configured,
// and applies the jail's device rules (devices.allow and devices.deny on v1,
// an eBPF program on v2): it refuses to start a container whose device rules
// it may not apply (SkipDevices), so they are the one thing of a run's cgroup
// it writes besides joining it. TestLibcontainerJoinsOnlyOurDirs holds it to
// that.
// The jail reads [Cgroup.Stats] and calls [Cgroup.Delete] before
// libcontainer's container.Destroy, whose cgroup removal then finds nothing
// and ignores that (ENOENT). In the other order libcontainer removes the
// directories itself and the statistics are lost.
//
// Layout per mode (<own> is the daemon's own cgroup in a hierarchy):
//
//   - cgroup v1 and hybrid: <own>/<name>/<id> in every v1 hierarchy
//     libcontainer joins (cpuset, devices, memory, cpu, cpuacct, pids, blkio,
//     freezer, name=systemd, and hugetlb, net_cls, net_prio, perf_event,
//     rdma, misc when mounted) plus, in hybrid mode, <unified mount>/<name>/<id>
//     in the cgroup2 hierarchy, exactly as libcontainer resolves the relative
//     path "<name>/<id>".
//   - cgroup v2: the daemon's own cgroup is a delegated subtree. OpenRoot moves
//     the daemon process into the leaf <own>/daemon, enables the cpu, memory
//     and pids controllers below <own>, and runs live in <own>/runs/<id>.
//     libcontainer gets the absolute path of that directory.
//
// A subtree is one Root's at a time: OpenRoot locks it (flock on its
// directories) and refuses, naming the holder's pid, when another daemon
// holds it, so that no daemon's Sweep removes the runs of a live one.
//
// One library per job: containerd/cgroups (v3) creates the directories and
// writes every control file it has an API for: the limits (memory.max,
// memory.swap.max, memory.oom.group, pids.max, cpu.max, cpu.weight on v2;
// memory.limit_in_bytes, memory.memsw.limit_in_bytes, pids.max,
// cpu.cfs_quota_us, cpu.cfs_period_us, cpu.shares on v1), a claimed jail's
// new tasks limit and CPU weight (through the one controller's Update, not
// every subsystem's), cgroup.kill (Manager.Kill), and the daemon's move into
// its leaf (Manager.AddProc). This package writes a file directly only where
// containerd has no API for it, or where its API would do something the
// daemon must not, each listed here with the reason:
//
//   - cgroup.freeze (v2, kernels 5.2 to 5.13, which lack cgroup.kill) and
//     freezer.state (v1), in a kill: containerd's Freeze and Thaw loop until
//     the state is reached, without bound, and a run must not stall its own
//     kill; ours wait at most freezeTimeout, and the next round goes on.
//   - cgroup.subtree_control (v2, <own> and <own>/runs): containerd's
//     ToggleControllers (and NewManager) write the subtree_control of every
//     ancestor up to the mount's root, which are systemd's, not ours.
//   - pids.max = max (v1, a tasks limit lifted by Update): containerd's v1
//     pids controller writes only a positive limit.
//   - memory.use_hierarchy (v1, <own>/<name>): no API.
//   - memory.swappiness (v1): containerd writes it among the limits and fails
//     the whole create on the EINVAL some kernels answer for cgroups below a
//     use_hierarchy parent; it is a preference, tolerated when refused.
//   - memory.memsw.limit_in_bytes ahead of a higher memory limit (v1
//     Update): containerd's cgroup1 (v3.1.3) reorders the wrong pair of
//     settings when a limit goes up, which the kernel refuses.
//   - memory.max_usage_in_bytes (v1) and memory.peak (v2, kernel >= 6.12,
//     through a descriptor kept open) reset at the start of accounting: no
//     API.
//
// Statistics are read directly, only the files a run reports: containerd's
// Stat reads every controller's (memory.stat and blkio's among them), which
// took a millisecond or more on the answer's path.
//
// What it must not do: create or write cgroups outside the daemon's own
// subtree (the exception libcontainer forces on hybrid hosts is the unified
// hierarchy, which libcontainer always resolves from its mount root), signal
// any process that is not a member of one of its run cgroups, or leave a
// directory behind, on success or on failure. It does not start processes
// and does not log; errors are returned wrapped with context.
package cgroup
