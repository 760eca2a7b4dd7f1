package guest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/daemontest"
)

// Where the daemon lives in the guest. serviceCgroup plays the part of the
// cgroup systemd gives a unit with Delegate=yes: the daemon starts in it
// alone and makes it its subtree (<own>/daemon, <own>/runs/<id>).
const (
	serviceCgroup = cgroupRoot + "/cellblockd"
	runsCgroup    = serviceCgroup + "/runs"
	daemonLeaf    = serviceCgroup + "/daemon"
	daemonSocket  = "/run/cellblock/cellblockd.sock"
	daemonState   = "/var/lib/cellblock"
	daemonLogName = "daemon.log"
)

// startTimeout bounds the daemon's start-up: under TCG it builds the Python
// rootfs from the 9p-shared /usr and proves a jail with a probe run.
const startTimeout = 4 * time.Minute

// daemonProc is the cellblockd the guest started.
type daemonProc struct {
	*daemontest.Daemon
}

// startDaemon starts cellblockd in serviceCgroup, waits until it is ready
// and checks that it took the v2 path: mode v2, itself in <own>/daemon,
// the run controllers enabled for <own>/runs.
func startDaemon(ctx context.Context, cfg Config, rep *reporter) (*daemonProc, string, error) {
	if err := os.Mkdir(serviceCgroup, 0o755); err != nil {
		return nil, "", err
	}
	cg, err := os.Open(serviceCgroup)
	if err != nil {
		return nil, "", err
	}
	defer cg.Close()
	t0 := time.Now()
	dd, err := daemontest.Launch(daemontest.Config{
		Binary:  cfg.Daemon,
		Socket:  daemonSocket,
		Args:    []string{"--state-dir", daemonState, "--python", cfg.Python, "--max-concurrent", "2"},
		LogPath: filepath.Join(cfg.OutDir, daemonLogName),
		// clone3(CLONE_INTO_CGROUP): the daemon is born in its cgroup, alone.
		SysProcAttr: &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())},
	})
	if err != nil {
		return nil, "", err
	}
	d := &daemonProc{dd}
	rep.logf("daemon started (pid %d); waiting for it to build its rootfs and say it is ready", d.Cmd.Process.Pid)
	sctx, cancel := context.WithTimeout(ctx, startTimeout)
	err = d.WaitReady(sctx)
	cancel()
	if err != nil {
		return d, "", fmt.Errorf("within %v: %v; log: %s", startTimeout, err, d.logTail())
	}
	ready := time.Since(t0)

	info, err := d.Client.Info(ctx)
	if err != nil {
		return d, "", fmt.Errorf("info: %w", err)
	}
	if info.CgroupMode != "v2" {
		return d, "", fmt.Errorf("cellblockd reports cgroup mode %q, want v2", info.CgroupMode)
	}
	own, err := readTrim(fmt.Sprintf("/proc/%d/cgroup", d.Cmd.Process.Pid))
	if err != nil {
		return d, "", err
	}
	if want := "0::" + strings.TrimPrefix(daemonLeaf, cgroupRoot); own != want {
		return d, "", fmt.Errorf("the daemon is in cgroup %q, want %q", own, want)
	}
	for _, dir := range []string{serviceCgroup, runsCgroup} {
		sub, err := readTrim(filepath.Join(dir, "cgroup.subtree_control"))
		if err != nil {
			return d, "", err
		}
		for _, c := range rootControllers {
			if !strings.Contains(" "+sub+" ", " "+c+" ") {
				return d, "", fmt.Errorf("%s/cgroup.subtree_control is %q: no %s", dir, sub, c)
			}
		}
	}
	var py string
	for _, p := range info.Pythons {
		py += p.Version + " "
	}
	return d, fmt.Sprintf("ready in %.1fs; cgroup_mode %s; daemon in %s; runs in %s with %v; user_namespace %v; python %s",
		ready.Seconds(), info.CgroupMode, strings.TrimPrefix(own, "0::"), strings.TrimPrefix(runsCgroup, cgroupRoot),
		rootControllers, info.UserNamespace, strings.TrimSpace(py)), nil
}

// run carries out req; a run the daemon refused is an error.
func (d *daemonProc) run(ctx context.Context, req *api.RunRequest, onOutput func(stream, data string)) (*api.Result, error) {
	rctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	// Every check runs in a prestarted jail, so that limits applied when
	// a jail is claimed are what the checks prove on cgroup v2.
	if _, err := d.prestarted(rctx); err != nil {
		return nil, err
	}
	res, err := d.Client.RunStream(rctx, req, onOutput)
	if err != nil {
		return nil, fmt.Errorf("run: %w; log: %s", err, d.logTail())
	}
	if res.Error != nil {
		return res, fmt.Errorf("run refused: %v; log: %s", res.Error, d.logTail())
	}
	if res.Phases == nil || !res.Phases.Prestarted {
		return res, fmt.Errorf("the run did not get a prestarted jail; log: %s", d.logTail())
	}
	return res, nil
}

// prestarted waits until all the daemon's prestarted jails are ready and
// returns their number.
func (d *daemonProc) prestarted(ctx context.Context) (int, error) {
	for {
		info, err := d.Client.Info(ctx)
		if err != nil {
			return 0, fmt.Errorf("info: %w; log: %s", err, d.logTail())
		}
		if info.Prestart > 0 && info.PrestartReady == info.Prestart {
			return info.Prestart, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%d of %d prestarted jails ready: %w; log: %s", info.PrestartReady, info.Prestart, ctx.Err(), d.logTail())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stop sends SIGTERM and waits up to grace for the daemon to exit 0.
func (d *daemonProc) stop(grace time.Duration) error { return d.Stop(grace) }

// kill ends the daemon if it is still running.
func (d *daemonProc) kill() { d.Kill() }

// logTail is the end of the daemon's log, for error messages.
func (d *daemonProc) logTail() string { return d.LogTail(1500) }

// runDir returns the directory of the one run in flight.
func runDir() (string, error) {
	entries, err := os.ReadDir(runsCgroup)
	if err != nil {
		return "", err
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() && !idleJail(filepath.Join(runsCgroup, e.Name())) {
			dirs = append(dirs, e.Name())
		}
	}
	if len(dirs) != 1 {
		return "", fmt.Errorf("%d run cgroups in %s (%v), want exactly 1", len(dirs), runsCgroup, dirs)
	}
	return filepath.Join(runsCgroup, dirs[0]), nil
}

// idleJails counts the prestarted jails waiting for a run.
func idleJails() int {
	entries, _ := os.ReadDir(runsCgroup)
	n := 0
	for _, e := range entries {
		if e.IsDir() && idleJail(filepath.Join(runsCgroup, e.Name())) {
			n++
		}
	}
	return n
}

// idleJail reports whether dir is the cgroup of a prestarted jail waiting
// for a run: its processes are an idle init and the runner it started.
func idleJail(dir string) bool {
	return idleJailProcs(dir) > 0
}

// idleJailProcs is how many processes the prestarted jail of cgroup dir
// holds while it waits for a run (its init, and the runner once started),
// or 0 when dir is not such a jail.
func idleJailProcs(dir string) int {
	if !strings.HasPrefix(filepath.Base(dir), "pre-") {
		return 0
	}
	pids, err := cgroupProcs(dir)
	if err != nil || len(pids) == 0 || len(pids) > 2 {
		return 0
	}
	for _, pid := range pids {
		if !daemontest.IdleInit(pid) && !daemontest.IdleRunner(pid) {
			return 0
		}
	}
	return len(pids)
}

// cgroupProcs lists the pids in dir and every cgroup below it.
func cgroupProcs(dir string) ([]int, error) {
	var pids []int
	err := filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if !e.IsDir() {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		for _, f := range strings.Fields(string(b)) {
			n, err := strconv.Atoi(f)
			if err != nil {
				return err
			}
			pids = append(pids, n)
		}
		return nil
	})
	return pids, err
}

// keyedValue reads one "key value" line of a flat-keyed cgroup file.
func keyedValue(path, key string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s has no %q", path, key)
}

// removeCgroupTree removes dir and every cgroup below it, deepest first;
// it fails if any of them still has a process.
func removeCgroupTree(dir string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := unix.Rmdir(dirs[i]); err != nil {
			return fmt.Errorf("rmdir %s: %w", dirs[i], err)
		}
	}
	return nil
}
