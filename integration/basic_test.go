package integration

import (
	"strings"
	"testing"

	"github.com/cellblock/cellblock/internal/api"
)

func TestHelloWorld(t *testing.T) {
	d := daemon(t)
	res := runOK(t, d, &api.RunRequest{Code: "print('hello, world')"})
	if res.Stdout != "hello, world\n" || res.Stderr != "" {
		t.Fatalf("stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	if res.DurationMs <= 0 || res.MemoryPeakBytes <= 0 {
		t.Errorf("statistics not filled: duration %d ms, memory peak %d", res.DurationMs, res.MemoryPeakBytes)
	}
	if res.Python == "" || res.RunID == "" {
		t.Errorf("python %q run id %q", res.Python, res.RunID)
	}
}

func TestExitCodes(t *testing.T) {
	d := daemon(t)
	for _, c := range []struct {
		code string
		want int
	}{
		{"import sys; sys.exit(0)", 0},
		{"import sys; sys.exit(3)", 3},
		{"import sys; sys.exit(255)", 255},
		{"raise ValueError('boom')", 1},
		{"import os; os._exit(42)", 42},
		{"import os, signal; os.kill(os.getpid(), signal.SIGTERM)", 128 + 15},
		{"import os; os.abort()", 128 + 6},
		{"import os, signal; os.kill(os.getpid(), signal.SIGKILL)", 128 + 9},
	} {
		res := run(t, d, &api.RunRequest{Code: c.code})
		if res.Error != nil || res.ExitCode != c.want {
			t.Errorf("%s: exit %d (error %+v), want %d; stderr %q", c.code, res.ExitCode, res.Error, c.want, res.Stderr)
		}
	}
	res := run(t, d, &api.RunRequest{Code: "raise ValueError('boom')"})
	if !strings.Contains(res.Stderr, "Traceback") || !strings.Contains(res.Stderr, "ValueError: boom") {
		t.Errorf("traceback missing from stderr: %q", res.Stderr)
	}
}

func TestStdoutStderrSeparate(t *testing.T) {
	d := daemon(t)
	res := runOK(t, d, &api.RunRequest{Code: `
import sys
for i in range(3):
    print("out", i)
    print("err", i, file=sys.stderr)
`})
	if res.Stdout != "out 0\nout 1\nout 2\n" {
		t.Errorf("stdout %q", res.Stdout)
	}
	if res.Stderr != "err 0\nerr 1\nerr 2\n" {
		t.Errorf("stderr %q", res.Stderr)
	}
}

func TestNonUTF8Output(t *testing.T) {
	d := daemon(t)
	res := runOK(t, d, &api.RunRequest{Code: `
import sys
sys.stdout.buffer.write(b"ok \xff\xfe end\n")
sys.stderr.buffer.write(b"\xc3")
print("héllo ✓ 日本")
`})
	if !strings.HasPrefix(res.Stdout, "ok \uFFFD\uFFFD end\n") || !strings.Contains(res.Stdout, "héllo ✓ 日本") {
		t.Errorf("stdout %q", res.Stdout)
	}
	if res.Stderr != "\uFFFD" {
		t.Errorf("stderr %q", res.Stderr)
	}
}

func TestArgsStdinEnvFilename(t *testing.T) {
	d := daemon(t)
	res := runOK(t, d, &api.RunRequest{
		Code:     "import sys, os; print(sys.argv); print(sys.stdin.read()); print(os.environ['GREETING']); print(__file__)",
		Args:     []string{"a b", "c"},
		Stdin:    "from stdin",
		Env:      map[string]string{"GREETING": "hi"},
		Filename: "tool.py",
	})
	want := "['/work/tool.py', 'a b', 'c']\nfrom stdin\nhi\n/work/tool.py\n"
	if res.Stdout != want {
		t.Errorf("stdout %q, want %q", res.Stdout, want)
	}
}

func TestEnvironmentIsClean(t *testing.T) {
	d := daemon(t)
	res := runOK(t, d, &api.RunRequest{Code: "import os, json; print(json.dumps(dict(os.environ)))", CPUs: 1})
	var env map[string]string
	mustJSON(t, res.Stdout, &env)
	for _, k := range []string{"PATH", "HOME", "LANG", "OMP_NUM_THREADS"} {
		if env[k] == "" {
			t.Errorf("%s is not set in the jail: %v", k, env)
		}
	}
	if env["OMP_NUM_THREADS"] != "1" {
		t.Errorf("OMP_NUM_THREADS=%q for 1 CPU", env["OMP_NUM_THREADS"])
	}
	for k := range env {
		if strings.HasPrefix(k, "_LIBCONTAINER") || strings.HasPrefix(k, "CELLBLOCK") || k == "SUDO_USER" || k == "GOFLAGS" || k == "INVOCATION_ID" {
			t.Errorf("host variable %s leaked into the jail", k)
		}
	}
}

func TestNoInheritedDescriptors(t *testing.T) {
	d := daemon(t)
	res := runOK(t, d, &api.RunRequest{Code: `
import fcntl, os, subprocess, sys
fds = sorted(int(f) for f in os.listdir("/proc/self/fd"))
print(fds[:4])
extra = fds[4:]
print(len(extra), all(fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC for fd in extra), all(fd > 900 for fd in extra))
print(os.readlink("/proc/self/fd/0"))
child = 'import os; print(sorted(int(f) for f in os.listdir("/proc/self/fd")))'
print(subprocess.run([sys.executable, "-c", child], capture_output=True, text=True).stdout.strip())
`})
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	// 0, 1, 2 and the descriptor listdir itself holds open: the first
	// file the program opens is 3, as under plain python.
	if lines[0] != "[0, 1, 2, 3]" {
		t.Errorf("descriptors in the jail: %s", lines[0])
	}
	// Besides, only the runner's channel, out of the way and closed on
	// exec (the program may write to it: what comes out is untrusted).
	if lines[1] != "1 True True" {
		t.Errorf("extra descriptors (count, all close-on-exec, all high): %s", lines[1])
	}
	if lines[2] != "/dev/null" {
		t.Errorf("stdin is %s, want /dev/null", lines[2])
	}
	if lines[3] != "[0, 1, 2, 3]" {
		t.Errorf("descriptors of a program it starts: %s", lines[3])
	}
}
