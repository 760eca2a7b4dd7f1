package guest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Run is the guest's life after the kernel started it: boot, the checks in
// order, the report. It returns when every check has been reported (or the
// guest's time is up); the caller then powers off.
func Run() {
	start := time.Now()
	rep := &reporter{start: start, reported: make(map[string]bool)}
	cfg, err := readConfig()
	if err != nil {
		rep.failRest(err.Error())
		rep.finish()
		return
	}
	timeout := time.Duration(cfg.TimeoutSec) * time.Second
	if timeout <= 0 {
		timeout = 10 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	finished := make(chan struct{})
	go func() {
		run(ctx, cfg, rep)
		close(finished)
	}()
	select {
	case <-finished:
	case <-ctx.Done():
		// A check hung: report what is left and give up; the machine is
		// about to go away with whatever is still running.
		rep.failRest(fmt.Sprintf("the guest ran out of time (%v)", timeout))
	}
	rep.finish()
}

func run(ctx context.Context, cfg Config, rep *reporter) {
	if err := boot(cfg); err != nil {
		rep.result(CheckBoot, "", err)
		rep.failRest("the VM did not boot")
		return
	}
	if err := rep.openFile(filepath.Join(cfg.OutDir, ResultsFile)); err != nil {
		rep.logf("cannot write the results file: %v", err)
	}
	rep.logf("booted")
	detail, err := checkPureV2()
	rep.result(CheckBoot, detail, err)
	if err != nil {
		rep.failRest("the VM is not a pure cgroup v2 machine")
		return
	}

	d, detail, err := startDaemon(ctx, cfg, rep)
	rep.result(CheckDaemon, detail, err)
	notRun := errors.New("not run: the daemon did not start")
	for _, c := range []struct {
		name string
		fn   func(context.Context, *daemonProc) (string, error)
	}{
		{CheckMemory, checkMemory},
		{CheckPids, checkPids},
		{CheckCPU, checkCPU},
		{CheckStats, checkStats},
		{CheckKill, checkKillDetached},
		{CheckOOMScore, checkOOMScore},
		{CheckCleanup, checkCleanup},
	} {
		if err != nil {
			rep.result(c.name, "", notRun)
			continue
		}
		rep.logf("check %s", c.name)
		detail, cerr := c.fn(ctx, d)
		rep.result(c.name, detail, cerr)
	}
	if d != nil {
		// Normally checkCleanup stopped it already.
		d.kill()
	}

	if cfg.CgroupTest == "" {
		rep.result(CheckCgroupTests, "", errors.New("not run: the host gave no test binary"))
		return
	}
	rep.logf("check %s", CheckCgroupTests)
	detail, err = runCgroupTests(ctx, cfg)
	rep.result(CheckCgroupTests, detail, err)
}

// reporter writes result lines to the console and, once the writable share
// is mounted, to the results file. It reports each check once.
type reporter struct {
	start    time.Time
	mu       sync.Mutex
	file     *os.File
	lines    []string // everything reported, for the file opened late
	reported map[string]bool
	done     bool
}

func (r *reporter) openFile(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.file = f
	for _, l := range r.lines {
		r.writeFile(l)
	}
	return nil
}

func (r *reporter) writeFile(line string) {
	if r.file == nil {
		return
	}
	_, _ = r.file.WriteString(line + "\n")
	_ = r.file.Sync()
}

func (r *reporter) emit(line string) {
	r.lines = append(r.lines, line)
	fmt.Fprintln(os.Stdout, line)
	r.writeFile(line)
}

// logf prints a progress line on the console with the time since boot.
func (r *reporter) logf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(os.Stdout, "vmtest %6.1fs: %s\n", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
}

// result reports one check: passed with detail when err is nil.
func (r *reporter) result(name, detail string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done || r.reported[name] {
		return
	}
	r.reported[name] = true
	detail = fmt.Sprintf("%s (at %.1fs)", detail, time.Since(r.start).Seconds())
	if err != nil {
		r.emit(formatResult(name, false, err.Error()))
		return
	}
	r.emit(formatResult(name, true, detail))
}

// failRest reports every check not reported yet as failed with why.
func (r *reporter) failRest(why string) {
	for _, name := range Checks {
		r.result(name, "", errors.New(why))
	}
}

// finish writes the closing line; nothing is reported after it.
func (r *reporter) finish() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return
	}
	r.emit(resultLinePrefix + resultDone)
	r.done = true
	if r.file != nil {
		_ = r.file.Close()
	}
}
