// Package cgroup owns the control group of every run: it creates the
// directories, sets the resource limits, reads the statistics, kills what is
// left inside, and removes the directories again. At start-up it also sweeps
// the run cgroups a crashed daemon left behind.
//
// It is the only owner of those cgroups. The jail hands libcontainer
// [Cgroup.LibcontainerPath] and device rules only (no limits), so libcontainer
// merely joins directories this package has already created and configured.
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
// What it must not do: create or write cgroups outside the daemon's own
// subtree (the exception libcontainer forces on hybrid hosts is the unified
// hierarchy, which libcontainer always resolves from its mount root), signal
// any process that is not a member of one of its run cgroups, or leave a
// directory behind, on success or on failure. It does not start processes
// and does not log; errors are returned wrapped with context.
package cgroup
