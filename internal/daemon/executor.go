package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/cellblock/cellblock/cgroup"
	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/config"
	"github.com/cellblock/cellblock/nsjail"
	"github.com/cellblock/cellblock/rootfs"
)

// executor turns validated requests into jail specs and outcomes into
// results.
type executor struct {
	cfg        config.Config
	store      *rootfs.Store
	runner     *nsjail.Runner
	cgRoot     *cgroup.Root
	initBinary string
	log        *slog.Logger
	// deps builds and attaches dependency environments (envs.go).
	deps *dependencies
	// pool holds jails started ahead of requests; nil with --prestart 0.
	pool *nsjail.Pool
}

// Execute implements server.Executor.
func (e *executor) Execute(ctx context.Context, id string, req *api.RunRequest, l api.Limits, onOutput func(string, []byte)) (*api.Result, error) {
	// The interpreter (the request's, else the script's requires-python)
	// and the dependency environment, built on a miss.
	py, env, err := e.resolveRun(ctx, req)
	if err != nil {
		return nil, err
	}
	defer env.release()
	spec := e.spec(id, py, req, l, env.mounts())
	out, err := e.run(ctx, spec, onOutput)
	if err != nil {
		return nil, err
	}
	res := resultOf(out)
	res.Python = py.Version
	res.Limits = &l
	res.Environment = env.result()
	res.Phases.EnvUs = env.micros()
	if out.Canceled && ctx.Err() != nil {
		res.Error = api.Errorf(api.ErrCanceled, "", "the run was cancelled")
	}
	return res, nil
}

// run carries out spec in a prestarted jail when one fits, else in one
// built for it now. A jail that fails before the program starts is
// replaced once by a fresh one: nothing has run twice, and neither a
// prestarted jail whose init died nor a rare failure of libcontainer's
// start (seen once in CI, its nsexec stages losing their sync socket)
// fails the request.
func (e *executor) run(ctx context.Context, spec *nsjail.Spec, onOutput func(string, []byte)) (*nsjail.Outcome, error) {
	var out *nsjail.Outcome
	var err error
	if j := e.pool.Take(spec); j != nil {
		out, err = j.Launch(ctx, spec, onOutput)
	} else {
		out, err = e.runner.Run(ctx, spec, onOutput)
	}
	if !errors.Is(err, nsjail.ErrNotLaunched) || ctx.Err() != nil {
		return out, err
	}
	e.log.Warn("a jail could not be launched; building another", "run", spec.ID, "err", err)
	return e.runner.Run(ctx, spec, onOutput)
}

// prestart starts keeping cfg.Prestart jails ready for runs on py with no
// dependencies and the default limits.
func (e *executor) prestart(py rootfs.Python) error {
	if e.cfg.Prestart == 0 {
		return nil
	}
	spec := e.spec("prestart", py, &api.RunRequest{}, e.cfg.Defaults, nil)
	pool, err := e.runner.NewPool(spec, e.cfg.Prestart)
	if err != nil {
		return fmt.Errorf("prestart jails: %w", err)
	}
	e.pool = pool
	return nil
}

// resultOf maps a jail outcome to the contract's result object.
func resultOf(out *nsjail.Outcome) *api.Result {
	return &api.Result{
		ExitCode:        out.ExitCode,
		Stdout:          api.ValidUTF8(out.Stdout),
		Stderr:          api.ValidUTF8(out.Stderr),
		StdoutTruncated: out.StdoutTruncated,
		StderrTruncated: out.StderrTruncated,
		TimedOut:        out.TimedOut,
		OOMKilled:       out.OOMKilled,
		DurationMs:      out.Duration.Milliseconds(),
		CPUMs:           out.CPUTime.Milliseconds(),
		MemoryPeakBytes: out.MemoryPeak,
		Phases: &api.Phases{
			CreateUs:   out.Phases.Create.Microseconds(),
			StartUs:    out.Phases.Start.Microseconds(),
			ProgramUs:  out.Phases.Program.Microseconds(),
			CollectUs:  out.Phases.Collect.Microseconds(),
			TeardownUs: out.Phases.Teardown.Microseconds(),
			Prestarted: out.Phases.Prestarted,
		},
	}
}

// spec describes the run of req on py under limits l with mounts.
func (e *executor) spec(id string, py rootfs.Python, req *api.RunRequest, l api.Limits, mounts []nsjail.Mount) *nsjail.Spec {
	spec := &nsjail.Spec{
		ID:         id,
		Rootfs:     py.Dir,
		Python:     py.Executable,
		Script:     []byte(req.Code),
		ScriptName: req.Filename,
		Args:       req.Args,
		Env:        req.Env,
		Limits: nsjail.Limits{
			Timeout:     time.Duration(l.TimeoutMs) * time.Millisecond,
			MemoryBytes: l.MemoryBytes,
			Pids:        l.Pids,
			CPUs:        l.CPUs,
			OutputBytes: l.OutputBytes,
			TmpBytes:    l.TmpBytes,
			OpenFiles:   config.DefaultOpenFiles,
		},
		Mounts: mounts,
	}
	if spec.ScriptName == "" {
		spec.ScriptName = "main.py"
	}
	if req.Stdin != "" {
		spec.Stdin = []byte(req.Stdin)
	}
	return spec
}

// Info implements server.Executor.
func (e *executor) Info() api.Info {
	info := api.Info{
		Version:       Version,
		CgroupMode:    string(e.cgRoot.Mode()),
		UserNamespace: e.runner.UserNamespace(),
		Seccomp:       true,
		Network:       "none: a private network namespace with only loopback",
		Filesystem:    "read-only root; writable tmpfs at /tmp, /work (the working directory and HOME) and /dev/shm, each of tmp_bytes",
		Prestart:      e.cfg.Prestart,
		PrestartReady: e.pool.Ready(),
	}
	if e.deps != nil {
		info.Dependencies = e.deps.info()
	}
	pys, err := e.store.List()
	if err != nil {
		e.log.Warn("list rootfs store", "err", err)
	}
	for _, p := range pys {
		info.Pythons = append(info.Pythons, api.Python{ID: p.ID, Version: p.Version, Default: p.Default})
	}
	return info
}

// probe runs one trivial program to prove the whole jail works before the
// daemon says it is ready. With --userns=auto a kernel that refuses user
// namespaces in practice gets a runner without them.
func (e *executor) probe(ctx context.Context, py rootfs.Python) (*nsjail.Runner, error) {
	try := func(r *nsjail.Runner) error {
		spec := &nsjail.Spec{
			ID: "probe-" + fmt.Sprint(time.Now().UnixNano()), Rootfs: py.Dir, Python: py.Executable,
			Script: []byte("print('ok')\n"), ScriptName: "probe.py",
			Limits: nsjail.Limits{Timeout: 30 * time.Second, MemoryBytes: 256 << 20, Pids: 16, CPUs: 1,
				OutputBytes: 4096, TmpBytes: 1 << 20, OpenFiles: 64},
		}
		out, err := r.Run(ctx, spec, nil)
		if err != nil {
			return err
		}
		if out.ExitCode != 0 || strings.TrimSpace(string(out.Stdout)) != "ok" {
			return fmt.Errorf("probe run exited %d: stdout %q stderr %q", out.ExitCode, out.Stdout, out.Stderr)
		}
		return nil
	}
	err := try(e.runner)
	if err == nil {
		return e.runner, nil
	}
	if !e.runner.UserNamespace() || e.cfg.UserNS != "auto" {
		return nil, fmt.Errorf("the jail does not work on this host: %w", err)
	}
	e.log.Warn("jail with a user namespace failed; falling back to none", "err", err)
	cfg := e.cfg
	cfg.UserNS = "off"
	r, nerr := newRunner(cfg, e.cgRoot, e.initBinary, e.log)
	if nerr != nil {
		return nil, errors.Join(err, nerr)
	}
	if perr := try(r); perr != nil {
		return nil, fmt.Errorf("the jail does not work on this host: %w", errors.Join(err, perr))
	}
	return r, nil
}
