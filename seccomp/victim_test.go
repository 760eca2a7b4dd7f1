package seccomp

// The victim tests prove the policy against a real process, without root:
// the test binary re-executes itself, the child sets no_new_privs, loads the
// filter exactly as libcontainer's init does (InitSeccomp(Config())) and
// execs the host's Python with testdata/victim.py. The script reads the
// host filesystem normally; only the filter is under test here.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	lcseccomp "github.com/opencontainers/runc/libcontainer/seccomp"
	"golang.org/x/sys/unix"
)

const (
	// envVictim makes the test binary act as the victim instead of running
	// tests.
	envVictim = "CELLBLOCK_SECCOMP_VICTIM"
	// envVictimArgv is the JSON-encoded argv the victim execs under the
	// filter; argv[0] must be an absolute path.
	envVictimArgv = "CELLBLOCK_SECCOMP_VICTIM_ARGV"
	// envTestPython overrides the interpreter (default: python3 on PATH),
	// e.g. to run the suite against each of CPython 3.8-3.13.
	envTestPython = "CELLBLOCK_TEST_PYTHON"

	// marker is what victim.py prints when all its checks passed.
	marker = "CELLBLOCK-SECCOMP-OK"
	// victimTimeout bounds one victim run; a healthy run takes seconds.
	victimTimeout = 90 * time.Second
)

func TestMain(m *testing.M) {
	if os.Getenv(envVictim) == "1" {
		err := execUnderFilter()
		// Only reached when something failed before or at execve.
		fmt.Fprintln(os.Stderr, "seccomp victim:", err)
		os.Exit(97)
	}
	os.Exit(m.Run())
}

// execUnderFilter loads the policy into this process and execs the argv in
// envVictimArgv. It returns only on failure.
func execUnderFilter() error {
	// no_new_privs is set per thread: set it, load the filter and execve
	// on one and the same thread.
	runtime.LockOSThread()
	var argv []string
	if err := json.Unmarshal([]byte(os.Getenv(envVictimArgv)), &argv); err != nil || len(argv) == 0 {
		return fmt.Errorf("bad %s: %v", envVictimArgv, err)
	}
	env := make([]string, 0, len(os.Environ()))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envVictim+"=") && !strings.HasPrefix(kv, envVictimArgv+"=") {
			env = append(env, kv)
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	if _, err := lcseccomp.InitSeccomp(Config()); err != nil {
		return fmt.Errorf("load filter: %w", err)
	}
	return fmt.Errorf("exec %s: %w", argv[0], syscall.Exec(argv[0], argv, env))
}

// requireFilter skips when this build cannot load seccomp filters.
func requireFilter(t *testing.T) {
	t.Helper()
	if !Enabled {
		t.Skip("seccomp support not compiled in: run with cgo and -tags seccomp")
	}
	if runtime.GOARCH != "amd64" {
		t.Skipf("the policy is for amd64, this is %s", runtime.GOARCH)
	}
}

// hostPython returns the absolute path of the real interpreter, resolved
// before any filter is loaded (python3 on PATH may be a pyenv shim script).
func hostPython(t *testing.T) string {
	t.Helper()
	name := os.Getenv(envTestPython)
	if name == "" {
		name = "python3"
	}
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("no Python interpreter to run the victim: %v", err)
	}
	out, err := exec.Command(p, "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		t.Fatalf("ask %s for sys.executable: %v", p, err)
	}
	exe := strings.TrimSpace(string(out))
	if !filepath.IsAbs(exe) {
		t.Fatalf("%s reports sys.executable %q, want an absolute path", p, exe)
	}
	return exe
}

func victimScript(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", "victim.py"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// pythonCmd prepares python victim.py args..., run in a fresh directory,
// in its own session (no controlling terminal, which keeps probing
// vhangup harmless), with extraEnv added.
func pythonCmd(ctx context.Context, t *testing.T, argv0 string, argv []string, extraEnv ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, argv0)
	cmd.Args = argv
	cmd.Env = append(os.Environ(), "PYTHONIOENCODING=utf-8", "PYTHONDONTWRITEBYTECODE=1")
	cmd.Env = append(cmd.Env, extraEnv...)
	cmd.Dir = t.TempDir()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// runVictim runs victim.py with args under the filter and fails the test
// unless it exits 0 and prints the marker.
func runVictim(t *testing.T, args []string, extraEnv ...string) string {
	t.Helper()
	requireFilter(t)
	py := hostPython(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	argv, err := json.Marshal(append([]string{py, victimScript(t)}, args...))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), victimTimeout)
	defer cancel()
	env := append([]string{envVictim + "=1", envVictimArgv + "=" + string(argv)}, extraEnv...)
	cmd := pythonCmd(ctx, t, self, []string{self}, env...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("%s %v under the filter: %v in %v\n%s", py, args, err, time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("victim failed: %v", err)
	}
	if !strings.Contains(string(out), marker) {
		t.Fatalf("victim exited 0 without printing %s", marker)
	}
	return string(out)
}

// TestFilterAllowsPythonWorkload runs threads, multiprocessing (fork, spawn,
// forkserver), shared memory, subprocesses, asyncio over loopback TCP,
// sqlite, mmap, ssl, ctypes, select/epoll, timers and signals under the
// filter.
func TestFilterAllowsPythonWorkload(t *testing.T) {
	runVictim(t, []string{"workload"})
}

// probe is one syscall victim.py calls, with the errno it must get.
type probe struct {
	Name  string  `json:"name"`
	Nr    int     `json:"nr"`
	Args  []int64 `json:"args"`
	Errno int     `json:"errno"`
}

// probeArgs are the arguments for probing a denied syscall. Every value is
// invalid on purpose (bad pointers, flags or ids), so that even a broken
// filter in a root test run would only produce EFAULT/EINVAL/EBADF, never a
// reboot or a mount.
func probeArgs(name string) []int64 {
	switch name {
	case "init_module":
		return []int64{-1, 0, -1} // zero length: ENOEXEC without a filter
	case "personality":
		return []int64{0x0040000} // ADDR_NO_RANDOMIZE
	}
	return []int64{-1, -1, -1, -1, -1, -1}
}

// TestFilterDeniesSyscalls checks that every syscall in Denied fails with
// its errno under the filter, and the argument filters: clone with each
// CLONE_NEW* flag, socket families, types and IP protocols (every entry of
// DeniedSockets), mknod of devices,
// personality, prlimit64.
func TestFilterDeniesSyscalls(t *testing.T) {
	requireFilter(t)
	want := map[string]int{}
	for _, r := range policy {
		if r.errno != 0 {
			want[r.name] = int(r.errno)
		}
	}
	var probes []probe
	for _, d := range Denied {
		nr, err := resolveSyscall(d.Name)
		if err != nil {
			t.Fatal(err)
		}
		errno, ok := want[d.Name]
		if !ok {
			errno = int(unix.EPERM)
		}
		probes = append(probes, probe{Name: d.Name, Nr: nr, Args: probeArgs(d.Name), Errno: errno})
	}
	socketNr, err := resolveSyscall("socket")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range DeniedSockets {
		probes = append(probes, probe{Name: d.Name, Nr: socketNr,
			Args: []int64{int64(d.Family), int64(d.Type), int64(d.Protocol)}, Errno: int(unix.EPERM)})
	}
	data, err := json.Marshal(probes)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "probes.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	runVictim(t, []string{"denied", path})
}

// TestFilterKillsForeignABIs checks that x32 syscall numbers and i386
// syscalls made with int $0x80 from a 64-bit process kill the caller: the
// filter admits only the amd64 ABI and libseccomp's bad-architecture
// action, which libcontainer leaves at its default, kills the thread. The
// i386 half needs a kernel with IA32 emulation and is skipped without.
func TestFilterKillsForeignABIs(t *testing.T) {
	requireFilter(t)
	py := hostPython(t)
	ctx, cancel := context.WithTimeout(t.Context(), victimTimeout)
	defer cancel()
	var extraEnv []string
	out, err := pythonCmd(ctx, t, py, []string{py, victimScript(t), "ia32-available"}).CombinedOutput()
	var exitErr *exec.ExitError
	switch {
	case err == nil && strings.Contains(string(out), marker):
	case errors.As(err, &exitErr) && exitErr.ExitCode() == 2:
		t.Logf("not checking i386 calls: %s", out)
		extraEnv = append(extraEnv, "CELLBLOCK_TEST_NO_IA32=1")
	default:
		t.Fatalf("probing int $0x80 without a filter: %v\n%s", err, out)
	}
	runVictim(t, []string{"foreign-abi"}, extraEnv...)
}
