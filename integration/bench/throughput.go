package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cellblock/cellblock/internal/api"
)

// concurrencies are the numbers of callers the throughput bench runs at.
var concurrencies = []int{1, 2, 4, 8}

// workload is one program the throughput bench runs, through the API and
// bare.
type workload struct {
	name string
	req  *api.RunRequest
	// want is the program's stdout.
	want string
	// bare starts the same program on the rootfs's interpreter, without
	// any isolation.
	bare func() *exec.Cmd
}

// throughputWorkloads are print(1), and a PEP 723 script that imports the
// wheelhouse's cbbench from its cached environment (bare: from a
// directory on PYTHONPATH holding the same package).
func throughputWorkloads(tmp, rootfsDir, pythonInRootfs string) ([]workload, error) {
	site := filepath.Join(tmp, "bare-site")
	if err := os.MkdirAll(filepath.Join(site, "cbbench"), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(site, "cbbench", "__init__.py"), []byte(cbbenchInit), 0o644); err != nil {
		return nil, err
	}
	python := filepath.Join(rootfsDir, pythonInRootfs)
	return []workload{
		{name: "print(1)", req: &api.RunRequest{Code: "print(1)"}, want: "1",
			bare: func() *exec.Cmd { return exec.Command(python, "-c", "print(1)") }},
		{name: "import of a cached dependency", req: &api.RunRequest{Code: depsScript}, want: "42",
			bare: func() *exec.Cmd {
				cmd := exec.Command(python, "-c", depsBody)
				cmd.Env = append(os.Environ(), "PYTHONPATH="+site)
				return cmd
			}},
	}, nil
}

// level is what one run of count calls at a concurrency measured.
type level struct {
	wall       time.Duration
	latencies  []time.Duration
	prestarted int64
	queued     []time.Duration // the daemon's queue time of each run
}

func (l *level) rate() float64 { return float64(len(l.latencies)) / l.wall.Seconds() }

// drive makes count calls of once from conc goroutines, each calling
// sequentially, and times them.
func drive(conc, count int, once func() (prestarted bool, queued time.Duration, err error)) (*level, error) {
	var next atomic.Int64
	var mu sync.Mutex
	l := &level{}
	errs := make(chan error, conc)
	start := time.Now()
	var wg sync.WaitGroup
	for g := 0; g < conc; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(count) {
				t := time.Now()
				pre, q, err := once()
				took := time.Since(t)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				l.latencies = append(l.latencies, took)
				l.queued = append(l.queued, q)
				if pre {
					l.prestarted++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	l.wall = time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	return l, nil
}

// cpuTimes are the CPU times the bench reads around a measurement.
type cpuTimes struct {
	daemon   time.Duration // the daemon process's own (utime+stime)
	children time.Duration // its children it reaped: jails' inits with their programs, libcontainer's init stages
	jails    time.Duration // the daemon's cgroup subtree of jails (usage, hierarchical)
	bare     time.Duration // this process's reaped children (the bare runs)
	jailsOK  bool
}

func (a cpuTimes) sub(b cpuTimes) cpuTimes {
	return cpuTimes{daemon: a.daemon - b.daemon, children: a.children - b.children, jails: a.jails - b.jails,
		bare: a.bare - b.bare, jailsOK: a.jailsOK && b.jailsOK}
}

// readCPU reads d's CPU times, and this process's children's.
func readCPU(d *benchDaemon) (cpuTimes, error) {
	var t cpuTimes
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", d.Cmd.Process.Pid))
	if err != nil {
		return t, err
	}
	// utime, stime, cutime, cstime are fields 14 to 17; the command in
	// parentheses may hold spaces.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ticks := make([]int64, 4)
	for i := range ticks {
		if ticks[i], err = strconv.ParseInt(f[11+i], 10, 64); err != nil {
			return t, fmt.Errorf("/proc/%d/stat: %w", d.Cmd.Process.Pid, err)
		}
	}
	const hz = 100 // USER_HZ, fixed for /proc on Linux
	tick := time.Second / hz
	t.daemon = time.Duration(ticks[0]+ticks[1]) * tick
	t.children = time.Duration(ticks[2]+ticks[3]) * tick
	if usage, err := jailsCPU(d); err == nil {
		t.jails, t.jailsOK = usage, true
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		return t, err
	}
	t.bare = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return t, nil
}

// jailsCPU reads the CPU usage of d's subtree of jail cgroups: on cgroup
// v1 cpuacct.usage of <daemon's cgroup>/<cgroup name>, on v2 usage_usec of
// <own>/runs (the daemon itself lives in <own>/daemon).
func jailsCPU(d *benchDaemon) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", d.Cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	var v1, v2 string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2 = parts[2]
		} else if strings.Contains(","+parts[1]+",", ",cpuacct,") {
			v1 = parts[2]
		}
	}
	v1Mount, v2Mount, err := cgroupMounts()
	if err != nil {
		return 0, err
	}
	if v1 != "" && v1Mount != "" {
		s, err := os.ReadFile(filepath.Join(v1Mount, v1, d.cgroupName, "cpuacct.usage"))
		if err != nil {
			return 0, err
		}
		ns, err := strconv.ParseInt(strings.TrimSpace(string(s)), 10, 64)
		return time.Duration(ns), err
	}
	if v2 == "" || v2Mount == "" || filepath.Base(v2) != "daemon" {
		return 0, fmt.Errorf("no cgroup of jails found")
	}
	f, err := os.Open(filepath.Join(v2Mount, filepath.Dir(v2), "runs", "cpu.stat"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "usage_usec "); ok {
			us, err := strconv.ParseInt(rest, 10, 64)
			return time.Duration(us) * time.Microsecond, err
		}
	}
	return 0, fmt.Errorf("no usage_usec in cpu.stat")
}

// cgroupMounts finds the cgroup v1 hierarchy with cpuacct and the cgroup
// v2 hierarchy, either "" when not mounted.
func cgroupMounts() (v1, v2 string, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		pre, post, ok := strings.Cut(s.Text(), " - ")
		fields, opts := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(opts) < 3 {
			continue
		}
		switch {
		case opts[0] == "cgroup" && strings.Contains(","+opts[2]+",", ",cpuacct,"):
			v1 = fields[4]
		case opts[0] == "cgroup2":
			v2 = fields[4]
		}
	}
	return v1, v2, s.Err()
}

// throughputBench runs each workload count times at every concurrency
// through d's API (the bench's Go client, one goroutine per caller, each
// calling sequentially) and bare, and prints runs per second, the
// latencies of the calls, and the CPU time each run cost the daemon and
// its jails. Every measurement starts with d's prestarted jails all ready,
// and the CPU time is read until they are again, so that a run's share
// of building its successor is counted.
func throughputBench(d *benchDaemon, workloads []workload, count int) error {
	ctx := context.Background()
	info, err := d.Client.Info(ctx)
	if err != nil {
		return err
	}
	// The first run of the script builds its environment (if the bench
	// did not) and starts a pool for its shape.
	for _, w := range workloads {
		if _, err := d.Client.Run(ctx, w.req); err != nil {
			return err
		}
	}
	for _, w := range workloads {
		fmt.Printf("\nthroughput, %s: %d runs at each concurrency, each caller calling one after another (API calls with the bench's Go client, the daemon as installed: %d prestarted jails, %d runs at once, more queue; bare: the rootfs's interpreter):\n\n",
			w.name, count, info.Prestart, info.MaxConcurrent)
		fmt.Println("| callers | bare runs/s | cellblock runs/s | vs bare | cellblock p50 | p90 | prestarted | queued p50 |")
		fmt.Println("|---|---|---|---|---|---|---|---|")
		var cpus []string
		for _, conc := range concurrencies {
			if err := d.settleShapes(1); err != nil {
				return err
			}
			before, err := readCPU(d)
			if err != nil {
				return err
			}
			bare, err := drive(conc, count, func() (bool, time.Duration, error) {
				out, err := w.bare().CombinedOutput()
				if err == nil && strings.TrimSpace(string(out)) != w.want {
					err = fmt.Errorf("bare %s printed %q", w.name, out)
				}
				return false, 0, err
			})
			if err != nil {
				return err
			}
			if err := d.settleShapes(1); err != nil {
				return err
			}
			mid, err := readCPU(d)
			if err != nil {
				return err
			}
			cb, err := drive(conc, count, func() (bool, time.Duration, error) {
				res, err := d.Client.Run(ctx, w.req)
				if err == nil && (res.Error != nil || res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != w.want) {
					err = fmt.Errorf("%s failed: %+v", w.name, res)
				}
				if err != nil {
					return false, 0, err
				}
				return res.Phases.Prestarted, time.Duration(res.Phases.QueueUs) * time.Microsecond, nil
			})
			if err != nil {
				return err
			}
			// Until the daemon has replaced the jails the runs used: their
			// builds are part of what a run costs.
			if err := d.settleShapes(1); err != nil {
				return err
			}
			after, err := readCPU(d)
			if err != nil {
				return err
			}
			fmt.Printf("| %d | %.1f | %.1f | %.2f× | %s | %s | %d of %d | %s |\n", conc, bare.rate(), cb.rate(), cb.rate()/bare.rate(),
				ms(median(cb.latencies)), ms(percentile(cb.latencies, 0.9)), cb.prestarted, count, ms(median(cb.queued)))
			bareCPU, cbCPU := mid.sub(before), after.sub(mid)
			per := func(t time.Duration) string { return ms(t / time.Duration(count)) }
			jails := "-"
			if cbCPU.jailsOK {
				jails = per(cbCPU.jails)
			}
			all := cbCPU.daemon + cbCPU.children
			cpus = append(cpus, fmt.Sprintf("| %d | %s | %s | %s | %s | %.2f× |", conc, per(bareCPU.bare), per(all), per(cbCPU.daemon), jails,
				float64(all)/float64(max(bareCPU.bare, 1))))
		}
		// A jail's processes are counted when the daemon reaps them: in
		// the steady state as many jails wait at the end as at the start.
		fmt.Printf("\nCPU time per run, %s (cellblock's counted until its prestarted jails were all ready again):\n\n", w.name)
		fmt.Println("| callers | bare | cellblock in all (cellblockd and every process it started) | of it cellblockd itself | of it in the jails' cgroups | vs bare |")
		fmt.Println("|---|---|---|---|---|---|")
		for _, l := range cpus {
			fmt.Println(l)
		}
	}
	return nil
}
