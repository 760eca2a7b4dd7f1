package nsjail

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"golang.org/x/sys/unix"

	"github.com/cellblock/cellblock/cgroup"
	"github.com/cellblock/cellblock/nsjail/layout"
	"github.com/cellblock/cellblock/nsjail/runner"
	"github.com/cellblock/cellblock/nsjail/workdir"
)

// Runner carries out runs. It is safe for concurrent use.
type Runner struct {
	stateRoot  string // libcontainer's state directories, one per live run
	initBinary string // host path of cellblock-init
	cgroups    *cgroup.Root
	seccomp    *configs.Seccomp
	userns     *IDMap // nil: no user namespace
	runnerLib  string // host directory of the runner's files; "" for none
	uid, gid   int    // the program's identity in the jail
	log        *slog.Logger

	teardowns sync.WaitGroup // jails being torn down after their run

	preloadMu   sync.Mutex
	preloadSeen map[string]bool // preload failures logged as warnings (notePreload)

	workWarned atomic.Bool // a /work that could not be opened was logged as a warning
}

// RunnerConfig configures a Runner.
type RunnerConfig struct {
	// StateRoot holds libcontainer's per-run state; it is swept at start.
	StateRoot string
	// InitBinary is the host path of the static cellblock-init.
	InitBinary string
	// Cgroups is the daemon's cgroup subtree for runs.
	Cgroups *cgroup.Root
	// Seccomp is the compiled policy, shared by every run.
	Seccomp *configs.Seccomp
	// UserNS maps the jail's ids onto host ids that own nothing; nil runs
	// without a user namespace, as the host's nobody (layout.Nobody).
	UserNS *IDMap
	// RunnerLib is the host directory holding the runner's files
	// (rootfs.InstallFiles of runner.Files), mounted read-only at layout.RunnerDir in every
	// jail. Specs with a Runner need it.
	RunnerLib string
	Log       *slog.Logger
}

// NewRunner checks cfg and prepares the state root.
func NewRunner(cfg RunnerConfig) (*Runner, error) {
	if cfg.Seccomp == nil {
		return nil, errors.New("nsjail: a seccomp policy is required")
	}
	if cfg.Cgroups == nil {
		return nil, errors.New("nsjail: a cgroup root is required")
	}
	st, err := os.Stat(cfg.InitBinary)
	if err != nil {
		return nil, fmt.Errorf("nsjail: init binary: %w", err)
	}
	if !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("nsjail: init binary %s is not an executable file", cfg.InitBinary)
	}
	if err := os.MkdirAll(cfg.StateRoot, 0o700); err != nil {
		return nil, fmt.Errorf("nsjail: state root: %w", err)
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Runner{
		stateRoot:  cfg.StateRoot,
		initBinary: cfg.InitBinary,
		cgroups:    cfg.Cgroups,
		seccomp:    cfg.Seccomp,
		userns:     cfg.UserNS,
		runnerLib:  cfg.RunnerLib,
		uid:        layout.UID,
		gid:        layout.GID,
		log:        log,
	}
	if r.userns == nil {
		r.uid, r.gid = layout.Nobody, layout.Nobody
	}
	return r, nil
}

// tearDownLater tears j down in the background, after its run's answer.
func (r *Runner) tearDownLater(j *Jail) {
	r.teardowns.Add(1)
	go func() {
		defer r.teardowns.Done()
		select {
		case <-j.exited:
		default:
			// The run ended at its runner's exit message (see
			// supervise): its processes are still ending, or some
			// program's live on.
			if err := j.kill(); err != nil {
				j.r.log.Error("kill ended run", "jail", j.id, "err", err)
			}
		}
		_ = j.teardown() // logged there
	}()
}

// Wait waits until every launched jail is torn down. The daemon calls it
// at shutdown, after the last run ended, so that no cgroup or container
// outlives it.
func (r *Runner) Wait() { r.teardowns.Wait() }

// UserNamespace reports whether runs get a user namespace.
func (r *Runner) UserNamespace() bool { return r.userns != nil }

// JailHostID is the host uid and gid the jail's user (layout.UID, or
// layout.Nobody without a user namespace) is on the host: what a directory a
// jail must write has to be owned by.
func (r *Runner) JailHostID() (uid, gid int) {
	if r.userns == nil {
		return r.uid, r.gid
	}
	return int(r.userns.HostID) + r.uid, int(r.userns.HostID) + r.gid
}

// Sweep removes what a crashed daemon left behind: libcontainer state
// directories (their processes are killed by the cgroup sweep, which the
// caller runs first) and jail mounts. It returns how many runs it cleaned.
func (r *Runner) Sweep() (int, error) {
	entries, err := os.ReadDir(r.stateRoot)
	if err != nil {
		return 0, fmt.Errorf("sweep jail state: %w", err)
	}
	n := 0
	for _, e := range entries {
		dir := filepath.Join(r.stateRoot, e.Name())
		if c, err := libcontainer.Load(r.stateRoot, e.Name()); err == nil {
			_ = c.Signal(unix.SIGKILL)
			if err := c.Destroy(); err != nil {
				r.log.Warn("destroy leftover jail", "run", e.Name(), "err", err)
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			return n, fmt.Errorf("sweep jail state %s: %w", dir, err)
		}
		n++
	}
	return n, nil
}

// Phases is where a run's time went.
type Phases struct {
	Create time.Duration // cgroup and container created
	Start  time.Duration // namespaces, mounts, pivot_root, seccomp, exec of the init, launch
	// Prestarted reports a jail built ahead of the run (see Pool): Create
	// is then zero and Start only the launch.
	Prestarted bool
	Program    time.Duration // the program ran (wall clock)
	// Handover is the part of Program from the init's answer until the
	// runner said it started the code: sending it the program, and a
	// re-exec when the request's environment needs one.
	Handover time.Duration
	Collect  time.Duration // output drained, statistics read
}

// Outcome is what a run produced.
type Outcome struct {
	ExitCode        int
	Stdout, Stderr  []byte
	StdoutTruncated bool
	StderrTruncated bool
	TimedOut        bool
	OOMKilled       bool
	Canceled        bool // the context ended the run
	Duration        time.Duration
	CPUTime         time.Duration
	MemoryPeak      int64
	Phases          Phases
	// Runner is what the runner reported (validated, untrusted); nil for
	// a run without it, or when nothing came.
	Runner *runner.Result
	// Lost: a run in a session whose interpreter died or had to be
	// killed during the run (see Session.Run).
	Lost bool
	// Work is the run's /work, still readable with every process of the
	// run gone, when the spec asked for it (Spec.OpenWork); the caller
	// closes it. Nil otherwise, and for a run in a session; WorkErr says
	// why when it was asked for but could not be opened.
	Work    *workdir.Dir
	WorkErr error
}

// OutputFunc receives output chunks while the program runs. It is called
// from one goroutine per stream and must not keep p.
type OutputFunc func(stream string, p []byte)

// Run carries out spec in a jail built for it and returns its outcome. An
// error means the run could not be carried out at all; whatever the
// program did is in the outcome. Cancelling ctx kills the run. onOutput may
// be nil.
func (r *Runner) Run(ctx context.Context, spec *Spec, onOutput OutputFunc) (*Outcome, error) {
	j, err := r.Prepare(ctx, spec.ID, spec)
	if err != nil {
		return nil, err
	}
	return j.Launch(ctx, spec, onOutput)
}

// exitCode maps a wait status to the contract's exit code: the exit status,
// or 128+N for a death by signal N.
func exitCode(st *os.ProcessState) int {
	if st == nil {
		return -1
	}
	ws, ok := st.Sys().(syscall.WaitStatus)
	if !ok {
		return st.ExitCode()
	}
	switch {
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		return 128 + int(ws.Signal())
	}
	return -1
}
