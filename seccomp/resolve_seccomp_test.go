//go:build cgo && seccomp

package seccomp

import (
	"fmt"

	libseccomp "github.com/seccomp/libseccomp-golang"
)

// canResolve reports whether resolveSyscall works in this build.
const canResolve = true

// resolveSyscall returns the x86_64 number of a syscall, resolved by
// libseccomp as libcontainer does when it builds the filter. libseccomp
// knows names from other architectures too and gives them negative
// pseudo-numbers; those are errors here, because libcontainer would skip
// such a rule without a word.
func resolveSyscall(name string) (int, error) {
	nr, err := libseccomp.GetSyscallFromNameByArch(name, libseccomp.ArchAMD64)
	if err != nil {
		return 0, fmt.Errorf("resolve syscall %q: %w", name, err)
	}
	if nr < 0 {
		return 0, fmt.Errorf("syscall %q does not exist on x86_64 (libseccomp pseudo-number %d)", name, nr)
	}
	return int(nr), nil
}
