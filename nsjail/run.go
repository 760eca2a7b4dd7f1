package nsjail

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"golang.org/x/sys/unix"

	"github.com/cellblock/cellblock/cgroup"
)

// Runner carries out runs. It is safe for concurrent use.
type Runner struct {
	stateRoot  string // libcontainer's state directories, one per live run
	initBinary string // host path of cellblock-init
	cgroups    *cgroup.Root
	seccomp    *configs.Seccomp
	userns     *IDMap // nil: no user namespace
	uid, gid   int    // the program's identity in the jail
	log        *slog.Logger
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
	// without a user namespace, as the host's uid NoUserNSUID.
	UserNS *IDMap
	Log    *slog.Logger
}

// NoUserNSUID is the host uid and gid the program runs as when the kernel
// gives no user namespace: nobody, which owns nothing.
const NoUserNSUID = 65534

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
		uid:        JailUID,
		gid:        JailGID,
		log:        log,
	}
	if r.userns == nil {
		r.uid, r.gid = NoUserNSUID, NoUserNSUID
	}
	return r, nil
}

// UserNamespace reports whether runs get a user namespace.
func (r *Runner) UserNamespace() bool { return r.userns != nil }

// JailHostID is the host uid and gid the jail's user (JailUID, or
// NoUserNSUID without a user namespace) is on the host: what a directory a
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
	Create   time.Duration // cgroup and container created
	Start    time.Duration // namespaces, mounts, pivot_root, seccomp, exec
	Program  time.Duration // the program ran (wall clock)
	Collect  time.Duration // output drained, statistics read
	Teardown time.Duration // cgroup and container removed
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
}

// OutputFunc receives output chunks while the program runs. It is called
// from one goroutine per stream and must not keep p.
type OutputFunc func(stream string, p []byte)

// Run carries out spec and returns its outcome. An error means the run
// could not be carried out at all; whatever the program did is in the
// outcome. Cancelling ctx kills the run. onOutput may be nil.
func (r *Runner) Run(ctx context.Context, spec *Spec, onOutput OutputFunc) (_ *Outcome, err error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	out := &Outcome{}
	t0 := time.Now()

	cg, err := r.cgroups.Create(spec.ID, cgroup.Limits{
		MemoryBytes: spec.Limits.MemoryBytes,
		Pids:        spec.Limits.Pids,
		CPUs:        spec.Limits.CPUs,
	})
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", spec.ID, err)
	}
	var container *libcontainer.Container
	defer func() {
		td := time.Now()
		// The cgroup goes first so that it has one owner: libcontainer's
		// own removal then finds nothing left.
		if derr := cg.Delete(); derr != nil {
			r.log.Error("delete run cgroup", "run", spec.ID, "err", derr)
			err = errors.Join(err, derr)
		}
		if container != nil {
			if derr := container.Destroy(); derr != nil {
				r.log.Error("destroy jail", "run", spec.ID, "err", derr)
				err = errors.Join(err, derr)
			}
		}
		out.Phases.Teardown = time.Since(td)
	}()

	container, err = libcontainer.Create(r.stateRoot, spec.ID, spec.libcontainerConfig(r, cg.LibcontainerPath()))
	if err != nil {
		return nil, fmt.Errorf("create jail for run %s: %w", spec.ID, err)
	}

	script, err := scriptFile(spec.Script)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", spec.ID, err)
	}
	defer script.Close()
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("run %s: stdout pipe: %w", spec.ID, err)
	}
	defer stdoutR.Close()
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		stdoutW.Close()
		return nil, fmt.Errorf("run %s: stderr pipe: %w", spec.ID, err)
	}
	defer stderrR.Close()

	proc := &libcontainer.Process{
		Args:       spec.argv(),
		Env:        spec.environ(),
		UID:        r.uid,
		GID:        r.gid,
		Cwd:        WorkDir,
		Stdout:     stdoutW,
		Stderr:     stderrW,
		ExtraFiles: []*os.File{script},
		Init:       true,
		LogLevel:   "4", // warnings and errors from libcontainer's init
	}
	if spec.Stdin != nil {
		proc.Stdin = bytes.NewReader(spec.Stdin)
	}
	out.Phases.Create = time.Since(t0)

	t1 := time.Now()
	err = container.Run(proc)
	stdoutW.Close()
	stderrW.Close()
	script.Close()
	if err != nil {
		return nil, fmt.Errorf("start jail for run %s: %w", spec.ID, err)
	}
	start := time.Now()
	out.Phases.Start = start.Sub(t1)

	// Drain both streams while the program runs, keeping at most the
	// output limit of each.
	var wg sync.WaitGroup
	stdout := newCappedBuffer(spec.Limits.OutputBytes)
	stderr := newCappedBuffer(spec.Limits.OutputBytes)
	for _, s := range []struct {
		name string
		r    io.Reader
		buf  *cappedBuffer
	}{{"stdout", stdoutR, stdout}, {"stderr", stderrR, stderr}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.buf.drain(s.r, s.name, onOutput)
		}()
	}

	waited := make(chan *os.ProcessState, 1)
	go func() {
		st, _ := proc.Wait()
		waited <- st
	}()

	timer := time.NewTimer(spec.Limits.Timeout - time.Since(start))
	defer timer.Stop()
	var state *os.ProcessState
	select {
	case state = <-waited:
	case <-timer.C:
		out.TimedOut = true
	case <-ctx.Done():
		out.Canceled = true
	}
	if state == nil {
		// Kill the whole cgroup: every process of the run, however
		// detached, not just the init.
		if kerr := cg.Kill(); kerr != nil {
			r.log.Error("kill run", "run", spec.ID, "err", kerr)
			_ = proc.Signal(unix.SIGKILL)
		}
		state = <-waited
	}
	out.Duration = time.Since(start)

	tc := time.Now()
	// The init is gone, so the pid namespace is empty and every write end
	// of the pipes is closed: the drains end. Bound the wait anyway.
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(5 * time.Second):
		stdoutR.Close()
		stderrR.Close()
		<-drained
	}
	out.Stdout, out.StdoutTruncated = stdout.bytes()
	out.Stderr, out.StderrTruncated = stderr.bytes()
	out.ExitCode = exitCode(state)

	st, serr := cg.Stats()
	if serr != nil {
		r.log.Warn("read run statistics", "run", spec.ID, "err", serr)
	}
	out.CPUTime = st.CPUTime
	out.MemoryPeak = st.MemoryPeakBytes
	out.OOMKilled = st.OOMKilled && !out.TimedOut
	out.Phases.Program = out.Duration
	out.Phases.Collect = time.Since(tc)
	return out, nil
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

// scriptFile puts the script in a sealed memfd: it reaches the jail as a
// descriptor and never touches the host's filesystem.
func scriptFile(code []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate("cellblock-script", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("script memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "cellblock-script")
	if _, err := f.Write(code); err != nil {
		f.Close()
		return nil, fmt.Errorf("write script memfd: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("rewind script memfd: %w", err)
	}
	_, _ = unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE)
	return f, nil
}
