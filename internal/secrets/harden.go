package secrets

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Harden keeps the process's memory, where the values live, out of other
// processes' reach and off the disk, as far as the kernel allows:
//
//   - not dumpable (PR_SET_DUMPABLE 0): no core dump of it, and no
//     process without CAP_SYS_PTRACE may attach to it or read its
//     /proc/PID/mem, environ or maps;
//   - RLIMIT_CORE 0: no core file either way;
//   - all its memory locked, now and as it grows, page by page as it is
//     touched (mlockall MCL_CURRENT|MCL_FUTURE|MCL_ONFAULT): a value, and
//     every copy a request or a TLS record makes of it, is never written
//     to swap.
//
// Each step is tried; the error lists those that failed, for a warning
// (the daemon runs on without them). Exec resets the first and fork drops
// the last, so the processes the daemon starts inherit neither; they do
// inherit the core limit, and no jail needs a core file.
func Harden() error {
	var errs []error
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		errs = append(errs, fmt.Errorf("not dumpable: %w", err))
	}
	if err := unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{}); err != nil {
		errs = append(errs, fmt.Errorf("no core file: %w", err))
	}
	if err := unix.Mlockall(unix.MCL_CURRENT | unix.MCL_FUTURE | unix.MCL_ONFAULT); err != nil {
		errs = append(errs, fmt.Errorf("memory locked: %w", err))
	}
	return errors.Join(errs...)
}
