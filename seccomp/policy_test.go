package seccomp

import (
	"slices"
	"testing"

	"github.com/opencontainers/runc/libcontainer/configs"
	lcseccomp "github.com/opencontainers/runc/libcontainer/seccomp"
	"golang.org/x/sys/unix"
)

func TestEnabledMatchesLibcontainer(t *testing.T) {
	if Enabled != lcseccomp.Enabled {
		t.Fatalf("Enabled = %v but libcontainer's seccomp.Enabled = %v; the build tags disagree", Enabled, lcseccomp.Enabled)
	}
}

func TestDeniedEntries(t *testing.T) {
	seen := map[string]bool{}
	for _, d := range Denied {
		if d.Name == "" {
			t.Errorf("Denied entry with empty name (reason %q)", d.Reason)
		}
		if d.Reason == "" {
			t.Errorf("Denied %q has no reason", d.Name)
		}
		if seen[d.Name] {
			t.Errorf("Denied lists %q twice", d.Name)
		}
		seen[d.Name] = true
	}
}

func TestPolicyTable(t *testing.T) {
	denied := map[string]bool{}
	for _, d := range Denied {
		denied[d.Name] = true
	}
	unconditional := map[string]bool{}
	conditional := map[string]bool{}
	for _, r := range policy {
		if r.name == "" {
			t.Fatalf("policy has a rule without a name: %+v", r)
		}
		if len(r.args) == 0 {
			if unconditional[r.name] {
				t.Errorf("%q has two unconditional rules", r.name)
			}
			unconditional[r.name] = true
		} else {
			conditional[r.name] = true
		}
		if r.errno != 0 && len(r.args) != 0 {
			t.Errorf("%q: errno rules must be unconditional", r.name)
		}
		// libcontainer turns several conditions on one argument into an OR.
		idx := map[uint]bool{}
		for _, a := range r.args {
			if a.Index > 5 {
				t.Errorf("%q: argument index %d out of range", r.name, a.Index)
			}
			if idx[a.Index] {
				t.Errorf("%q: two conditions on argument %d would be OR-ed by libcontainer", r.name, a.Index)
			}
			idx[a.Index] = true
		}
		if denied[r.name] && r.errno == 0 && len(r.args) == 0 {
			t.Errorf("%q is allowed unconditionally and listed in Denied", r.name)
		}
	}
	for name := range unconditional {
		if conditional[name] {
			t.Errorf("%q has an unconditional rule, which makes its conditional rules moot", name)
		}
	}
	// Every errno rule must be documented in Denied.
	for _, r := range policy {
		if r.errno != 0 && !denied[r.name] {
			t.Errorf("%q fails with %v but is not in Denied", r.name, r.errno)
		}
	}
}

func TestConfig(t *testing.T) {
	cfg := Config()
	if cfg != Config() {
		t.Fatal("Config() must build once and return the same pointer")
	}
	if cfg.DefaultAction != configs.Errno {
		t.Errorf("DefaultAction = %v, want Errno", cfg.DefaultAction)
	}
	if cfg.DefaultErrnoRet == nil || *cfg.DefaultErrnoRet != uint(unix.EPERM) {
		t.Errorf("DefaultErrnoRet = %v, want EPERM", cfg.DefaultErrnoRet)
	}
	if !slices.Equal(cfg.Architectures, []string{"amd64"}) {
		t.Errorf("Architectures = %q, want exactly [amd64] so that x32 and i386 calls are killed", cfg.Architectures)
	}
	if len(cfg.Flags) != 0 || cfg.ListenerPath != "" {
		t.Errorf("unexpected flags %v or listener %q", cfg.Flags, cfg.ListenerPath)
	}
	if len(cfg.Syscalls) != len(policy) {
		t.Fatalf("Config has %d syscall rules, policy %d", len(cfg.Syscalls), len(policy))
	}

	rules := map[string][]*configs.Syscall{}
	for _, sc := range cfg.Syscalls {
		rules[sc.Name] = append(rules[sc.Name], sc)
		switch sc.Action {
		case configs.Allow:
			if sc.ErrnoRet != nil {
				t.Errorf("%s: allow rule with an errno", sc.Name)
			}
		case configs.Errno:
			if sc.ErrnoRet == nil || *sc.ErrnoRet == uint(unix.EPERM) {
				t.Errorf("%s: errno rule must name an errno other than the default", sc.Name)
			}
		default:
			t.Errorf("%s: unexpected action %v", sc.Name, sc.Action)
		}
	}

	// clone: one rule, allowed only when no namespace flag is set.
	clone := rules["clone"]
	if len(clone) != 1 || len(clone[0].Args) != 1 {
		t.Fatalf("clone rules = %+v, want one rule with one condition", clone)
	}
	a := clone[0].Args[0]
	if a.Index != 0 || a.Op != configs.MaskEqualTo || a.ValueTwo != 0 {
		t.Errorf("clone condition = %+v, want (arg0 & mask) == 0", *a)
	}
	for _, f := range []uint64{unix.CLONE_NEWNS, unix.CLONE_NEWCGROUP, unix.CLONE_NEWUTS, unix.CLONE_NEWIPC,
		unix.CLONE_NEWUSER, unix.CLONE_NEWPID, unix.CLONE_NEWNET, unix.CLONE_NEWTIME} {
		if a.Value&f == 0 {
			t.Errorf("clone mask %#x misses namespace flag %#x", a.Value, f)
		}
	}
	if a.Value&(unix.CLONE_VM|unix.CLONE_THREAD|unix.CLONE_VFORK|unix.CLONE_PIDFD|unix.CLONE_SETTLS) != 0 {
		t.Errorf("clone mask %#x blocks flags threads and vfork need", a.Value)
	}

	// clone3: ENOSYS so that libc falls back to clone.
	c3 := rules["clone3"]
	if len(c3) != 1 || c3[0].Action != configs.Errno || c3[0].ErrnoRet == nil || *c3[0].ErrnoRet != uint(unix.ENOSYS) || len(c3[0].Args) != 0 {
		t.Errorf("clone3 rules = %+v, want one unconditional ENOSYS rule", c3)
	}

	// socket: only the four families, each rule pinned to one.
	families := map[uint64]bool{}
	for _, sc := range rules["socket"] {
		var domain *configs.Arg
		for _, a := range sc.Args {
			if a.Index == 0 {
				domain = a
			}
		}
		if domain == nil || domain.Op != configs.EqualTo {
			t.Fatalf("socket rule %+v does not pin the domain", sc)
		}
		families[domain.Value] = true
	}
	for _, f := range []uint64{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK} {
		if !families[f] {
			t.Errorf("socket family %d is not allowed", f)
		}
	}
	if len(families) != 4 {
		t.Errorf("socket families = %v, want exactly AF_UNIX, AF_INET, AF_INET6, AF_NETLINK", families)
	}

	// Syscalls whose absence the daemon's init, the reaper or CPython would
	// not survive; a cheap guard against an accidental deletion.
	for _, name := range []string{
		"execve", "exit", "exit_group", "rt_sigreturn", "fstat", "fstatfs", "openat", "openat2",
		"statx", "close_range", "write", "close", "futex", "mmap", "mprotect", "clone",
		"wait4", "epoll_pwait", "getrandom", "sigaltstack", "tgkill",
	} {
		found := false
		for _, sc := range rules[name] {
			found = found || sc.Action == configs.Allow
		}
		if !found {
			t.Errorf("%s is not allowed", name)
		}
	}
}

// TestSyscallNamesResolve checks every name against libseccomp's x86_64
// table. libcontainer skips names it cannot resolve without an error, so a
// typo would silently drop a rule.
func TestSyscallNamesResolve(t *testing.T) {
	if !canResolve {
		t.Skip("needs libseccomp: run with cgo and -tags seccomp")
	}
	maxRule := 0
	for _, r := range policy {
		nr, err := resolveSyscall(r.name)
		if err != nil {
			t.Errorf("policy: %v", err)
			continue
		}
		maxRule = max(maxRule, nr)
	}
	for _, d := range Denied {
		nr, err := resolveSyscall(d.Name)
		if err != nil {
			t.Errorf("Denied: %v", err)
			continue
		}
		// libcontainer answers ENOSYS for every syscall above the highest
		// one the rules name; Denied promises EPERM.
		if nr > maxRule {
			t.Errorf("Denied %q (%d) is above the highest rule (%d) and would get ENOSYS, not EPERM", d.Name, nr, maxRule)
		}
	}
}

// socketAllowed evaluates the compiled socket rules as libseccomp would:
// a call is allowed when every argument condition of one rule holds.
func socketAllowed(t *testing.T, family, typ, protocol uint64) bool {
	t.Helper()
	args := []uint64{family, typ, protocol}
	for _, sc := range Config().Syscalls {
		if sc.Name != "socket" || sc.Action != configs.Allow {
			continue
		}
		ok := true
		for _, a := range sc.Args {
			v := args[a.Index]
			switch a.Op {
			case configs.EqualTo:
				ok = ok && v == a.Value
			case configs.MaskEqualTo:
				ok = ok && v&a.Value == a.ValueTwo
			default:
				t.Fatalf("socket rule %+v uses operator %v, which this test does not evaluate", sc, a.Op)
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// IP sockets: TCP and UDP only, whatever the flags; every entry of
// DeniedSockets is refused by the table itself (the victim test proves the
// same under the real filter).
func TestSocketProtocols(t *testing.T) {
	for _, fam := range []uint64{unix.AF_INET, unix.AF_INET6} {
		for _, c := range []struct{ typ, proto uint64 }{
			{unix.SOCK_STREAM, 0}, {unix.SOCK_STREAM | unix.SOCK_CLOEXEC, ipprotoTCP},
			{unix.SOCK_DGRAM | unix.SOCK_NONBLOCK, 0}, {unix.SOCK_DGRAM, ipprotoUDP},
		} {
			if !socketAllowed(t, fam, c.typ, c.proto) {
				t.Errorf("socket(%d, %#x, %d) is refused; Python needs it", fam, c.typ, c.proto)
			}
		}
	}
	if len(DeniedSockets) == 0 {
		t.Fatal("DeniedSockets is empty")
	}
	names := map[string]bool{}
	for _, d := range DeniedSockets {
		if d.Reason == "" || names[d.Name] {
			t.Errorf("DeniedSockets entry %q: empty reason or listed twice", d.Name)
		}
		names[d.Name] = true
		if socketAllowed(t, uint64(d.Family), uint64(d.Type), uint64(d.Protocol)) {
			t.Errorf("%s is allowed by the policy", d.Name)
		}
	}
	for _, want := range []int{ipprotoMPTCP, ipprotoUDPLite, ipprotoSCTP, ipprotoRaw} {
		if !slices.ContainsFunc(DeniedSockets, func(d DeniedSocket) bool { return d.Protocol == want }) {
			t.Errorf("protocol %d is not in DeniedSockets", want)
		}
	}
}
