package integration

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
)

// forkBombCode forks sleeping children until the pids limit stops it and
// prints "fork failed after N children: ...".
const forkBombCode = `
import os, time
n = 0
while True:
    try:
        pid = os.fork()
    except OSError as e:
        print("fork failed after", n, "children:", e.strerror, flush=True)
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    n += 1
`

// fillTmpCode writes /tmp full, a MiB at a time, and prints "stopped at N
// MiB: ERRNO".
const fillTmpCode = `
import errno
written = 0
try:
    with open("/tmp/fill", "wb") as f:
        while True:
            f.write(b"x" * (1 << 20))
            f.flush()
            written += 1
except OSError as e:
    print("stopped at", written, "MiB:", errno.errorcode.get(e.errno))
`

func TestMemoryBomb(t *testing.T) {
	d := daemon(t)
	res := run(t, d, &api.RunRequest{Code: "x = bytearray(1 << 30)\nprint('survived')", MemoryBytes: 128 << 20})
	if !res.OOMKilled {
		t.Fatalf("1 GiB under 128 MiB: oom_killed is false; exit %d, peak %d\nstderr: %s", res.ExitCode, res.MemoryPeakBytes, res.Stderr)
	}
	if strings.Contains(res.Stdout, "survived") || res.ExitCode == 0 {
		t.Fatalf("the program survived: exit %d", res.ExitCode)
	}
	if res.MemoryPeakBytes > 130<<20 || res.MemoryPeakBytes < 64<<20 {
		t.Errorf("memory peak %d is not near the 128 MiB limit", res.MemoryPeakBytes)
	}
	// A child's allocation counts too.
	res = run(t, d, &api.RunRequest{Code: "import subprocess, sys\nsubprocess.run([sys.executable, '-c', 'x = bytearray(1 << 30)'])\nprint('parent done')", MemoryBytes: 128 << 20})
	if !res.OOMKilled {
		t.Errorf("a child's 1 GiB under 128 MiB: oom_killed is false; exit %d", res.ExitCode)
	}
}

func TestCPUSpinTimeout(t *testing.T) {
	d := daemon(t)
	start := time.Now()
	res := run(t, d, &api.RunRequest{Code: "while True: pass", TimeoutMs: 2000})
	elapsed := time.Since(start)
	if !res.TimedOut {
		t.Fatalf("timed_out is false: exit %d", res.ExitCode)
	}
	if res.ExitCode != 137 {
		t.Errorf("exit code %d after the timeout kill, want 137", res.ExitCode)
	}
	// The bound: back in under 3 s for a 2 s timeout.
	if elapsed > 3*time.Second {
		t.Errorf("a 2 s timeout came back after %v", elapsed)
	}
	if res.DurationMs < 1900 || res.DurationMs > 2900 {
		t.Errorf("duration %d ms for a 2 s timeout", res.DurationMs)
	}
	if res.CPUMs < 1000 {
		t.Errorf("cpu %d ms for 2 s of spinning", res.CPUMs)
	}
}

func TestTimeoutIgnoresSignalHandlers(t *testing.T) {
	d := daemon(t)
	res := run(t, d, &api.RunRequest{Code: `
import signal, time
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)
time.sleep(60)
`, TimeoutMs: 1000})
	if !res.TimedOut || res.DurationMs > 2500 {
		t.Fatalf("timed_out %v after %d ms", res.TimedOut, res.DurationMs)
	}
}

func TestForkBomb(t *testing.T) {
	d := daemon(t)
	res := run(t, d, &api.RunRequest{Code: forkBombCode, Pids: 32, TimeoutMs: 20000})
	if !strings.Contains(res.Stdout, "fork failed after") {
		t.Fatalf("fork bomb was not stopped: exit %d timed_out %v\nstdout %q\nstderr %q", res.ExitCode, res.TimedOut, res.Stdout, res.Stderr)
	}
	var n int
	fmt.Sscanf(res.Stdout[strings.Index(res.Stdout, "after")+6:], "%d", &n)
	// The limit is the program's own: Python and 31 children, and the
	// one task of room for a thread the jail's init may start late.
	if n != 31 && n != 32 {
		t.Errorf("%d children under a limit of 32 tasks, want 31 (32 when the init's room is free)", n)
	}
	// The sleeping children died with the run.
	if procs := runProcesses(); len(procs) > 0 {
		if !waitFor(5*time.Second, func() bool { return len(runProcesses()) == 0 }) {
			t.Errorf("processes outlived the run: %v", runProcesses())
		}
	}
}

func TestFillTmp(t *testing.T) {
	d := daemon(t)
	res := run(t, d, &api.RunRequest{Code: fillTmpCode, TmpBytes: 16 << 20, MemoryBytes: 256 << 20})
	if !strings.Contains(res.Stdout, "stopped at") {
		t.Fatalf("filling /tmp did not stop: exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	var mib int
	fmt.Sscanf(strings.TrimPrefix(res.Stdout, "stopped at "), "%d", &mib)
	if mib > 16 {
		t.Errorf("wrote %d MiB into a 16 MiB /tmp", mib)
	}
}

func TestHugeStdout(t *testing.T) {
	d := daemon(t)
	res := run(t, d, &api.RunRequest{Code: `
import sys
chunk = b"y" * (1 << 20)
for _ in range(300):
    sys.stdout.buffer.write(chunk)
sys.stdout.flush()
print("done", file=sys.stderr)
`, TimeoutMs: 60000})
	if res.Error != nil || res.ExitCode != 0 {
		t.Fatalf("exit %d error %+v stderr %q", res.ExitCode, res.Error, res.Stderr)
	}
	if !res.StdoutTruncated || res.StderrTruncated {
		t.Errorf("stdout_truncated %v stderr_truncated %v", res.StdoutTruncated, res.StderrTruncated)
	}
	if int64(len(res.Stdout)) != res.Limits.OutputBytes {
		t.Errorf("kept %d bytes of stdout, limit %d", len(res.Stdout), res.Limits.OutputBytes)
	}
	if res.Stderr != "done\n" {
		t.Errorf("stderr %q", res.Stderr)
	}
	if hwm := vmHWM(t, d.Cmd.Process.Pid); hwm > 200<<20 {
		t.Errorf("the daemon's peak RSS is %d MiB after 300 MiB of output", hwm>>20)
	} else {
		t.Logf("daemon peak RSS %d MiB", hwm>>20)
	}
}

// vmHWM is a process's peak resident set size in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			kb, _ := strconv.ParseInt(strings.Fields(l)[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

func TestDetachedGrandchildDies(t *testing.T) {
	requireRoot(t)
	marker := fmt.Sprintf("cellblock-orphan-%d", time.Now().UnixNano())
	d := daemon(t)
	res := runOK(t, d, &api.RunRequest{Code: fmt.Sprintf(`
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/usr/bin/python3", ["python3", "-c", "import time; time.sleep(120)", %q])
    os._exit(0)
time.sleep(0.3)
print("parent exits")
`, marker)})
	if !strings.Contains(res.Stdout, "parent exits") {
		t.Fatalf("stdout %q", res.Stdout)
	}
	if !waitFor(3*time.Second, func() bool { return !hostHasCmdline(marker) }) {
		t.Fatalf("a double-forked, setsid'd grandchild outlived its run")
	}
	// And under a timeout, where the program itself is still running.
	res = run(t, d, &api.RunRequest{Code: fmt.Sprintf(`
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/usr/bin/python3", ["python3", "-c", "import time; time.sleep(120)", %q])
    os._exit(0)
time.sleep(120)
`, marker), TimeoutMs: 1500})
	if !res.TimedOut {
		t.Fatalf("timed_out false")
	}
	if !waitFor(3*time.Second, func() bool { return !hostHasCmdline(marker) }) {
		t.Fatalf("a detached grandchild outlived its timed-out run")
	}
}

// hostHasCmdline reports whether any host process has s in its command line.
func hostHasCmdline(s string) bool {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), s) {
			return true
		}
	}
	return false
}
