// Package guest is the program that runs as /init inside the cgroup v2 test
// VM (see package integration/vm, which builds the VM and boots it under
// qemu). It turns a bare kernel and initramfs into a machine that can run
// cellblockd: it mounts the pseudo filesystems and a pure cgroup2 hierarchy,
// loads the virtio, 9p and overlay modules, moves off the initramfs so that
// jails can pivot_root, and mounts the host directories the host shared
// over 9p. Then it starts the real daemon in a delegated cgroup of its own,
// proves the cgroup v2 checks through the daemon's socket, runs the cgroup
// package's root tests in another delegated cgroup, reports one line per
// check and powers the machine off.
//
// Results are lines "VMTEST PASS name: detail" and "VMTEST FAIL name: why",
// written to the console and to the results file on the writable share; the
// host reads the file with [ParseResults]. Every check in [Checks] is
// reported exactly once, also when an earlier step failed.
//
// What it must not do: run anywhere but as PID 1 of a throwaway VM (it
// mounts over /, writes the root cgroup and powers the machine off), or
// report a check as passed that it did not observe.
package guest
