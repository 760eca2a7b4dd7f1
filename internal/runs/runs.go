// Package runs carries out validated run requests: it turns a request into
// a jail spec (interpreter, dependency environment, limits), runs it in a
// prestarted jail or one built for it, retries once a jail that never
// launched, and turns the jail's outcome into the result object. A
// session's jail is opened on the same path (prepare, take, launch) and
// kept. It also proves at start-up that jails work on this host (Probe).
// It is the server's Runs, Envs and Artifacts and the session manager's
// Jails; it neither listens nor parses flags.
package runs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/cellblock/cellblock/cgroup"
	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/artifacts"
	"github.com/cellblock/cellblock/internal/deps"
	"github.com/cellblock/cellblock/internal/egress"
	"github.com/cellblock/cellblock/internal/server"
	"github.com/cellblock/cellblock/internal/sessions"
	"github.com/cellblock/cellblock/internal/toolrelay"
	"github.com/cellblock/cellblock/nsjail"
	"github.com/cellblock/cellblock/nsjail/layout"
	"github.com/cellblock/cellblock/nsjail/runner"
	"github.com/cellblock/cellblock/rootfs"
)

// The executor is the server's Runs, Envs and Artifacts, and the jails of
// the session manager; the server's tool relays are what the jail takes.
var (
	_ server.Runs      = (*Executor)(nil)
	_ server.Envs      = (*Executor)(nil)
	_ server.Artifacts = (*Executor)(nil)
	_ sessions.Jails   = (*Executor)(nil)
	_ nsjail.ToolRelay = (*toolrelay.Relay)(nil)
)

// Config is what an Executor is built from: the daemon's objects, all
// ready (the Runner already probed).
type Config struct {
	// Version is the daemon's version, for Info.
	Version string
	Store   *rootfs.Store
	Runner  *nsjail.Runner
	Cgroups *cgroup.Root
	// Deps builds and attaches dependency environments.
	Deps *deps.Manager
	// Defaults are the limits of a request that names none: prestarted
	// jails are built for them.
	Defaults api.Limits
	// Prestart jails are kept ready for runs on the default Python with
	// no dependencies and the default limits; 0 keeps none, of any shape.
	Prestart int
	// PrestartShapes is how many other shapes of jail (another Python,
	// dependencies, another tmp size) keep one prestarted jail each after
	// a run used them; PrestartIdle is how long one keeps it without a
	// run.
	PrestartShapes int
	PrestartIdle   time.Duration
	// OpenFiles is every run's RLIMIT_NOFILE.
	OpenFiles uint64
	// Reports caps what a run's runner may send back: display items,
	// reprs, tracebacks (the operator's --display-* flags).
	Reports runner.Limits
	// Egress makes the proxies of runs that ask for network; nil gives
	// none any.
	Egress *egress.Egress
	// Artifacts keeps what runs write under /work/out; nil returns none.
	// Files caps files in and out (the operator's --files-* flags).
	Artifacts *artifacts.Store
	Files     api.FileCaps
	Log       *slog.Logger
}

// Executor turns validated requests into jail specs and outcomes into
// results.
type Executor struct {
	cfg    Config
	store  *rootfs.Store
	runner *nsjail.Runner
	log    *slog.Logger
	deps   *deps.Manager
	// pool holds jails started ahead of requests; nil with Prestart 0.
	pool *nsjail.Pool
	// defaultShape is pool's shape; shapes keeps jails of the others.
	defaultShape string
	shapes       *shapes
}

// New returns an executor for cfg and starts keeping cfg.Prestart jails
// ready on py, the default Python. Close it to tear them down.
func New(cfg Config, py rootfs.Python) (*Executor, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Store == nil || cfg.Runner == nil || cfg.Cgroups == nil || cfg.Deps == nil {
		return nil, errors.New("runs: Store, Runner, Cgroups and Deps are required")
	}
	e := &Executor{cfg: cfg, store: cfg.Store, runner: cfg.Runner, log: cfg.Log, deps: cfg.Deps}
	if cfg.Prestart > 0 {
		spec := e.spec("prestart", py, &api.RunRequest{}, cfg.Defaults, nil)
		pool, err := e.runner.NewPool(spec, cfg.Prestart)
		if err != nil {
			return nil, fmt.Errorf("prestart jails: %w", err)
		}
		e.pool = pool
		e.defaultShape = spec.Shape()
		if cfg.PrestartShapes > 0 {
			e.shapes = newShapes(e, cfg.PrestartShapes, cfg.PrestartIdle)
		}
	}
	return e, nil
}

// Close tears down the prestarted jails and waits until the jails of
// ended runs are torn down too.
func (e *Executor) Close() error {
	e.shapes.close()
	err := e.pool.Close()
	e.runner.Wait()
	return err
}

// PrestartReady is how many prestarted jails of the default shape wait
// now.
func (e *Executor) PrestartReady() int { return e.pool.Ready() }

// Execute carries out run in a jail of its own (server.Runs): the path
// of every run to its jail (prepare, take, launch), then its result.
func (e *Executor) Execute(ctx context.Context, run *server.Run) (*api.Result, error) {
	req := run.Request
	p, err := e.prepare(ctx, run.ID, run.Owner.UID, req, req.Files, run.Limits)
	if err != nil {
		return nil, err
	}
	defer p.release()
	if run.Tools != nil {
		p.spec.Runner.Tools = run.Tools // not part of the jail's shape
	}
	var out *nsjail.Outcome
	err = e.launch(ctx, p.spec, e.take(p, req, run.Limits), func(j *nsjail.Jail) (err error) {
		if j != nil {
			out, err = j.Launch(ctx, p.spec, run.Output)
		} else {
			out, err = e.runner.Run(ctx, p.spec, run.Output)
		}
		return err
	})
	if err != nil {
		return nil, FileError(err)
	}
	res := e.Result(out)
	res.Denials = p.proxy.Close()
	res.SecretUses = p.proxy.TakeSecretUses()
	e.collectRun(out, run.Owner.UID, req, res)
	res.Python = p.py.Version
	res.Limits = &run.Limits
	res.Environment = p.env.Result()
	res.Phases.EnvUs = p.env.Micros()
	if out.Canceled && ctx.Err() != nil {
		res.Error = api.Errorf(api.ErrCanceled, "", "the run was cancelled")
	}
	return res, nil
}

// prepared is a run on its way to a jail, one-shot or a session's: its
// network proxy (nil without network), its interpreter and dependency
// environment, and its spec with its input files.
type prepared struct {
	proxy *egress.Proxy
	py    rootfs.Python
	env   *deps.Attachment
	spec  *nsjail.Spec
}

// prepare is the first step of every run, one-shot or a session's (id
// names it, owner is the caller's uid): the network and the secrets it
// asks for, within the operator's bound and grants (the proxy's socket is
// opened in the jail at the hand-over), the interpreter (the request's, else the
// script's requires-python) and the dependency environment, built on a
// miss, and the spec under limits l with files decoded. Release what it
// holds with release unless a session keeps it.
func (e *Executor) prepare(ctx context.Context, id string, owner uint32, req *api.RunRequest, files []api.FileInput, l api.Limits) (*prepared, error) {
	proxy, err := e.cfg.Egress.ForRun(id, owner, req.Network, req.Secrets)
	if err != nil {
		return nil, err
	}
	py, env, err := e.deps.Resolve(ctx, e.store, req)
	if err != nil {
		proxy.Close()
		return nil, err
	}
	p := &prepared{proxy: proxy, py: py, env: env, spec: e.spec(id, py, req, l, env)}
	if proxy != nil {
		p.spec.Egress = proxy
	}
	if p.spec.Files, err = inputFiles(files); err != nil {
		p.release()
		return nil, err
	}
	return p, nil
}

// release gives up what p holds: the proxy and the environment's lease.
func (p *prepared) release() {
	p.proxy.Close()
	p.env.Release()
}

// take is a jail of p's shape that waits ready (the default shape's pool,
// or one another shape keeps), or nil when none does: the run then gets
// one built for it. The one place that picks a prestarted jail.
func (e *Executor) take(p *prepared, req *api.RunRequest, l api.Limits) *nsjail.Jail {
	if e.pool != nil && p.spec.Shape() == e.defaultShape {
		return e.pool.Take(p.spec)
	}
	return e.shapes.take(p.spec, p.py, req, l)
}

// launch starts spec in j, a prestarted jail that fits it, or with j nil
// in a jail built for it now, by start (a run's launch, a session's
// opening). A jail that fails before the program starts is replaced once
// by a fresh one: nothing has run twice, and neither a prestarted jail
// whose init died nor a rare failure of libcontainer's start (seen once
// in CI, its nsexec stages losing their sync socket) fails the request.
func (e *Executor) launch(ctx context.Context, spec *nsjail.Spec, j *nsjail.Jail, start func(j *nsjail.Jail) error) error {
	err := start(j)
	if !errors.Is(err, nsjail.ErrNotLaunched) || ctx.Err() != nil {
		return err
	}
	e.log.Warn("a jail could not be launched; building another", "run", spec.ID, "err", err)
	return start(nil)
}

// Result maps a jail's outcome to the contract's result object: for a run
// and for a run in a session (sessions.Jails).
func (e *Executor) Result(out *nsjail.Outcome) *api.Result {
	res := resultOf(out)
	reportsOf(out.Runner, res)
	return res
}

// resultOf maps what the jail measured to the result object.
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
			HandoverUs: out.Phases.Handover.Microseconds(),
			CollectUs:  out.Phases.Collect.Microseconds(),
			Prestarted: out.Phases.Prestarted,
		},
	}
}

// reportsOf puts what the runner reported into res: the contract's value,
// exception and display, validated by the runner's Collector and of the
// same types (package wire).
func reportsOf(r *runner.Result, res *api.Result) {
	if r == nil {
		return
	}
	res.Value, res.Exception, res.Display = r.Value, r.Exception, r.Display
}

// spec describes the run of req on py under limits l with the dependency
// environment env (nil for none): its mount and its preload list.
func (e *Executor) spec(id string, py rootfs.Python, req *api.RunRequest, l api.Limits, env *deps.Attachment) *nsjail.Spec {
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
			OpenFiles:   e.cfg.OpenFiles,
		},
		Mounts:  env.Mounts(),
		Preload: env.Preload(),
		Runner:  &nsjail.RunnerSpec{Mode: req.Mode, Inputs: req.Inputs, Limits: e.cfg.Reports},
		// What the program leaves in /work/out is read from the host.
		OpenWork: e.cfg.Artifacts != nil,
	}
	if spec.Runner.Mode == "" {
		spec.Runner.Mode = api.ModeScript
	}
	if spec.ScriptName == "" {
		spec.ScriptName = "main.py"
	}
	if req.Stdin != "" {
		spec.Stdin = []byte(req.Stdin)
	}
	return spec
}

// Info describes the executor's side of the daemon (server.Runs).
func (e *Executor) Info() api.Info {
	deps := e.deps.Info()
	info := api.Info{
		Version:       e.cfg.Version,
		CgroupMode:    string(e.cfg.Cgroups.Mode()),
		UserNamespace: e.runner.UserNamespace(),
		Seccomp:       true,
		Network:       e.cfg.Egress.Describe(),
		NetworkPolicy: e.cfg.Egress.Info(deps.IndexURL, deps.NoIndex),
		Filesystem: "read-only root; writable tmpfs at " + layout.Tmp + ", " + layout.Work +
			" (the working directory and HOME) and " + layout.Shm + ", each of tmp_bytes",
		Prestart:            e.cfg.Prestart,
		PrestartReady:       e.PrestartReady(),
		PrestartShapesReady: e.shapes.ready(),
		Dependencies:        deps,
		Display: &api.DisplayCaps{
			Items: e.cfg.Reports.DisplayItems, ItemBytes: e.cfg.Reports.DisplayItemBytes,
			TotalBytes: e.cfg.Reports.DisplayTotalBytes, ReprBytes: e.cfg.Reports.ReprBytes,
			TracebackBytes: e.cfg.Reports.TracebackBytes,
		},
		Files:   e.filesInfo(),
		Secrets: e.cfg.Egress.Secrets(),
	}
	pys, err := e.store.List()
	if err != nil {
		e.log.Warn("list rootfs store", "err", err)
	}
	for _, p := range pys {
		info.Pythons = append(info.Pythons, api.Python{ID: p.ID, Version: p.Version, Default: p.Default})
	}
	if e.shapes != nil {
		info.PrestartShapes = e.shapes.max
	}
	return info
}

// Envs lists the cached environments (server.Envs).
func (e *Executor) Envs(ctx context.Context) (*api.EnvList, error) { return e.deps.List(), nil }

// BuildEnv builds an environment ahead of its runs (server.Envs). An environment with a preload
// list also gets a prestarted jail of the shape its runs take with the
// default limits, as a first run would give it: its first run finds the
// modules imported. It decays like any other when no run comes.
func (e *Executor) BuildEnv(ctx context.Context, req *api.EnvBuildRequest) (*api.EnvBuildResult, error) {
	res, err := e.deps.Build(ctx, e.store, req)
	if err != nil || len(res.Preload) == 0 || e.shapes == nil {
		return res, err
	}
	run := &api.RunRequest{Code: "\n", Python: req.Python, Dependencies: req.Dependencies}
	py, env, err := e.deps.Resolve(ctx, e.store, run)
	if err != nil {
		e.log.Warn("prestart a jail for a preloading environment", "env", res.Environment.ID, "err", err)
		return res, nil
	}
	defer env.Release()
	e.shapes.want(e.spec("prestart", py, run, e.cfg.Defaults, env), py, run, e.cfg.Defaults)
	return res, nil
}

// RemoveEnv deletes an environment (server.Envs).
func (e *Executor) RemoveEnv(ctx context.Context, id string) (*api.EnvRemoveResult, error) {
	// Waiting jails hold their environments; the next run of their shape
	// starts them again.
	e.shapes.dropEnvironments()
	return e.deps.Remove(id)
}

// PruneEnvs deletes every environment no run holds (server.Envs).
func (e *Executor) PruneEnvs(ctx context.Context) (*api.EnvRemoveResult, error) {
	e.shapes.dropEnvironments()
	return e.deps.Prune()
}

// Probe runs one trivial program on py to prove the whole jail works
// before the daemon says it is ready, and returns the runner that works.
// When jails fails and fallback is not nil (the daemon's --userns=auto
// with a user namespace), a kernel that refuses user namespaces in
// practice gets fallback's runner, without them, if that one works.
func Probe(ctx context.Context, jails *nsjail.Runner, py rootfs.Python, fallback func() (*nsjail.Runner, error), log *slog.Logger) (*nsjail.Runner, error) {
	try := func(r *nsjail.Runner) error {
		spec := &nsjail.Spec{
			ID: "probe-" + fmt.Sprint(time.Now().UnixNano()), Rootfs: py.Dir, Python: py.Executable,
			Script: []byte("print('ok')\n"), ScriptName: "probe.py",
			Limits: nsjail.Limits{Timeout: 30 * time.Second, MemoryBytes: 256 << 20, Pids: 16, CPUs: 1,
				OutputBytes: 4096, TmpBytes: 1 << 20, OpenFiles: 64},
			// Through the runner, as every run goes.
			Runner: &nsjail.RunnerSpec{Mode: api.ModeScript, Limits: runner.DefaultLimits()},
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
	err := try(jails)
	if err == nil {
		return jails, nil
	}
	if fallback == nil {
		return nil, fmt.Errorf("the jail does not work on this host: %w", err)
	}
	log.Warn("jail with a user namespace failed; falling back to none", "err", err)
	r, nerr := fallback()
	if nerr != nil {
		return nil, errors.Join(err, nerr)
	}
	if perr := try(r); perr != nil {
		return nil, fmt.Errorf("the jail does not work on this host: %w", errors.Join(err, perr))
	}
	return r, nil
}
