package cgroup

import "errors"

var (
	// ErrInvalidID is returned for a run id or root name that does not match
	// [a-zA-Z0-9_-]{1,64}.
	ErrInvalidID = errors.New("invalid cgroup id")
	// ErrInvalidLimits is returned by Limits.Validate.
	ErrInvalidLimits = errors.New("invalid cgroup limits")
	// ErrExists is returned by Create when a cgroup for the id already exists.
	ErrExists = errors.New("cgroup already exists")
	// ErrUnsupported is returned when the host's cgroup layout is one this
	// package cannot manage (no cgroup mounts, no devices hierarchy, a cgroup2
	// mount that libcontainer would not find, ...).
	ErrUnsupported = errors.New("unsupported cgroup layout")
	// ErrNoController is returned when a limit is asked for whose controller
	// is not available to the daemon.
	ErrNoController = errors.New("cgroup controller not available")
	// ErrNotDelegated is returned on cgroup v2 when the daemon's own cgroup
	// cannot be turned into a subtree for runs (typically: not a systemd
	// Delegate=yes unit, or other processes share the daemon's cgroup).
	ErrNotDelegated = errors.New("cgroup not delegated to the daemon")
	// ErrKillTimeout is returned when processes are still in a cgroup after
	// the bounded wait of Kill.
	ErrKillTimeout = errors.New("processes survived kill")
	// ErrInUse is returned by OpenRoot when another process (another
	// daemon) holds the subtree; the error is an *InUseError.
	ErrInUse = errors.New("cgroup subtree in use")
	// ErrClosed is returned by Root methods after Close.
	ErrClosed = errors.New("cgroup root closed")
)
