// Package seccomp owns cellblock's system-call policy for jailed Python: the
// allowlist (policy.go, a table meant to be read and reviewed like a policy),
// the list of syscalls denied on purpose (denied.go), and the conversion of
// that table into libcontainer's *configs.Seccomp.
//
// The package only describes the policy. It must not load filters, start
// processes or touch the kernel: libcontainer's init installs the filter as
// the last containment step before execve, and the daemon refuses to start
// when [Enabled] is false (fail closed). Everything here is plain data and
// needs neither root nor cgo.
//
// The policy is an allowlist for the x86_64 ABI only. A syscall that is not in
// the table fails with EPERM; syscalls numbered above the highest one the
// table names (futex_waitv, 449) fail with ENOSYS, from a stub libcontainer
// adds, so that libc falls back to older interfaces. Calls made through a foreign ABI (i386 `int $0x80`,
// x32 numbers with bit 30 set) do not match the filter's architecture and the
// calling thread is killed with SIGSYS by libseccomp's bad-architecture
// action, which libcontainer leaves at its default.
package seccomp

import (
	"sync"

	"github.com/opencontainers/runc/libcontainer/configs"
	"golang.org/x/sys/unix"
)

// DeniedSyscall is a syscall the policy refuses on purpose, with the reason.
// It documents the policy; the filter itself denies everything not allowed.
type DeniedSyscall struct {
	Name   string
	Reason string
}

// DeniedSocket is a kind of socket the policy refuses on purpose, with the
// reason: a family, type and protocol that socket(2) fails for with EPERM.
type DeniedSocket struct {
	Name                   string
	Family, Type, Protocol int
	Reason                 string
}

// architecture is the only ABI the filter admits. libseccomp kills callers
// using any other ABI (see the package comment).
const architecture = "amd64"

// defaultErrno is what a syscall outside the allowlist returns.
const defaultErrno = unix.EPERM

// rule is one line of the policy: a syscall by name, optionally narrowed by
// conditions on its arguments. All conditions of one rule must hold (AND);
// several rules for the same name are alternatives (OR).
//
// Keep at most one condition per argument index in a rule: libcontainer
// splits a rule with two conditions on the same argument into separate
// rules, which turns the intended AND into an OR.
type rule struct {
	name string
	args []configs.Arg
	// errno, if non-zero, makes the call fail with this errno instead of
	// being allowed. Used where EPERM would stop libc from falling back.
	errno unix.Errno
}

// allow admits a syscall, unconditionally or when all conds hold.
func allow(name string, conds ...configs.Arg) rule {
	return rule{name: name, args: conds}
}

// fail makes a syscall return errno instead of the default EPERM.
func fail(name string, errno unix.Errno) rule {
	return rule{name: name, errno: errno}
}

// argEq holds when argument i equals v (all 64 bits are compared, so a value
// with stray upper bits does not match and is denied).
func argEq(i uint, v uint64) configs.Arg {
	return configs.Arg{Index: i, Value: v, Op: configs.EqualTo}
}

// argMaskedEq holds when (argument i & mask) == v.
func argMaskedEq(i uint, mask, v uint64) configs.Arg {
	// libcontainer passes Value and ValueTwo to libseccomp's
	// SCMP_CMP_MASKED_EQ as (mask, datum).
	return configs.Arg{Index: i, Value: mask, ValueTwo: v, Op: configs.MaskEqualTo}
}

// Config returns the policy as libcontainer configuration. It is built once;
// every caller gets the same pointer and must treat it as immutable.
func Config() *configs.Seccomp {
	return builtConfig()
}

var builtConfig = sync.OnceValue(func() *configs.Seccomp {
	return buildConfig(policy)
})

// buildConfig converts a policy table into libcontainer's representation.
func buildConfig(table []rule) *configs.Seccomp {
	errnoRet := uint(defaultErrno)
	cfg := &configs.Seccomp{
		DefaultAction:   configs.Errno,
		DefaultErrnoRet: &errnoRet,
		Architectures:   []string{architecture},
		Syscalls:        make([]*configs.Syscall, 0, len(table)),
	}
	for _, r := range table {
		sc := &configs.Syscall{Name: r.name, Action: configs.Allow}
		if r.errno != 0 {
			ret := uint(r.errno)
			sc.Action = configs.Errno
			sc.ErrnoRet = &ret
		}
		for _, a := range r.args {
			sc.Args = append(sc.Args, &configs.Arg{Index: a.Index, Value: a.Value, ValueTwo: a.ValueTwo, Op: a.Op})
		}
		cfg.Syscalls = append(cfg.Syscalls, sc)
	}
	return cfg
}
