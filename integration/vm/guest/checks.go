package guest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cellblock/cellblock/internal/api"
)

const mib = 1 << 20

// checkOOMScore: the daemon here runs with every capability, as root on a
// host does (the development and CI machines lack CAP_SYS_RESOURCE, where
// the root suite checks the same): no jail process can lower its own or
// pid 1's oom_score_adj, nor does a program it starts.
func checkOOMScore(ctx context.Context, d *daemonProc) (string, error) {
	capEff, err := statusField(d.Cmd.Process.Pid, "CapEff")
	if err != nil || len(capEff) == 0 {
		return "", fmt.Errorf("read the daemon's capabilities: %v", err)
	}
	// The host suite checks a daemon without CAP_SYS_RESOURCE; this one
	// is the case with it, where libcontainer's write sets a floor.
	const capSysResource = 24
	if caps, err := strconv.ParseUint(capEff[0], 16, 64); err != nil || caps&(1<<capSysResource) == 0 {
		return "", fmt.Errorf("the guest's daemon lacks CAP_SYS_RESOURCE (CapEff %s, %v): this check is for a daemon with it", capEff[0], err)
	}
	res, err := d.run(ctx, &api.RunRequest{Code: `
import subprocess, sys
def lower(path):
    try:
        with open(path, "w") as f:
            f.write("0")
        return "lowered"
    except OSError:
        return "refused"
print(open("/proc/self/oom_score_adj").read().strip(), lower("/proc/self/oom_score_adj"), lower("/proc/1/oom_score_adj"))
print(subprocess.run([sys.executable, "-c", "print(open('/proc/self/oom_score_adj').read().strip())"], capture_output=True, text=True).stdout.strip())
`, TimeoutMs: 60_000}, nil)
	if err != nil {
		return "", err
	}
	if want := "1000 refused refused\n1000\n"; res.Stdout != want || res.ExitCode != 0 {
		return "", fmt.Errorf("stdout %q exit %d stderr %q; want %q", res.Stdout, res.ExitCode, lastLine(res.Stderr), want)
	}
	return "oom_score_adj stays 1000 in the program, pid 1 and a child (daemon CapEff " + capEff[0] + ")", nil
}

// checkMemory: a program that touches 1 GiB under a 128 MiB limit is killed
// by the cgroup's OOM killer, the result says so, and the peak stayed at
// the limit. The VM has more than 1 GiB free, so only the limit can stop
// the allocation.
func checkMemory(ctx context.Context, d *daemonProc) (string, error) {
	const limit = 128 * mib
	res, err := d.run(ctx, &api.RunRequest{
		Code: `chunks = []
for _ in range(64):
    chunks.append(b"x" * (16 << 20))  # written, so really charged
print("allocated", 16 * len(chunks), "MiB")
`,
		MemoryBytes: limit, Pids: 16, CPUs: 1, TimeoutMs: 60_000,
	}, nil)
	if err != nil {
		return "", err
	}
	got := fmt.Sprintf("exit_code %d, oom_killed %v, memory_peak_bytes %d (%.1f MiB), duration_ms %d",
		res.ExitCode, res.OOMKilled, res.MemoryPeakBytes, float64(res.MemoryPeakBytes)/mib, res.DurationMs)
	switch {
	case !res.OOMKilled || res.ExitCode != 137:
		return "", fmt.Errorf("want oom_killed and exit 137; got %s; stdout %q stderr %q", got, res.Stdout, lastLine(res.Stderr))
	case res.MemoryPeakBytes > limit+limit/20 || res.MemoryPeakBytes < limit/2:
		return "", fmt.Errorf("memory peak not at the %d MiB limit: %s", limit/mib, got)
	}
	return "1 GiB under memory_bytes=128 MiB: " + got, nil
}

// checkPids: a fork bomb under a limit of 32 tasks gets EAGAIN at its 32nd
// task (the jail's init and its threads come on top of the limit).
func checkPids(ctx context.Context, d *daemonProc) (string, error) {
	res, err := d.run(ctx, &api.RunRequest{
		Code: `import os, time
n, err = 0, None
try:
    while n < 200:
        if os.fork() == 0:
            time.sleep(120)
            os._exit(0)
        n += 1
except OSError as e:
    err = e.errno
print(n, err)
`,
		MemoryBytes: 512 * mib, Pids: 32, CPUs: 1, TimeoutMs: 60_000,
	}, nil)
	if err != nil {
		return "", err
	}
	var forks, errno int
	if _, err := fmt.Sscan(res.Stdout, &forks, &errno); err != nil || res.ExitCode != 0 {
		return "", fmt.Errorf("exit_code %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, lastLine(res.Stderr))
	}
	got := fmt.Sprintf("%d forks succeeded, then errno %d; duration_ms %d", forks, errno, res.DurationMs)
	// The limit is the program's: Python and 31 children, and one more
	// when the jail's init leaves its room for a late thread free.
	if forks > 32 || forks < 31 || errno != 11 { // EAGAIN
		return "", fmt.Errorf("want 31 forks (32 at most) and then EAGAIN (11): %s", got)
	}
	return "fork bomb under pids=32: " + got, nil
}

// checkCPU: two processes spinning for 3 s under cpus=0.5 get about half a
// CPU between them: the kernel throttles the run's cgroup, and its CPU
// time stays near half the wall time (unthrottled it would be near twice).
func checkCPU(ctx context.Context, d *daemonProc) (string, error) {
	var (
		once    sync.Once
		sampled = make(chan struct{})
		cpuMax  string
		stat    struct{ periods, throttled int64 }
		sErr    error
	)
	onOutput := stdoutLines(func(line string) {
		if line != "spinning" {
			return
		}
		once.Do(func() {
			go func() {
				defer close(sampled)
				time.Sleep(1500 * time.Millisecond)
				dir, err := runDir()
				if err != nil {
					sErr = err
					return
				}
				cpuMax, sErr = readTrim(filepath.Join(dir, "cpu.max"))
				if sErr == nil {
					stat.throttled, sErr = keyedValue(filepath.Join(dir, "cpu.stat"), "nr_throttled")
				}
				if sErr == nil {
					stat.periods, sErr = keyedValue(filepath.Join(dir, "cpu.stat"), "nr_periods")
				}
			}()
		})
	})
	res, err := d.run(ctx, &api.RunRequest{
		Code: `import os, time
def spin(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
print("spinning", flush=True)
child = os.fork()
spin(3)
if child == 0:
    os._exit(0)
os.waitpid(child, 0)
`,
		MemoryBytes: 256 * mib, Pids: 16, CPUs: 0.5, TimeoutMs: 60_000,
	}, onOutput)
	if err != nil {
		return "", err
	}
	select {
	case <-sampled:
	case <-time.After(10 * time.Second):
		return "", errors.New("the run's cpu.stat was never sampled")
	}
	if sErr != nil {
		return "", fmt.Errorf("sample the run's cgroup: %w", sErr)
	}
	if res.ExitCode != 0 {
		return "", fmt.Errorf("exit_code %d, stderr %q", res.ExitCode, lastLine(res.Stderr))
	}
	// CPU time counts from the hand-over, so the init's fork and exec of
	// Python (in the start phase of a prestarted jail) count too.
	var startMs int64
	if res.Phases != nil {
		startMs = res.Phases.StartUs / 1000
	}
	wall := res.DurationMs + startMs
	ratio := float64(res.CPUMs) / float64(wall)
	got := fmt.Sprintf("cpu.max %q; mid-run nr_throttled %d of nr_periods %d; cpu_ms %d over %d ms (program %d + start %d) = %.2f CPUs",
		cpuMax, stat.throttled, stat.periods, res.CPUMs, wall, res.DurationMs, startMs, ratio)
	switch {
	case cpuMax != "50000 100000":
		return "", fmt.Errorf("cpu.max is not 0.5 CPU: %s", got)
	case stat.throttled == 0:
		return "", fmt.Errorf("the run was never throttled: %s", got)
	case res.DurationMs < 3000:
		return "", fmt.Errorf("the program did not spin for 3 s: %s", got)
	// 0.5 CPU, plus slack for a period's burst and for TCG's clocks.
	case float64(res.CPUMs) > 0.5*1.15*float64(wall)+150:
		return "", fmt.Errorf("over the quota: %s", got)
	case float64(res.CPUMs) < 0.25*float64(wall):
		return "", fmt.Errorf("far below the quota, so the spin proves nothing: %s", got)
	}
	return "2 spinning processes under cpus=0.5: " + got, nil
}

// checkStats: a run that touches 64 MiB and spins for half a second
// reports a memory peak and CPU time that match.
func checkStats(ctx context.Context, d *daemonProc) (string, error) {
	res, err := d.run(ctx, &api.RunRequest{
		Code: `import time
data = b"x" * (64 << 20)
end = time.monotonic() + 0.5
while time.monotonic() < end:
    pass
print(len(data))
`,
		MemoryBytes: 256 * mib, Pids: 16, CPUs: 1, TimeoutMs: 60_000,
	}, nil)
	if err != nil {
		return "", err
	}
	var startMs int64
	if res.Phases != nil {
		startMs = res.Phases.StartUs / 1000
	}
	got := fmt.Sprintf("memory_peak_bytes %d (%.1f MiB), cpu_ms %d, duration_ms %d, start_ms %d, oom_killed %v",
		res.MemoryPeakBytes, float64(res.MemoryPeakBytes)/mib, res.CPUMs, res.DurationMs, startMs, res.OOMKilled)
	switch {
	case res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != strconv.Itoa(64*mib):
		return "", fmt.Errorf("exit_code %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, lastLine(res.Stderr))
	case res.OOMKilled:
		return "", fmt.Errorf("oom_killed without pressure: %s", got)
	case res.MemoryPeakBytes < 64*mib || res.MemoryPeakBytes >= 256*mib:
		return "", fmt.Errorf("memory peak outside [64 MiB, 256 MiB): %s", got)
	case res.CPUMs < 400:
		return "", fmt.Errorf("CPU time below the 0.5 s spin: %s", got)
	// One CPU at most over the program and its hand-over, plus slack
	// for a period's burst and for TCG's clocks.
	case float64(res.CPUMs) > 1.15*float64(res.DurationMs+startMs)+200:
		return "", fmt.Errorf("CPU time above the wall time under cpus=1: %s", got)
	}
	return "64 MiB touched and a 0.5 s spin: " + got, nil
}

// checkKillDetached: a grandchild that left the program's session (fork,
// setsid, fork) is seen in the run's cgroup while the run lives, and is
// gone when the run's timeout has killed the cgroup.
func checkKillDetached(ctx context.Context, d *daemonProc) (string, error) {
	var (
		mu      sync.Mutex
		orphan  *hostProc
		seenErr error
		seen    bool
	)
	onOutput := stdoutLines(func(line string) {
		mu.Lock()
		defer mu.Unlock()
		var jailPid, sid, mainSid int
		if _, err := fmt.Sscanf(line, "orphan %d %d %d", &jailPid, &sid, &mainSid); err != nil || seen {
			return
		}
		seen = true
		if sid == mainSid {
			seenErr = fmt.Errorf("the grandchild (pid %d in the jail) is still in the program's session %d", jailPid, sid)
			return
		}
		orphan, seenErr = findByJailPid(jailPid)
	})
	res, err := d.run(ctx, &api.RunRequest{
		Code: `import os, time
main = os.getpid()
child = os.fork()
if child == 0:
    os.setsid()
    if os.fork() == 0:
        print("orphan", os.getpid(), os.getsid(0), os.getsid(main), flush=True)
        while True:
            time.sleep(1)
    os._exit(0)
os.waitpid(child, 0)
time.sleep(600)
`,
		MemoryBytes: 256 * mib, Pids: 16, CPUs: 1, TimeoutMs: 6000,
	}, onOutput)
	if err != nil {
		return "", err
	}
	end := time.Now()
	mu.Lock()
	defer mu.Unlock()
	switch {
	case !res.TimedOut:
		return "", fmt.Errorf("the run did not time out: exit_code %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, lastLine(res.Stderr))
	case !seen:
		return "", fmt.Errorf("the grandchild never reported; stdout %q, stderr %q", res.Stdout, lastLine(res.Stderr))
	case seenErr != nil:
		return "", seenErr
	}
	// The daemon answers once the cgroup is empty; allow a moment for
	// the pid to be released anyway, and say how long it took.
	for {
		st, err := procStartTime(orphan.hostPid)
		if err != nil || st != orphan.startTime {
			break
		}
		if time.Since(end) > 2*time.Second {
			return "", fmt.Errorf("the grandchild (host pid %d) is still alive after the run", orphan.hostPid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Sprintf("setsid'd grandchild (host pid %d) seen in the run's cgroup, gone %v after the result; timed_out %v, exit_code %d, duration_ms %d",
		orphan.hostPid, time.Since(end).Round(time.Millisecond), res.TimedOut, res.ExitCode, res.DurationMs), nil
}

// hostProc names one process on the guest: its pid and start time.
type hostProc struct {
	hostPid   int
	startTime string
}

// findByJailPid finds the process of the run in flight whose pid in the
// jail's pid namespace is jailPid.
func findByJailPid(jailPid int) (*hostProc, error) {
	dir, err := runDir()
	if err != nil {
		return nil, err
	}
	pids, err := cgroupProcs(dir)
	if err != nil {
		return nil, err
	}
	for _, pid := range pids {
		nspids, err := statusField(pid, "NSpid")
		if err != nil || len(nspids) < 2 || nspids[len(nspids)-1] != strconv.Itoa(jailPid) {
			continue
		}
		st, err := procStartTime(pid)
		if err != nil {
			return nil, err
		}
		return &hostProc{hostPid: pid, startTime: st}, nil
	}
	return nil, fmt.Errorf("no process with jail pid %d in the run's cgroup %s (members %v)", jailPid, dir, pids)
}

// checkCleanup: after the runs, no run cgroup, jail process or jail state
// is left besides the prestarted jails waiting for the next run; the daemon
// exits 0 on SIGTERM, taking those with it, and leaves only its own, empty,
// cgroups, which can then be removed.
func checkCleanup(ctx context.Context, d *daemonProc) (string, error) {
	var problems []string
	ready, err := d.prestarted(ctx)
	if err != nil {
		problems = append(problems, err.Error())
	}
	// A jail counts as ready once libcontainer has started its init,
	// which may still be on its way to exec cellblock-init (seconds under
	// TCG): give the ready jails time to settle into idle inits.
	settle := time.Now().Add(30 * time.Second)
	for idleJails() < ready && time.Now().Before(settle) {
		time.Sleep(50 * time.Millisecond)
	}
	idle, idleProcs := 0, 0
	if entries, err := os.ReadDir(runsCgroup); err != nil {
		problems = append(problems, err.Error())
	} else {
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			if n := idleJailProcs(filepath.Join(runsCgroup, e.Name())); n > 0 {
				idle++
				idleProcs += n
				continue
			}
			problems = append(problems, "run cgroup left: "+e.Name())
		}
	}
	if jp := jailProcesses(); len(jp) != idleProcs {
		problems = append(problems, fmt.Sprintf("jail processes left: %v (%d idle prestarted jails, %d processes)", jp, idle, idleProcs))
	}
	if entries, err := os.ReadDir(filepath.Join(daemonState, "jails")); err == nil && len(entries) != idle {
		problems = append(problems, fmt.Sprintf("jail state left: %d entries (%d idle prestarted jails)", len(entries), idle))
	}
	if idle == 0 {
		problems = append(problems, "no idle prestarted jail while the daemon runs")
	}

	t0 := time.Now()
	if err := d.stop(60 * time.Second); err != nil {
		problems = append(problems, fmt.Sprintf("SIGTERM: %v; log: %s", err, d.logTail()))
	}
	stopped := time.Since(t0)
	if _, err := os.Stat(runsCgroup); !errors.Is(err, os.ErrNotExist) {
		problems = append(problems, fmt.Sprintf("%s still exists after the daemon exited (%v)", runsCgroup, err))
	}
	if pids, err := cgroupProcs(serviceCgroup); err != nil || len(pids) > 0 {
		problems = append(problems, fmt.Sprintf("processes left in %s: %v %v", serviceCgroup, pids, err))
	}
	if jp := jailProcesses(); len(jp) > 0 {
		problems = append(problems, fmt.Sprintf("jail processes left after the daemon exited: %v", jp))
	}
	if len(problems) == 0 {
		if err := removeCgroupTree(serviceCgroup); err != nil {
			problems = append(problems, "the daemon's cgroup is not empty: "+err.Error())
		}
	}
	if len(problems) > 0 {
		return "", errors.New(strings.Join(problems, "; "))
	}
	return fmt.Sprintf("no run cgroup, jail process or jail state left besides %d idle prestarted jails; SIGTERM: exit 0 in %v, prestarted jails gone; %s removed empty",
		idle, stopped.Round(time.Millisecond), strings.TrimPrefix(serviceCgroup, cgroupRoot)), nil
}

// jailProcesses lists processes running as a jail uid: the user namespace
// range (host uids from 1e9) or nobody, the uid without one.
func jailProcesses() []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		uids, err := statusField(pid, "Uid")
		if err != nil || len(uids) == 0 {
			continue
		}
		uid, _ := strconv.ParseInt(uids[0], 10, 64)
		if uid >= 1_000_000_000 || uid == 65534 {
			out = append(out, fmt.Sprintf("%d(uid %d)", pid, uid))
		}
	}
	return out
}

// statusField returns the fields of one line of /proc/<pid>/status.
func statusField(pid int, key string) ([]string, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key+":"); ok {
			return strings.Fields(v), nil
		}
	}
	return nil, fmt.Errorf("/proc/%d/status has no %s", pid, key)
}

// procStartTime is field 22 of /proc/<pid>/stat: with the pid, it names one
// process even if the pid is reused.
func procStartTime(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", fmt.Errorf("parse /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return "", fmt.Errorf("parse /proc/%d/stat", pid)
	}
	return f[19], nil
}

// stdoutLines turns the stream of output chunks (which split lines
// anywhere) into calls of fn with each complete line of stdout.
func stdoutLines(fn func(line string)) func(stream, data string) {
	var pending strings.Builder
	return func(stream, data string) {
		if stream != "stdout" {
			return
		}
		pending.WriteString(data)
		buf := pending.String()
		for {
			i := strings.IndexByte(buf, '\n')
			if i < 0 {
				break
			}
			fn(buf[:i])
			buf = buf[i+1:]
		}
		pending.Reset()
		pending.WriteString(buf)
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
