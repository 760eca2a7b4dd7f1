package integration

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
)

func TestLoad48RunsAt8(t *testing.T) {
	d := daemon(t)
	mountsBefore := mountCount(t)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	errs := make(chan error, 48)
	start := time.Now()
	for i := 0; i < 48; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			res, err := d.Client.Run(ctx, &api.RunRequest{Code: fmt.Sprintf("import sys\nprint(%d * 7)\nprint('e%d', file=sys.stderr)\nsys.exit(%d %% 5)", i, i, i)})
			switch {
			case err != nil:
				errs <- fmt.Errorf("run %d: %v", i, err)
			case res.Error != nil:
				errs <- fmt.Errorf("run %d: %+v", i, res.Error)
			case res.Stdout != fmt.Sprintf("%d\n", i*7) || res.Stderr != fmt.Sprintf("e%d\n", i) || res.ExitCode != i%5:
				errs <- fmt.Errorf("run %d: exit %d stdout %q stderr %q", i, res.ExitCode, res.Stdout, res.Stderr)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("48 runs at 8 at a time took %v", time.Since(start))
	assertNothingLeft(t, mountsBefore)
}

// assertNothingLeft checks that no run left a cgroup, a jail process or a
// mount behind. Prestarted jails still waiting for a run are not left
// behind: they belong to the live daemon (TestMain checks that they go
// with it).
func assertNothingLeft(t *testing.T, mountsBefore int) {
	t.Helper()
	// A prestarted jail the daemon is still building is not idle yet. It
	// is built at the smallest CPU weight, which on a busy host (go test
	// ./... runs packages side by side) has taken over 5 s.
	const settle = 30 * time.Second
	if !waitFor(settle, func() bool { return len(runCgroups()) == 0 }) {
		t.Errorf("cgroups left behind: %v", runCgroups())
	}
	if !waitFor(settle, func() bool { return len(runProcesses()) == 0 }) {
		t.Errorf("processes left behind: %v", runProcesses())
	}
	if n := mountCount(t); n != mountsBefore {
		t.Errorf("mounts: %d before, %d after", mountsBefore, n)
	}
}

func TestQueueFullAnswers429(t *testing.T) {
	d := startDaemon(t, "--max-concurrent", "1", "--queue", "1")
	var wg sync.WaitGroup
	results := make(chan *api.Result, 4)
	// The first run takes the only slot; once it is running, of the
	// three that follow one waits in the queue and two are turned away.
	running := make(chan struct{})
	var once sync.Once
	wg.Add(1)
	go func() {
		defer wg.Done()
		res, err := d.Client.RunStream(context.Background(), &api.RunRequest{Code: "import time; print('running', flush=True); time.sleep(1.5)"},
			func(_, data string) {
				if strings.Contains(data, "running") {
					once.Do(func() { close(running) })
				}
			})
		once.Do(func() { close(running) })
		if err != nil {
			t.Error(err)
			return
		}
		results <- res
	}()
	<-running
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := d.Client.Run(context.Background(), &api.RunRequest{Code: "import time; time.sleep(1.5)"})
			if err != nil {
				t.Error(err)
				return
			}
			results <- res
		}()
	}
	wg.Wait()
	close(results)
	ok, busy := 0, 0
	for r := range results {
		switch {
		case r.Error == nil && r.ExitCode == 0:
			ok++
		case r.Error != nil && r.Error.Type == api.ErrBusy:
			busy++
		default:
			t.Errorf("unexpected result %+v", r)
		}
	}
	if ok != 2 || busy != 2 {
		t.Errorf("%d ran and %d were turned away; want 2 and 2", ok, busy)
	}
}

func TestSIGKILLRecovery(t *testing.T) {
	requireRoot(t)
	mountsBefore := mountCount(t)
	state := freshStateDir(t)
	name := cgroupName(t)
	d := startDaemon(t, "--state-dir", state, "--cgroup-name", name, "--max-concurrent", "4")
	// Start runs that would live long, with detached children.
	for i := 0; i < 4; i++ {
		go d.Client.Run(context.Background(), &api.RunRequest{Code: `
import os, time
if os.fork() == 0:
    os.setsid()
    time.sleep(300)
time.sleep(300)
`, TimeoutMs: 300000})
	}
	if !waitFor(20*time.Second, func() bool { return len(runProcesses()) >= 8 }) {
		t.Fatalf("the runs did not start: %v\n%s", runProcesses(), d.Log())
	}
	d.Kill()
	// A crashed daemon leaves its jails to die by parent-death signal and
	// its cgroups and state to the next start-up's sweep.
	d2 := startDaemon(t, "--state-dir", state, "--cgroup-name", name)
	// The new daemon's own prestarted jails are being built now; once
	// they are ready, nothing else may be there.
	waitPrestarted(t, d2)
	if !waitFor(10*time.Second, func() bool { return len(runProcesses()) == 0 }) {
		t.Errorf("orphaned jail processes after restart: %v", runProcesses())
	}
	if left := runCgroups(); len(left) > 0 {
		t.Errorf("cgroups left after restart: %v", left)
	}
	// Only the new daemon's prestarted jails (at most --prestart of them)
	// may have state.
	entries, _ := os.ReadDir(state + "/jails")
	pre := 0
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), prestartPrefix) {
			t.Errorf("jail state left after restart: %s", e.Name())
		} else {
			pre++
		}
	}
	if pre > 2 {
		t.Errorf("%d prestarted jails' state after restart; the new daemon keeps 2", pre)
	}
	runOK(t, d2, &api.RunRequest{Code: "print('alive')"})
	d2.Stop(t)
	// With both daemons gone nothing at all may be left, prestarted jails
	// included.
	assertNothingLeft(t, mountsBefore)
	for _, p := range jailProcesses() {
		if inCgroup(p, func(n string) bool { return n == name }) {
			t.Errorf("jail process after the daemon stopped: %s", p)
		}
	}
	for _, p := range leftoverCgroups() {
		if strings.Contains(p, name) {
			t.Errorf("cgroup after the daemon stopped: %s", p)
		}
	}
	if entries, _ := os.ReadDir(state + "/jails"); len(entries) != 0 {
		t.Errorf("jail state after the daemon stopped: %d entries", len(entries))
	}
}

func TestSIGTERMDrains(t *testing.T) {
	d := startDaemon(t)
	done := make(chan *api.Result, 1)
	running := make(chan struct{})
	var once sync.Once
	go func() {
		res, err := d.Client.RunStream(context.Background(), &api.RunRequest{Code: "import time; print('running', flush=True); time.sleep(1); print('finished')"},
			func(_, data string) {
				if strings.Contains(data, "running") {
					once.Do(func() { close(running) })
				}
			})
		once.Do(func() { close(running) })
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	<-running
	_ = d.Cmd.Process.Signal(syscall.SIGTERM)
	// New runs are refused while draining.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err := d.WaitLog(ctx, `"msg":"draining"`)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if res, err := d.Client.Run(context.Background(), &api.RunRequest{Code: "print(1)"}); err == nil && res.Error == nil {
		t.Errorf("a run was accepted while draining")
	}
	res := <-done
	if res == nil || res.Stdout != "running\nfinished\n" {
		t.Errorf("the run in flight did not finish: %+v", res)
	}
	select {
	case <-d.Done():
		if err := d.ExitErr(); err != nil {
			t.Errorf("exit after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon did not exit after draining")
	}
	if _, err := os.Stat(d.Socket); err == nil {
		t.Errorf("the socket was left behind")
	}
}
