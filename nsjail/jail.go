package nsjail

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/runc/libcontainer"
	"golang.org/x/sys/unix"

	"github.com/cellblock/cellblock/cgroup"
	"github.com/cellblock/cellblock/nsjail/jailinit"
	"github.com/cellblock/cellblock/nsjail/layout"
	"github.com/cellblock/cellblock/nsjail/runner"
	"github.com/cellblock/cellblock/nsjail/workdir"
)

// ErrNotLaunched wraps a Prepare or Launch error that happened before the
// program could start (libcontainer failing to start the jail's init, the
// init dying while it waited): the jail is gone, but the run can be tried
// again in another.
var ErrNotLaunched = errors.New("jail could not be launched")

// launchTimeout bounds handing the program to the init, until its answer.
const launchTimeout = 30 * time.Second

// initThreadRoom is how many threads the jail's init may start while it
// starts the program, before the tasks limit is made exact.
const initThreadRoom = 2

// lateThreadRoom is how many threads the init may still start after it
// was counted, with the program running. The init blocks in no system
// call then (jailinit reaps on SIGCHLD), but the Go runtime can still
// start a thread when one of its short calls is slow, as under CPU
// contention (2 runs in 20 here with a busy loop beside the suite). The
// program may use the room when the init does not: it gets the tasks
// it asked for, or one more, never fewer.
const lateThreadRoom = 1

// setupTasks is the tasks limit of a jail until its program's is set:
// libcontainer's init (the daemon's binary, re-executed) and then the
// jail's own use a dozen or so between them.
const setupTasks = 64

// Jail is one jail whose init is running and waiting for its program: the
// cgroup, the libcontainer container, the pipes of the init's stdout and
// stderr, and the socket the program is handed over by. Launch it once, or
// Close it.
type Jail struct {
	r         *Runner
	id        string
	spec      Spec // what the jail was built for (see Spec.sameJail)
	cg        *cgroup.Cgroup
	container *libcontainer.Container
	proc      *libcontainer.Process
	ctl       *os.File // our end of the init's descriptor 3
	rch       *os.File // our end of the runner's channel; nil without one
	stdoutR   *os.File
	stderrR   *os.File
	exited    chan struct{}    // closed when the init has exited
	state     *os.ProcessState // the init's exit status, set before exited closes
	gone      chan struct{}    // closed when the jail is torn down
	// mntns holds the jail's mount namespace (see holdMounts); nil if it
	// could not be opened.
	mntns  *os.File
	create time.Duration
	start  time.Duration

	// prestarted marks a jail built ahead of its run (see Pool); pool is
	// the pool that built it.
	prestarted bool
	pool       *Pool
	// warm is closed once the jail's runner said it is ready (its imports
	// done) or can no longer say so; nil for a jail without a runner.
	warm chan struct{}
	// work is the jail's /work, opened at the hand-over when the spec
	// asks (Spec.OpenWork); whoever takes it closes it (takeWork).
	// workErr says why it could not be opened.
	work    *workdir.Dir
	workErr error

	mu       sync.Mutex
	used     bool // Launch or Close was called
	launched bool // Launch was called
}

// ID names the jail (its cgroup and container); for a jail built ahead of
// time it is not the run's id.
func (j *Jail) ID() string { return j.id }

// Prepare builds a jail for spec under the name id and starts its init,
// which then waits for Launch. Only what is fixed when a jail starts is
// taken from spec (see Spec.sameJail), plus the cgroup limits. A cancelled
// ctx stops it before the init is started, removing what it built, and
// its error wraps ctx's.
func (r *Runner) Prepare(ctx context.Context, id string, spec *Spec) (*Jail, error) {
	return r.prepare(ctx, id, spec, false)
}

// prepare is Prepare; ahead builds the jail ahead of its run (a Pool's):
// with the smallest CPU weight (cgroup.Limits.Background), which Launch
// lifts, and with its runner importing spec.Preload before it says it is
// ready. A jail built for its run skips the preload: its program is
// waiting already.
func (r *Runner) prepare(ctx context.Context, id string, spec *Spec, ahead bool) (_ *Jail, err error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("jail %s: %w", id, err)
	}
	t0 := time.Now()
	j := &Jail{r: r, id: id, spec: *spec, gone: make(chan struct{})}
	limits := spec.Limits.cgroupLimits()
	limits.Background = ahead
	if limits.Pids > 0 {
		// Launch sets the program's limit once the init is ready.
		limits.Pids = max(limits.Pids, setupTasks)
	}
	j.cg, err = r.cgroups.Create(id, limits)
	if err != nil {
		return nil, fmt.Errorf("jail %s: %w", id, err)
	}
	var closers []*os.File
	defer func() {
		for _, f := range closers {
			f.Close()
		}
		if err != nil {
			err = errors.Join(err, j.teardown())
		}
	}()
	j.container, err = libcontainer.Create(r.stateRoot, id, spec.libcontainerConfig(r, j.cg.LibcontainerPath()))
	if err != nil {
		return nil, fmt.Errorf("create jail %s: %w", id, err)
	}
	pipe := func(name string) (rd, wr *os.File, err error) {
		rd, wr, err = r.outputPipe()
		if err != nil {
			return nil, nil, fmt.Errorf("jail %s: %s pipe: %w", id, name, err)
		}
		return rd, wr, nil
	}
	ctlInit, ctl, err := socketpair()
	if err != nil {
		return nil, fmt.Errorf("jail %s: launch socket: %w", id, err)
	}
	closers = append(closers, ctlInit, ctl)
	extra := []*os.File{ctlInit}
	var rchInit, rch *os.File
	if spec.Runner != nil {
		if r.runnerLib == "" {
			return nil, fmt.Errorf("%w: jail %s: a runner jail needs the runner's files (RunnerConfig.RunnerLib)", ErrInvalidSpec, id)
		}
		if rchInit, rch, err = socketpair(); err != nil {
			return nil, fmt.Errorf("jail %s: runner channel: %w", id, err)
		}
		closers = append(closers, rchInit, rch)
		extra = append(extra, rchInit)
	}
	stdoutR, stdoutW, err := pipe("stdout")
	if err != nil {
		return nil, err
	}
	closers = append(closers, stdoutR, stdoutW)
	stderrR, stderrW, err := pipe("stderr")
	if err != nil {
		return nil, err
	}
	closers = append(closers, stderrR, stderrW)

	env := []string{"PATH=/usr/bin:/bin"}
	if spec.Runner != nil {
		// The init passes its environment on to the runner, which starts
		// now: the jail's own, with the defaults for the rest.
		env = spec.environ()
		if ahead && len(spec.Preload) > 0 {
			env = append(env, runner.EnvPreload+"="+strings.Join(spec.Preload, ","))
		}
	}
	j.proc = &libcontainer.Process{
		Args:       spec.initArgs(),
		Env:        env,
		UID:        r.uid,
		GID:        r.gid,
		Cwd:        layout.Work,
		Stdout:     stdoutW,
		Stderr:     stderrW,
		ExtraFiles: extra,
		Init:       true,
		LogLevel:   "4", // warnings and errors from libcontainer's init
	}
	j.create = time.Since(t0)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("jail %s: %w", id, err)
	}
	t1 := time.Now()
	if err := j.container.Run(j.proc); err != nil {
		return nil, fmt.Errorf("%w: start jail %s: %w", ErrNotLaunched, id, err)
	}
	j.start = time.Since(t1)
	// The jail holds its ends now; keep ours.
	closers = []*os.File{ctlInit, stdoutW, stderrW}
	if rchInit != nil {
		closers = append(closers, rchInit)
	}
	j.ctl, j.rch, j.stdoutR, j.stderrR = ctl, rch, stdoutR, stderrR
	if rch != nil {
		// The runner's first frame says its interpreter is up (with
		// the preload imported); until then a run would wait for
		// Python's start. Read exactly that frame: the run's reports
		// follow on the same channel (listen).
		j.warm = make(chan struct{})
		go func() {
			defer close(j.warm)
			ready, err := runner.ReadReady(runner.NewFrameReader(rch, runner.ReadyFrameBytes))
			if err != nil {
				r.log.Debug("runner not ready", "jail", id, "err", err)
			}
			r.notePreload(id, ready.PreloadFailed)
		}()
	}
	j.holdMounts()
	j.exited = make(chan struct{})
	go func() {
		j.state, _ = j.proc.Wait()
		close(j.exited)
	}()
	return j, nil
}

// holdMounts keeps the jail's mount namespace alive past its init, until
// teardown. When the last process of a mount namespace exits, the kernel
// unmounts the namespace's whole tree in that exit and waits there for an
// RCU grace period: the init's exit, which the run's answer waits for, took
// 0.6 ms longer so (strace of a prestarted print(1): 0.77 ms from the
// init's exit_group to its end, 0.15 ms with the namespace held). Held, the
// unmounting happens when teardown closes it, after the answer. Without it
// (the open failing) the jail works as before, only slower to end.
func (j *Jail) holdMounts() {
	pid, err := j.proc.Pid()
	if err == nil {
		j.mntns, err = os.Open(fmt.Sprintf("/proc/%d/ns/mnt", pid))
	}
	if err != nil {
		j.r.log.Debug("hold the jail's mount namespace", "jail", j.id, "err", err)
	}
}

// outputPipe is a pipe for a program's output: the jail's user owns it,
// so that the program may open /dev/stdout or /proc/self/fd/2 again as on
// any host.
func (r *Runner) outputPipe() (rd, wr *os.File, err error) {
	rd, wr, err = os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	uid, gid := r.JailHostID()
	if err := unix.Fchown(int(wr.Fd()), uid, gid); err != nil {
		rd.Close()
		wr.Close()
		return nil, nil, err
	}
	return rd, wr, nil
}

// notePreload logs the modules a jail's runner could not preload: as a
// warning the first time each module fails so (every jail of the shape
// would say it again, one per run), then at debug level.
func (r *Runner) notePreload(jail string, failed []runner.PreloadFailure) {
	for _, f := range failed {
		key := f.Module + "\x00" + f.Error
		r.preloadMu.Lock()
		seen := r.preloadSeen[key]
		if !seen && len(r.preloadSeen) < maxPreloadNotes {
			if r.preloadSeen == nil {
				r.preloadSeen = map[string]bool{}
			}
			r.preloadSeen[key] = true
		}
		r.preloadMu.Unlock()
		level := slog.LevelWarn
		if seen {
			level = slog.LevelDebug
		}
		r.log.Log(context.Background(), level, "a module of the preload list did not import; runs import it themselves",
			"jail", jail, "module", f.Module, "err", f.Error)
	}
}

// maxPreloadNotes bounds the preload failures a Runner remembers having
// logged as warnings.
const maxPreloadNotes = 256

// isWarm reports whether the jail's interpreter is up: its runner said it
// is ready (always true without a runner).
func (j *Jail) isWarm() bool {
	if j.warm == nil {
		return true
	}
	select {
	case <-j.warm:
		return true
	default:
		return false
	}
}

// alive reports whether the init is still waiting for its program.
func (j *Jail) alive() bool {
	select {
	case <-j.exited:
		return false
	default:
		return true
	}
}

// Close discards a jail that was never launched. It is a no-op after
// Launch.
func (j *Jail) Close() error {
	if !j.claim(false) {
		return nil
	}
	return j.discard()
}

// claim marks the jail used, and launched for Launch, and reports whether
// it was free.
func (j *Jail) claim(launch bool) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	free := !j.used
	j.used = true
	if free {
		j.launched = launch
	}
	return free
}

// wasLaunched reports whether Launch was called.
func (j *Jail) wasLaunched() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.launched
}

// memoryUsage is the memory the waiting jail holds now.
func (j *Jail) memoryUsage() (int64, error) { return j.cg.MemoryUsage() }

// claimed reports whether the jail was launched or closed.
func (j *Jail) claimed() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.used
}

// kill kills every process of the jail (the init too, should the cgroup
// kill fail) and waits until the init has exited.
func (j *Jail) kill() error {
	err := j.cg.Kill()
	if err != nil {
		_ = j.proc.Signal(unix.SIGKILL)
	}
	<-j.exited
	return err
}

func (j *Jail) discard() error {
	j.takeWork().Close()
	j.ctl.Close() // the init exits on its own (ExitNotLaunched)
	if j.rch != nil {
		j.rch.Close()
	}
	_ = j.kill()
	j.stdoutR.Close()
	j.stderrR.Close()
	return j.teardown()
}

// teardown removes the cgroup, then the container, and closes j.gone. The
// cgroup goes first so that it has one owner: libcontainer's own removal
// then finds nothing left. It runs once: a jail is launched or discarded,
// and a failed build is neither.
func (j *Jail) teardown() error {
	defer close(j.gone)
	if j.mntns != nil {
		j.mntns.Close() // the jail's mounts go now, off the run's path
	}
	var err error
	if derr := j.cg.Delete(); derr != nil {
		j.r.log.Error("delete jail cgroup", "jail", j.id, "err", derr)
		err = derr
	}
	if j.container != nil {
		if derr := j.container.Destroy(); derr != nil {
			j.r.log.Error("destroy jail", "jail", j.id, "err", derr)
			err = errors.Join(err, derr)
		}
	}
	return err
}

// Launch carries out spec in the jail and tears the jail down. spec must
// fit the jail (Spec.sameJail); its cgroup limits replace the jail's. An
// error wrapping ErrNotLaunched means the program never started. Cancelling
// ctx kills the run. A jail launches once; it is torn down afterwards
// whatever happens, after Launch returned (Runner.Wait waits for that).
func (j *Jail) Launch(ctx context.Context, spec *Spec, onOutput OutputFunc) (out *Outcome, err error) {
	if !j.claim(true) {
		return nil, fmt.Errorf("run %s: jail %s was used already", spec.ID, j.id)
	}
	return j.launch(ctx, spec, onOutput)
}

// launch carries out spec in three steps: hand the program over to the
// init, supervise it until it ends (or its time is up, or ctx is
// cancelled), and collect what it left. The jail is torn down afterwards
// whatever happens, in the background: the run's answer does not wait for
// the removal of its cgroup and container (3 to 5 ms, more when a
// successor is being built beside it), which nothing in the answer needs.
func (j *Jail) launch(ctx context.Context, spec *Spec, onOutput OutputFunc) (_ *Outcome, err error) {
	out := &Outcome{Phases: Phases{Create: j.create, Prestarted: j.prestarted}}
	if spec.Egress != nil {
		// The proxy's environment goes into a copy: the caller may try
		// the spec again in another jail.
		cp := *spec
		spec = &cp
	}
	if j.prestarted {
		// Built before the request: only the launch is the run's.
		out.Phases.Create = 0
	}
	t1 := time.Now()
	defer j.r.tearDownLater(j)
	// The drains own the read ends from here.
	defer j.stdoutR.Close()
	defer j.stderrR.Close()
	if j.rch != nil {
		defer j.rch.Close()
	}

	start, err := j.handOver(spec)
	if err != nil {
		j.ctl.Close()
		_ = j.kill()
		j.takeWork().Close()
		var fe *FileError
		if errors.As(err, &fe) {
			// Nothing ran, but another jail would fare no better.
			return nil, fmt.Errorf("run %s in jail %s: %w", spec.ID, j.id, err)
		}
		return nil, fmt.Errorf("%w: run %s in jail %s: %w", ErrNotLaunched, spec.ID, j.id, err)
	}
	out.Phases.Start = start.Sub(t1)
	if !j.prestarted {
		out.Phases.Start += j.start
	}
	streams := j.drain(spec.Limits.OutputBytes, onOutput)
	l := j.listen(spec, start)
	ended := j.supervise(ctx, spec, start, streams, l, out)
	if ended != nil && j.work != nil {
		// The run's answer came before its processes' end (see
		// supervise): its files are read once nothing can write them,
		// and none are when it left none, whatever a process of it
		// still alive might write.
		if j.work.Has(layout.OutDir) {
			if kerr := j.kill(); kerr != nil {
				j.r.log.Error("kill ended run", "run", spec.ID, "jail", j.id, "err", kerr)
			}
		} else {
			j.takeWork().Close()
		}
	}
	j.collect(spec, streams, ended, out)
	out.Runner, out.Phases.Handover = j.heard(spec, l)
	out.Work, out.WorkErr = j.takeWork(), j.workErr
	return out, nil
}

// report is what the runner reported, and when it said it started the
// code, counted from the init's answer.
type report struct {
	res      runner.Result
	handover time.Duration
}

// listener collects what a jail's runner reports.
type listener struct {
	// reports gets the report once the channel is over.
	reports chan report
	// over is closed when the channel has ended; exit is then the status
	// of the runner's last exit message, or nil.
	over chan struct{}
	exit *int
}

// listen sends the runner its program and collects what it reports until
// its channel closes, which it does at the latest when the jail's pid
// namespace is gone. It returns nil for a jail without a runner.
func (j *Jail) listen(spec *Spec, start time.Time) *listener {
	if j.rch == nil || spec.Runner == nil {
		return nil
	}
	l := &listener{reports: make(chan report, 1), over: make(chan struct{})}
	go func() {
		var rep report
		c := runner.NewCollector(spec.Runner.Limits)
		c.OnStarted = func() { rep.handover = time.Since(start) }
		// The socket is non-blocking for deadlines; the write may wait
		// for the runner to read, which it does as soon as it is ready.
		_ = j.rch.SetWriteDeadline(time.Now().Add(launchTimeout))
		if err := runner.WriteRun(j.rch, spec.runMessage()); err != nil {
			j.r.log.Warn("send the runner its program", "run", spec.ID, "jail", j.id, "err", err)
		}
		// Its ready frame is read by the jail's own reader (prepare).
		<-j.warm
		var tools *toolLink
		if t := spec.Runner.Tools; t != nil {
			tools = startToolLink(j.rch, t)
			c.OnToolCall = t.Call
		}
		if err := c.Collect(j.rch); err != nil {
			j.r.log.Debug("runner channel", "run", spec.ID, "jail", j.id, "err", err)
		}
		tools.stop()
		rep.res = c.Result()
		l.exit = rep.res.Exit
		close(l.over)
		l.reports <- rep
	}()
	return l
}

// heard waits for what the runner reported. The run is over, so its
// channel is closing; bound the wait anyway, as collect does for output.
func (j *Jail) heard(spec *Spec, l *listener) (*runner.Result, time.Duration) {
	if l == nil {
		return nil, 0
	}
	reports := l.reports
	var rep report
	select {
	case rep = <-reports:
	case <-time.After(5 * time.Second):
		j.rch.Close()
		rep = <-reports
	}
	for _, n := range rep.res.Notes {
		j.r.log.Debug("runner report", "run", spec.ID, "jail", j.id, "note", n)
	}
	return &rep.res, rep.handover
}

// handOver gives spec's program to the init and returns when it started;
// a spec with Egress gets its socket first, and the proxy's environment.
// An error means it never started: the caller kills the jail. An init
// that could not start it (AckFailed) is no error: it says why on stderr
// and exits ExitSetupFailed, which the run reports like any exit.
func (j *Jail) handOver(spec *Spec) (started time.Time, err error) {
	if err := spec.Validate(); err != nil {
		return time.Time{}, err
	}
	if !j.spec.sameJail(spec) {
		return time.Time{}, errors.New("the run needs a differently built jail")
	}
	ctl, err := j.awaitReady()
	if err != nil {
		return time.Time{}, err
	}
	if err := j.attachEgress(spec); err != nil {
		return time.Time{}, err
	}
	if spec.OpenWork && j.work == nil {
		// Before any code but the daemon's runs in the jail. Without it
		// the run goes on; what it leaves in /work/out cannot come back.
		j.workErr = j.openWork()
	}
	limits, err := j.limitRun(spec)
	if err != nil {
		return time.Time{}, err
	}
	if len(spec.Files) > 0 {
		// Under the run's limits, before its clock starts.
		if err := j.writeFiles(spec.Files); err != nil {
			return time.Time{}, err
		}
	}
	ack, err := j.send(ctl, spec)
	if err != nil {
		return time.Time{}, err
	}
	started = time.Now()
	if ack == jailinit.AckStarted && limits.Pids > 0 {
		j.exactTasksLimit(spec, limits)
	}
	return started, nil
}

// awaitReady waits for the init to say it is ready: from then on it is
// the jail's only process. It returns the reader its answer to the
// program will come by.
func (j *Jail) awaitReady() (*bufio.Reader, error) {
	_ = j.ctl.SetDeadline(time.Now().Add(launchTimeout))
	ctl := bufio.NewReader(j.ctl)
	if ready, err := ctl.ReadString('\n'); ready != jailinit.AckReady {
		return nil, fmt.Errorf("the init did not say it is ready: %q %v", ready, err)
	}
	return ctl, nil
}

// limitRun puts spec's limits on the cgroup of a jail whose init is ready
// and starts accounting, and returns the limits it set. The program's
// tasks limit goes on top of the init's threads (its Go runtime's, 5 or
// 6). The init may still start a thread or two while it starts the
// program (seen in fresh jails), so they get room now and the limit is
// made exact once the program runs (exactTasksLimit).
func (j *Jail) limitRun(spec *Spec) (cgroup.Limits, error) {
	limits := spec.Limits.cgroupLimits()
	if limits.Pids > 0 {
		initTasks, err := j.initThreads()
		if err != nil {
			return limits, err
		}
		limits.Pids += initTasks + initThreadRoom
	}
	if err := j.cg.Update(limits); err != nil {
		return limits, err
	}
	// The run's CPU time and memory peak are the program's, not the
	// jail's set-up, which ran in the same cgroup.
	if err := j.cg.StartAccounting(); err != nil {
		return limits, err
	}
	return limits, nil
}

// send hands the program over, closes our end of the launch socket and
// returns the init's answer: AckStarted or AckFailed. An init that died
// while it waited (or dies now) has started nothing, which is an error.
func (j *Jail) send(ctl *bufio.Reader, spec *Spec) (string, error) {
	msg, err := json.Marshal(spec.launch())
	if err != nil {
		return "", err
	}
	if _, err := j.ctl.Write(msg); err != nil {
		return "", fmt.Errorf("hand the program to the init: %w", err)
	}
	ack, err := ctl.ReadString('\n')
	j.ctl.Close()
	switch {
	case err != nil:
		return "", fmt.Errorf("the init did not answer: %w", err)
	case ack != jailinit.AckStarted && ack != jailinit.AckFailed:
		return "", fmt.Errorf("the init answered %q", ack)
	}
	return ack, nil
}

// streams are the program's stdout and stderr being drained.
type streams struct {
	stdout, stderr *cappedBuffer
	wg             sync.WaitGroup
	// done is closed when both drains have ended.
	done chan struct{}
}

// drain reads both streams while the program runs, keeping at most limit
// bytes of each and passing them to onOutput.
func (j *Jail) drain(limit int64, onOutput OutputFunc) *streams {
	return drainPipes(j.stdoutR, j.stderrR, limit, onOutput)
}

// drainPipes reads stdout and stderr to their ends, keeping at most limit
// bytes of each and passing them to onOutput.
func drainPipes(stdout, stderr io.Reader, limit int64, onOutput OutputFunc) *streams {
	s := &streams{stdout: newCappedBuffer(limit), stderr: newCappedBuffer(limit), done: make(chan struct{})}
	for _, st := range []struct {
		name string
		r    io.Reader
		buf  *cappedBuffer
	}{{"stdout", stdout, s.stdout}, {"stderr", stderr, s.stderr}} {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			st.buf.drain(st.r, st.name, onOutput)
		}()
	}
	go func() {
		s.wg.Wait()
		close(s.done)
	}()
	return s
}

// supervise waits until the program ends, its time (counted from start)
// is up or ctx is cancelled, and kills the run in the last two cases. It
// records which in out, with the program's duration.
//
// The program has ended when the jail's init has exited, or earlier, when
// the runner's channel has ended after an exit message and both output
// pipes have reached their end too: the runner closes its output and the
// channel right after that message, its last, and nothing else holds
// them (the init let go of its copies of the output when the program
// started; forked children close theirs of the channel). The message's
// status is returned then, and nil otherwise. The runner's process is
// still ending then: unmapping its memory and the init's exit took 1 to
// 2 ms of a 4 ms run, which the answer need not wait for; the jail is
// killed with the rest of its teardown, after the answer. A program that
// forges all of it can only end its own run, as exiting would; one that
// leaves the output or the channel open waits for the init as before.
func (j *Jail) supervise(ctx context.Context, spec *Spec, start time.Time, s *streams, l *listener, out *Outcome) *int {
	timer := time.NewTimer(spec.Limits.Timeout - time.Since(start))
	defer timer.Stop()
	var over, drained <-chan struct{}
	if l != nil {
		over = l.over
	}
wait:
	for {
		select {
		case <-j.exited:
			break wait
		case <-timer.C:
			out.TimedOut = true
			break wait
		case <-ctx.Done():
			out.Canceled = true
			break wait
		case <-over:
			over = nil
			if l.exit != nil {
				drained = s.done
			}
		case <-drained:
			out.Duration = time.Since(start)
			return l.exit
		}
	}
	if out.TimedOut || out.Canceled {
		// Kill the whole cgroup: every process of the run, however
		// detached, not just the init.
		if kerr := j.kill(); kerr != nil {
			j.r.log.Error("kill run", "run", spec.ID, "jail", j.id, "err", kerr)
		}
	}
	out.Duration = time.Since(start)
	return nil
}

// collect gathers what the ended run left into out: its output, exit
// status and the cgroup's statistics, read from the live cgroup: the init
// is gone, and with it every process of the run (the kernel kills a pid
// namespace's processes when its init exits; they used their CPU time
// before), or the program said it exits with status ended (see supervise).
func (j *Jail) collect(spec *Spec, s *streams, ended *int, out *Outcome) {
	tc := time.Now()
	// The init is gone, so the pid namespace is empty and every write end
	// of the pipes is closed: the drains end. Bound the wait anyway.
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		j.stdoutR.Close()
		j.stderrR.Close()
		<-s.done
	}
	out.Stdout, out.StdoutTruncated = s.stdout.bytes()
	out.Stderr, out.StderrTruncated = s.stderr.bytes()
	if ended != nil {
		out.ExitCode = *ended
	} else {
		out.ExitCode = exitCode(j.state) // the init has exited either way
	}

	st, serr := j.cg.Stats()
	if serr != nil {
		j.r.log.Warn("read run statistics", "run", spec.ID, "jail", j.id, "err", serr)
	}
	out.CPUTime = st.CPUTime
	out.MemoryPeak = st.MemoryPeakBytes
	out.OOMKilled = st.OOMKilled && !out.TimedOut
	out.Phases.Program = out.Duration
	out.Phases.Collect = time.Since(tc)
}

// exactTasksLimit lowers the tasks limit to the program's own on top of
// the init's threads and lateThreadRoom, now that the program has
// started. It counts the init's threads rather than the cgroup's tasks,
// which can be higher for a moment just then (seen under TCG on 6.12: two more tasks at the
// answer than the init kept). Python takes milliseconds to start and
// forks nothing before its program runs, well after this. Should it fail,
// the run keeps the limit with the init's room in it.
func (j *Jail) exactTasksLimit(spec *Spec, limits cgroup.Limits) {
	n, err := j.initThreads()
	if exact := spec.Limits.Pids + n + lateThreadRoom; err == nil && exact < limits.Pids {
		limits.Pids = exact
		err = j.cg.Update(limits)
	}
	if err != nil {
		j.r.log.Warn("set the program's tasks limit", "run", spec.ID, "jail", j.id, "err", err)
	}
}

// initThreads counts the threads of the jail's init.
func (j *Jail) initThreads() (int64, error) {
	pid, err := j.proc.Pid()
	if err != nil {
		return 0, err
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, fmt.Errorf("threads of the jail's init: %w", err)
	}
	return int64(len(tasks)), nil
}

// socketpair returns two connected stream sockets: the init's end (for
// descriptor 3) and ours, non-blocking so that it takes deadlines.
func socketpair() (theirs, ours *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	if err := unix.SetNonblock(fds[1], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, err
	}
	return os.NewFile(uintptr(fds[0]), "launch-init"), os.NewFile(uintptr(fds[1]), "launch"), nil
}
