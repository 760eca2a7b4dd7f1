//go:build !(cgo && seccomp)

package seccomp

import "errors"

// canResolve reports whether resolveSyscall works in this build.
const canResolve = false

// resolveSyscall needs libseccomp, which this build (no cgo or no "seccomp"
// tag) does not link.
func resolveSyscall(string) (int, error) {
	return 0, errors.New("syscall names need libseccomp: build with cgo and -tags seccomp")
}
