//go:build cgo && seccomp

package integration

import (
	"fmt"
	"strings"
	"testing"

	libseccomp "github.com/seccomp/libseccomp-golang"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/seccomp"
)

// TestDeniedSyscalls calls every syscall the policy denies, directly
// through ctypes inside a real jail, with arguments that would be harmless
// even if the filter let them through (all -1), and expects EPERM (ENOSYS
// for clone3, whose refusal makes libc fall back to clone).
func TestDeniedSyscalls(t *testing.T) {
	d := daemon(t)
	var calls []string
	for _, s := range seccomp.Denied {
		nr, err := libseccomp.GetSyscallFromName(s.Name)
		if err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		want := "EPERM"
		if s.Name == "clone3" {
			want = "ENOSYS"
		}
		calls = append(calls, fmt.Sprintf("(%q, %d, %q)", s.Name, nr, want))
	}
	code := `
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
M = ctypes.c_long(-1)
for name, nr, want in [` + strings.Join(calls, ", ") + `]:
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), M, M, M, M, M, M)
    got = errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
    print("BLOCKED" if r == -1 and got == want else "ESCAPED", name, r, got)
# clone with a namespace flag, and unshare of a user namespace
CLONE_NEWUSER, SIGCHLD = 0x10000000, 17
for name, nr, args in (("clone(CLONE_NEWUSER)", 56, (CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0)), ("unshare(CLONE_NEWUSER)", 272, (CLONE_NEWUSER,))):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    if r == 0:
        import os; os._exit(0)  # we are a child that should never exist
    got = errno.errorcode.get(ctypes.get_errno(), "?")
    print("BLOCKED" if r == -1 and got == "EPERM" else "ESCAPED", name, r, got)
`
	res := run(t, d, &api.RunRequest{Code: code})
	if res.Error != nil || res.ExitCode != 0 {
		t.Fatalf("exit %d error %+v\n%s", res.ExitCode, res.Error, res.Stderr)
	}
	blocked := strings.Count(res.Stdout, "BLOCKED")
	for _, l := range strings.Split(res.Stdout, "\n") {
		if strings.HasPrefix(l, "ESCAPED") {
			t.Errorf("%s", l)
		}
	}
	if want := len(seccomp.Denied) + 2; blocked != want {
		t.Errorf("%d of %d denied calls blocked\n%s", blocked, want, res.Stdout)
	}
}
