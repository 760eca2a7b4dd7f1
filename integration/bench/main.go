// Command bench measures `cellblock run -c 'print(1)'` end to end against
// the same interpreter run bare, under bubblewrap and under `runc run`. It
// interleaves the runners so that they see the same machine, reports
// medians and ratios to bare, and breaks one cellblock run down by phase.
// Then it measures dependencies: the first run of a script with one
// dependency (which builds the environment), its cached runs, and the same
// program without dependencies (deps.go). Then throughput: runs per second
// of both programs with 1 to 8 callers at once, against bare interpreter
// starts, and the CPU time each run costs (throughput.go). Before the runs
// and after them it reports the memory the daemons and their waiting
// jails hold (footprint.go). Last, the latency the network proxy adds to
// an HTTPS request (network.go).
//
// It starts its own cellblockd on a private socket; run it as root through
// `make bench`.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/daemontest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type runner struct {
	name string
	cmd  func() *exec.Cmd
	// call, instead of cmd, is one API call from this process: a client
	// that keeps its process, as an agent framework does. It returns the
	// program's stdout.
	call func() (string, error)
	// times are wall-clock durations, one per iteration.
	times []time.Duration
}

// once carries out one iteration of r and returns its stdout.
func (r *runner) once() (string, error) {
	if r.call != nil {
		return r.call()
	}
	var out bytes.Buffer
	cmd := r.cmd()
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	return out.String(), err
}

func run() error {
	binDir := flag.String("bin", "bin", "directory of the built binaries")
	n := flag.Int("n", 40, "iterations per runner")
	tputRuns := flag.Int("throughput-runs", 60, "runs at each concurrency of the throughput bench (0: skip it)")
	stateDir := flag.String("state-dir", "/var/lib/cellblock-bench", "daemon state directory (kept between runs; its base name, [a-zA-Z0-9_-], names the cgroup subtrees)")
	only := flag.String("only", "", "measure only this part: network, or start (print(1) against bare and the phases)")
	flag.Parse()
	if os.Geteuid() != 0 {
		return fmt.Errorf("run as root (sudo make bench): the daemon and runc need it")
	}
	bins, err := filepath.Abs(*binDir)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "cellblock-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	wheels, err := benchWheelhouse(tmp)
	if err != nil {
		return err
	}
	// Two daemons: one as installed (jails prestarted), one that builds
	// every jail when its request arrives.
	// Each daemon's cgroup subtree is named after its state directory, so
	// that benchmarks with state directories of their own do not sweep
	// each other's jails.
	pre, err := startDaemon(bins, tmp, "prestart", *stateDir, filepath.Base(*stateDir), "--no-index", "--find-links", wheels)
	if err != nil {
		return err
	}
	defer pre.stop()
	fresh, err := startDaemon(bins, tmp, "fresh", *stateDir+"-fresh", filepath.Base(*stateDir)+"-fresh", "--prestart", "0", "--no-index", "--find-links", wheels)
	if err != nil {
		return err
	}
	defer fresh.stop()
	c := pre.Client
	info, err := c.Info(context.Background())
	if err != nil {
		return err
	}
	rootfsDir, pythonInRootfs, hostPython, err := defaultRootfs(*stateDir)
	if err != nil {
		return err
	}
	fmt.Printf("machine: %d CPUs, kernel %s, cgroup mode %s, user namespace %v\n", numCPU(), kernel(), info.CgroupMode, info.UserNamespace)
	fmt.Printf("interpreter: %s (Python %s), rootfs %s\n\n", hostPython, info.Pythons[0].Version, rootfsDir)
	if *only == "network" {
		return networkBench(bins, tmp, *stateDir, rootfsDir, pythonInRootfs, *n)
	}
	if err := footprint(fresh, "idle, no jails"); err != nil {
		return err
	}
	if err := footprint(pre, "idle, its prestarted jails waiting"); err != nil {
		return err
	}
	fmt.Println()

	code := "print(1)"
	runners := []*runner{
		// The same binary and standard library the jail runs, started
		// straight from the rootfs on the host: no isolation at all.
		{name: "bare", cmd: func() *exec.Cmd {
			return exec.Command(filepath.Join(rootfsDir, pythonInRootfs), "-c", code)
		}},
		// For context: the host's own interpreter, with whatever its
		// site-packages add to start-up.
		{name: "host python3 (its site-packages)", cmd: func() *exec.Cmd { return exec.Command(hostPython, "-c", code) }},
	}
	if bwrap, err := exec.LookPath("bwrap"); err == nil {
		runners = append(runners, &runner{name: "bubblewrap", cmd: func() *exec.Cmd {
			return exec.Command(bwrap, "--ro-bind", rootfsDir, "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
				"--unshare-all", "--die-with-parent", "--new-session", "--clearenv", "--setenv", "PATH", "/usr/bin",
				pythonInRootfs, "-c", code)
		}})
	} else {
		fmt.Println("bubblewrap: not installed (apt-get install bubblewrap), skipped")
	}
	if runcBin, err := exec.LookPath("runc"); err == nil {
		bundle := filepath.Join(tmp, "bundle")
		if err := makeBundle(runcBin, bundle, rootfsDir, pythonInRootfs, code); err != nil {
			return fmt.Errorf("runc bundle: %w", err)
		}
		i := 0
		runners = append(runners, &runner{name: "runc", cmd: func() *exec.Cmd {
			i++
			cmd := exec.Command(runcBin, "--root", filepath.Join(tmp, "runc-state"), "run", "--bundle", bundle, fmt.Sprintf("bench-%d-%d", os.Getpid(), i))
			return cmd
		}})
	} else {
		fmt.Println("runc: not installed (apt-get install runc), skipped")
	}
	runners = append(runners,
		&runner{name: "cellblock, fresh jail (--prestart 0)", cmd: func() *exec.Cmd {
			return exec.Command(filepath.Join(bins, "cellblock"), "--socket", fresh.Socket, "run", "-c", code)
		}},
		&runner{name: "cellblock, prestarted jail (default)", cmd: func() *exec.Cmd {
			return exec.Command(filepath.Join(bins, "cellblock"), "--socket", pre.Socket, "run", "-c", code)
		}},
		// The API round trip alone: this process's client over the socket,
		// one call after another, each in a prestarted jail whose Python
		// (with the runner) is already up.
		&runner{name: "API call, prestarted jail (Go client in this process)", call: func() (string, error) {
			res, err := c.Run(context.Background(), &api.RunRequest{Code: code})
			if err != nil {
				return "", err
			}
			if res.Error != nil || res.ExitCode != 0 {
				return "", fmt.Errorf("%+v %s", res.Error, res.Stderr)
			}
			return res.Stdout, nil
		}})

	// Warm up each runner, then interleave. Every measurement starts on a
	// quiet machine: the daemon refills its prestarted jails after a run,
	// and that work must not land in anybody's measurement.
	for _, r := range runners {
		if out, err := r.once(); err != nil || strings.TrimSpace(out) != "1" {
			return fmt.Errorf("%s does not work: %v: %s", r.name, err, out)
		}
	}
	for i := 0; i < *n; i++ {
		for _, r := range runners {
			if err := settleAll(pre, fresh); err != nil {
				return err
			}
			start := time.Now()
			if out, err := r.once(); err != nil {
				return fmt.Errorf("%s: %v: %s", r.name, err, out)
			}
			r.times = append(r.times, time.Since(start))
		}
	}
	bare := median(runners[0].times)
	fmt.Printf("print(1), %d interleaved runs each (wall clock, whole command):\n\n", *n)
	fmt.Println("| run | median | p90 | vs bare |")
	fmt.Println("|---|---|---|---|")
	for _, r := range runners {
		m := median(r.times)
		fmt.Printf("| %s | %s | %s | %.2f× |\n", r.name, ms(m), ms(percentile(r.times, 0.9)), float64(m)/float64(bare))
	}

	// Back to back: the same command with no pause, so that the daemon
	// builds each successor while the next run goes on.
	prestarted := runners[len(runners)-2]
	if err := pre.settle(); err != nil {
		return err
	}
	var b2b []time.Duration
	for i := 0; i < *n; i++ {
		start := time.Now()
		if out, err := prestarted.cmd().CombinedOutput(); err != nil {
			return fmt.Errorf("back to back: %v: %s", err, out)
		}
		b2b = append(b2b, time.Since(start))
	}
	fmt.Printf("\n%d `cellblock run` back to back, no pause (the daemon refills its prestarted jails meanwhile): median %s, p90 %s, %.2f× bare\n",
		*n, ms(median(b2b)), ms(percentile(b2b, 0.9)), float64(median(b2b))/float64(bare))

	// Phases, from the daemons' own accounting, over more runs.
	for _, d := range []*benchDaemon{fresh, pre} {
		if err := phaseTable(d, code, *n); err != nil {
			return err
		}
	}
	if *only == "start" {
		return nil
	}
	// Dependencies on the fresh-jail daemon, so that runs with and
	// without an environment are built the same way; then warm.
	if err := depsBench(fresh.Client, *n); err != nil {
		return err
	}
	if err := warmDepsBench(pre, *n); err != nil {
		return err
	}
	if *tputRuns > 0 {
		workloads, err := throughputWorkloads(tmp, rootfsDir, pythonInRootfs)
		if err != nil {
			return err
		}
		if err := throughputBench(pre, workloads, *tputRuns); err != nil {
			return err
		}
	}
	// The same again after every run above: what the daemons keep once
	// they served runs.
	fmt.Println()
	if err := footprint(fresh, "idle after the runs above"); err != nil {
		return err
	}
	if err := pre.settleShapes(1); err != nil {
		return err
	}
	if err := footprint(pre, "idle after the runs above, with a jail of the dependency's shape"); err != nil {
		return err
	}
	if err := sessionBench(pre, *n); err != nil {
		return err
	}
	return networkBench(bins, tmp, *stateDir, rootfsDir, pythonInRootfs, *n)
}

// phaseTable breaks n API calls on d down by the daemon's phases.
func phaseTable(d *benchDaemon, code string, n int) error {
	var phases []api.Phases
	var totals []time.Duration
	prestarted := 0
	for i := 0; i < n; i++ {
		if err := d.settle(); err != nil {
			return err
		}
		start := time.Now()
		res, err := d.Client.Run(context.Background(), &api.RunRequest{Code: code})
		total := time.Since(start)
		if err != nil || res.Error != nil || res.Phases == nil {
			return fmt.Errorf("phase run: %v %+v", err, res)
		}
		if res.Phases.Prestarted {
			prestarted++
		}
		phases = append(phases, *res.Phases)
		totals = append(totals, total)
	}
	pick := func(f func(api.Phases) int64) time.Duration {
		var d []time.Duration
		for _, p := range phases {
			d = append(d, time.Duration(f(p))*time.Microsecond)
		}
		return median(d)
	}
	create, start, prog, collect := pick(func(p api.Phases) int64 { return p.CreateUs }), pick(func(p api.Phases) int64 { return p.StartUs }),
		pick(func(p api.Phases) int64 { return p.ProgramUs }), pick(func(p api.Phases) int64 { return p.CollectUs })
	total := median(totals)
	request := total - create - start - prog - collect
	fmt.Printf("\nwhere a cellblock run's time goes, %s (medians of %d API calls, %d of them in prestarted jails, total %s):\n\n", d.name, n, prestarted, ms(total))
	fmt.Println("| phase | median | what |")
	fmt.Println("|---|---|---|")
	fmt.Printf("| request | %s | client, HTTP over the socket, decoding, queueing |\n", ms(request))
	fmt.Printf("| create | %s | cgroup made and limited, libcontainer container created |\n", ms(create))
	fmt.Printf("| start | %s | namespaces, mounts, pivot_root, seccomp, exec of the init; then the hand-over of the program |\n", ms(start))
	handover := pick(func(p api.Phases) int64 { return p.HandoverUs })
	fmt.Printf("| hand-over | %s | the program sent to the runner in the jail's Python (already up in a prestarted jail), until it starts the code |\n", ms(handover))
	fmt.Printf("| python | %s | the code runs (hand-over included), the interpreter exits |\n", ms(prog))
	fmt.Printf("| collect | %s | output drained, the cgroup's statistics read (cgroup and container are removed after the answer) |\n", ms(collect))
	return nil
}

// benchDaemon is a cellblockd the benchmark started.
type benchDaemon struct {
	*daemontest.Daemon
	name       string
	cgroupName string // --cgroup-name
}

// startTimeout bounds a daemon's start-up, which may build a rootfs.
const startTimeout = 2 * time.Minute

// startDaemon starts cellblockd with its own socket, state directory and
// cgroup name, and waits until it is ready and its prestarted jails are.
func startDaemon(bins, tmp, name, stateDir, cgroupName string, args ...string) (*benchDaemon, error) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	d, err := daemontest.Start(ctx, daemontest.Config{
		Binary:  filepath.Join(bins, "cellblockd"),
		Socket:  filepath.Join(tmp, name+".sock"),
		Args:    append([]string{"--state-dir", stateDir, "--cgroup-name", cgroupName}, args...),
		LogPath: filepath.Join(tmp, name+".log"),
	})
	if err != nil {
		return nil, fmt.Errorf("daemon %s: %w", name, err)
	}
	bd := &benchDaemon{Daemon: d, name: name, cgroupName: cgroupName}
	if err := bd.settle(); err != nil {
		bd.stop()
		return nil, err
	}
	return bd, nil
}

// stop stops the daemon, saying so if it did not stop cleanly.
func (d *benchDaemon) stop() {
	if err := d.Stop(time.Minute); err != nil {
		fmt.Fprintf(os.Stderr, "bench: daemon %s: %v\n", d.name, err)
	}
}

// busyJails lists the daemon's jail cgroups other than prestarted jails
// waiting for a run: runs in progress and jails whose teardown (after the
// answer) is not over. Directories below the daemon's --cgroup-name in any
// hierarchy (v1), or below its "runs" (v2).
func (d *benchDaemon) busyJails() []string {
	var busy []string
	for _, p := range daemontest.JailCgroups(func(subtree string) bool { return subtree == d.cgroupName }) {
		if name := filepath.Base(p); name != "runs" && name != "daemon" && !strings.HasPrefix(name, "pre-") {
			busy = append(busy, p)
		}
	}
	return busy
}

// settleAll settles each daemon in turn.
func settleAll(ds ...*benchDaemon) error {
	for _, d := range ds {
		if err := d.settle(); err != nil {
			return err
		}
	}
	return nil
}

// settle waits until every prestarted jail is ready again, and every jail
// of an ended run is torn down, so that neither a refill nor a teardown
// runs during a measurement.
func (d *benchDaemon) settle() error { return d.settleShapes(0) }

// settleShapes is settle that also waits until shapes jails of other
// shapes are ready.
func (d *benchDaemon) settleShapes(shapes int) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := d.Client.Info(context.Background())
		if err != nil {
			return err
		}
		if info.PrestartReady >= info.Prestart && info.PrestartShapesReady >= shapes && len(d.busyJails()) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("daemon %s: %d of %d prestarted jails ready after 30 s; jails not yet torn down: %v", d.name, info.PrestartReady, info.Prestart, d.busyJails())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// defaultRootfs reads the default rootfs's metadata from the store.
func defaultRootfs(stateDir string) (dir, python, source string, err error) {
	metas, _ := filepath.Glob(filepath.Join(stateDir, "rootfs", "*", "meta.json"))
	for _, m := range metas {
		var meta struct {
			Dir        string `json:"dir"`
			Executable string `json:"executable"`
			Source     string `json:"source"`
			Default    bool   `json:"default"`
		}
		b, err := os.ReadFile(m)
		if err != nil || json.Unmarshal(b, &meta) != nil {
			continue
		}
		root := filepath.Join(filepath.Dir(m), "root")
		if meta.Executable == "" || meta.Source == "" {
			continue
		}
		return root, meta.Executable, meta.Source, nil
	}
	return "", "", "", fmt.Errorf("no rootfs metadata under %s", stateDir)
}

// makeBundle writes an OCI bundle that runs code on the rootfs with
// settings close to cellblock's: read-only root, no network, tmpfs /tmp.
func makeBundle(runcBin, bundle, rootfs, python, code string) error {
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		return err
	}
	cmd := exec.Command(runcBin, "spec", "--bundle", bundle)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("runc spec: %v: %s", err, out)
	}
	path := filepath.Join(bundle, "config.json")
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var spec map[string]any
	if err := json.Unmarshal(b, &spec); err != nil {
		return err
	}
	spec["root"] = map[string]any{"path": rootfs, "readonly": true}
	proc := spec["process"].(map[string]any)
	proc["terminal"] = false
	proc["args"] = []string{python, "-c", code}
	proc["env"] = []string{"PATH=/usr/bin", "LANG=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1"}
	mounts := spec["mounts"].([]any)
	mounts = append(mounts, map[string]any{"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "nodev", "size=65536k"}})
	spec["mounts"] = mounts
	out, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}

func median(d []time.Duration) time.Duration { return percentile(d, 0.5) }

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(p*float64(len(s)-1)+0.5)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

func numCPU() int {
	b, _ := os.ReadFile("/proc/cpuinfo")
	return strings.Count(string(b), "processor\t:")
}

func kernel() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(b))
}
