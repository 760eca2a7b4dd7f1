package nsjail

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellblock/cellblock/nsjail/runner"
)

// ErrSessionLost is returned by Session.Run once the session's interpreter
// has died (or had to be killed): its state is gone.
var ErrSessionLost = errors.New("session lost its interpreter")

// Session timings.
const (
	// InterruptGrace is how long a timed-out or cancelled run in a session
	// has, after its KeyboardInterrupt, to end before the session is
	// killed.
	InterruptGrace = 2 * time.Second
	// sessionOutputGrace bounds the wait for a run's output after its
	// done: a process it left running may hold the pipes open.
	sessionOutputGrace = 500 * time.Millisecond
	// sessionFrames is how many of the runner's frames wait for a reader
	// while a run is awaited: each up to the run's frame_bytes, so the
	// daemon holds at most this many of them per session.
	sessionFrames = 4
)

// Session is a jail whose runner stays alive between runs, keeping its
// interpreter's state (runner/PROTOCOL.md, "Sessions"). Runs in it are
// carried out one at a time; each gets its own stdin, stdout and stderr,
// passed to the runner with the run. It owns its jail until Close.
type Session struct {
	j      *Jail
	limits runner.Limits
	frames chan []byte // the runner's frames; closed when the channel ends

	mu   sync.Mutex // one Run at a time
	seq  int64
	lost chan struct{}
	once sync.Once
	// waiting is set while someone awaits the runner's frames (the
	// session's set-up, a run); frames that come at other times (a thread
	// an earlier run left, a program flooding the channel between runs)
	// are read and dropped, never queued.
	waiting atomic.Bool

	vmu      sync.Mutex
	vars     []runner.Variable
	varsMore bool
}

// SessionRun is one run in a session: the code and what the run alone
// sets. Everything else (interpreter, environment, memory, tasks, CPU,
// tmp size) is the session's, fixed when it was opened.
type SessionRun struct {
	ID   string
	Mode string
	Code string
	// Filename is shown in tracebacks; "<cell N>" when empty, N the
	// run's number in the session. Each run needs its own: tracebacks
	// find a frame's source line by it, and a function defined in an
	// earlier run shows that run's lines.
	Filename string
	Inputs   map[string]json.RawMessage
	Stdin    []byte
	// Timeout is the run's wall-clock limit; OutputBytes caps each of its
	// streams.
	Timeout     time.Duration
	OutputBytes int64
	// Tools, when set, relays the run's tool calls (see RunnerSpec).
	Tools ToolRelay
}

// OpenSession starts session mode in j, a prestarted jail built for spec,
// or, when j is nil, in a jail built for it now. spec must have a runner;
// its program fields (script, args, stdin, inputs) are not used. The
// session's limits are spec's.
func (r *Runner) OpenSession(ctx context.Context, j *Jail, spec *Spec) (_ *Session, err error) {
	if spec.Runner == nil {
		return nil, fmt.Errorf("%w: a session needs the runner", ErrInvalidSpec)
	}
	if j == nil {
		if j, err = r.prepare(ctx, spec.ID, spec, false); err != nil {
			return nil, err
		}
	}
	if !j.claim(true) {
		return nil, fmt.Errorf("session %s: jail %s was used already", spec.ID, j.id)
	}
	if j.pool != nil {
		// A session keeps its jail for long: its pool builds the next one
		// now, not when this one's init exits.
		j.pool.wake()
	}
	s := &Session{j: j, limits: spec.Runner.Limits, frames: make(chan []byte, sessionFrames), lost: make(chan struct{})}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	open := *spec
	open.Stdin = nil
	if _, err := j.handOver(&open); err != nil {
		var fe *FileError
		if errors.As(err, &fe) {
			return nil, fmt.Errorf("session %s in jail %s: %w", spec.ID, j.id, err)
		}
		return nil, fmt.Errorf("%w: session %s in jail %s: %w", ErrNotLaunched, spec.ID, j.id, err)
	}
	// Between runs the runner's descriptors 0 to 2 are /dev/null; what
	// still comes on the jail's own pipes (the init's, a crash's last
	// words) is not a run's.
	go func() { _, _ = io.Copy(io.Discard, j.stdoutR) }()
	go func() { _, _ = io.Copy(io.Discard, j.stderrR) }()
	select {
	case <-j.warm:
	case <-j.exited:
		return nil, fmt.Errorf("%w: session %s: the interpreter exited before it was ready", ErrNotLaunched, spec.ID)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	msg := open.runMessage() // with the proxy's environment, if any
	frame, err := runner.EncodeSession(runner.SessionStart{Env: msg.Env, Limits: s.limits})
	if err != nil {
		return nil, err
	}
	_ = j.rch.SetWriteDeadline(time.Now().Add(launchTimeout))
	if _, err := j.rch.Write(frame); err != nil {
		return nil, fmt.Errorf("session %s: send the session message: %w", spec.ID, err)
	}
	s.waiting.Store(true)
	defer s.waiting.Store(false)
	go s.read()
	go func() {
		<-j.exited
		s.markLost()
	}()
	timer := time.NewTimer(launchTimeout)
	defer timer.Stop()
	for {
		select {
		case p, ok := <-s.frames:
			if !ok {
				return nil, fmt.Errorf("%w: session %s: the channel ended before the session was ready", ErrNotLaunched, spec.ID)
			}
			if t, _ := runner.MessageType(p); t == runner.TypeIdle {
				return s, nil
			}
		case <-s.lost:
			return nil, fmt.Errorf("%w: session %s: the interpreter exited before it was ready", ErrNotLaunched, spec.ID)
		case <-timer.C:
			return nil, fmt.Errorf("%w: session %s: the interpreter did not get ready in %v", ErrNotLaunched, spec.ID, launchTimeout)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// read passes the runner's frames to s.frames until the channel ends,
// while someone waits for them (s.waiting); it drops the others. When
// sessionFrames are queued it holds the runner's writes until the run's
// reader takes them: a program flooding the channel stalls only itself,
// and the daemon holds a bounded number of its frames.
func (s *Session) read() {
	defer close(s.frames)
	f := runner.NewFrameReader(s.j.rch, s.limits.FrameBytes)
	for {
		p, err := f.Next()
		switch {
		case err == nil && !s.waiting.Load():
		case err == nil:
			// Next reuses its buffer: the frame waits in a copy.
			select {
			case s.frames <- append([]byte(nil), p...):
			case <-s.lost:
				return
			}
		case errors.Is(err, runner.ErrFrameTooLarge):
		default:
			return
		}
	}
}

// markLost records that the interpreter is gone (or must go).
func (s *Session) markLost() { s.once.Do(func() { close(s.lost) }) }

// Lost reports whether the session's interpreter is gone.
func (s *Session) Lost() bool {
	select {
	case <-s.lost:
		return true
	default:
		return false
	}
}

// ID names the session's jail.
func (s *Session) ID() string { return s.j.id }

// Variables returns the globals the session's code defined, as of its
// last run, and whether there were more than reported.
func (s *Session) Variables() ([]runner.Variable, bool) {
	s.vmu.Lock()
	defer s.vmu.Unlock()
	return append([]runner.Variable(nil), s.vars...), s.varsMore
}

// MemoryUsage is the memory the session's processes hold now.
func (s *Session) MemoryUsage() int64 {
	n, err := s.j.cg.MemoryUsage()
	if err != nil {
		return 0
	}
	return n
}

// Close ends the session: it kills the jail's processes and tears the
// jail down, after the call returns (Runner.Wait waits for it). A run in
// progress ends as lost.
func (s *Session) Close() {
	s.kill()
	s.j.work.Close() // Work's clones read on
	for _, f := range []*os.File{s.j.rch, s.j.ctl, s.j.stdoutR, s.j.stderrR} {
		f.Close()
	}
	s.j.r.tearDownLater(s.j)
}

// Run carries out run in the session. An error wrapping ErrSessionLost
// means the session had lost its interpreter before; an outcome with Lost
// set that it lost it during this run (killed after a timeout it did not
// survive, out of memory, a crash, os._exit).
func (s *Session) Run(ctx context.Context, run *SessionRun, onOutput OutputFunc) (*Outcome, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Lost() {
		return nil, ErrSessionLost
	}
	j := s.j
	out := &Outcome{Phases: Phases{Prestarted: true}}
	t0 := time.Now()
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("run %s: stdin pipe: %w", run.ID, err)
	}
	stdoutR, stdoutW, err := j.r.outputPipe()
	if err != nil {
		stdinR.Close()
		stdinW.Close()
		return nil, fmt.Errorf("run %s: stdout pipe: %w", run.ID, err)
	}
	stderrR, stderrW, err := j.r.outputPipe()
	if err != nil {
		for _, f := range []*os.File{stdinR, stdinW, stdoutR, stdoutW} {
			f.Close()
		}
		return nil, fmt.Errorf("run %s: stderr pipe: %w", run.ID, err)
	}
	defer stdoutR.Close()
	defer stderrR.Close()
	before, _ := j.cg.Stats()
	if err := j.cg.StartAccounting(); err != nil {
		j.r.log.Warn("start accounting of a session run", "run", run.ID, "jail", j.id, "err", err)
	}
	s.seq++
	seq := s.seq
	s.waiting.Store(true)
	defer s.waiting.Store(false)
	filename := run.Filename
	if filename == "" {
		filename = fmt.Sprintf("<cell %d>", seq)
	}
	msg := runner.SessionRun{Seq: seq, Mode: run.Mode, Code: run.Code, Filename: filename, Inputs: run.Inputs, Limits: s.limits}
	if run.Tools != nil {
		tools, limits := run.Tools.Declared()
		msg.Tools, msg.ToolLimits = tools, &limits
	}
	frame, err := runner.EncodeSessionRun(msg)
	if err == nil {
		err = s.send(frame, stdinR, stdoutW, stderrW)
	}
	stdinR.Close()
	stdoutW.Close()
	stderrW.Close()
	if err != nil {
		stdinW.Close()
		// The channel is unusable: so is the session.
		s.kill()
		return nil, fmt.Errorf("%w: run %s: %w", ErrSessionLost, run.ID, err)
	}
	go func() {
		defer stdinW.Close()
		_, _ = stdinW.Write(run.Stdin)
	}()
	start := time.Now()
	out.Phases.Start = start.Sub(t0)
	streams := drainPipes(stdoutR, stderrR, run.OutputBytes, onOutput)

	c := runner.NewCollector(s.limits)
	c.OnStarted = func() { out.Phases.Handover = time.Since(start) }
	var tools *toolLink
	if run.Tools != nil {
		tools = startToolLink(j.rch, run.Tools)
		c.OnToolCall = run.Tools.Call
	}
	done := s.await(ctx, seq, c, run.Timeout, start, out)
	if tools.stop() && done {
		// A tool_result frame may have been cut short: the runner's
		// channel can no longer be read in step.
		s.kill()
		done = false
	}
	out.Duration = time.Since(start)
	out.Phases.Program = out.Duration

	tc := time.Now()
	select {
	case <-streams.done:
	case <-time.After(sessionOutputGrace):
		// A process the run left behind holds the pipes: its output
		// after the run is not the run's.
		stdoutR.Close()
		stderrR.Close()
		<-streams.done
	}
	out.Stdout, out.StdoutTruncated = streams.stdout.bytes()
	out.Stderr, out.StderrTruncated = streams.stderr.bytes()
	res := c.Result()
	out.Runner = &res
	if st, err := j.cg.Stats(); err == nil {
		out.CPUTime = st.CPUTime
		out.MemoryPeak = st.MemoryPeakBytes
		out.OOMKilled = st.OOMKilled && !before.OOMKilled && !out.TimedOut
	}
	switch {
	case done && res.ExitCode != nil:
		out.ExitCode = *res.ExitCode
	case out.OOMKilled:
		out.ExitCode = 128 + int(unix.SIGKILL)
	default:
		<-j.exited
		out.ExitCode = exitCode(j.state)
	}
	if !done {
		out.Lost = true
	}
	out.Phases.Collect = time.Since(tc)
	return out, nil
}

// send writes frame on the runner's channel with the run's descriptors.
func (s *Session) send(frame []byte, fds ...*os.File) error {
	rights := make([]int, len(fds))
	for i, f := range fds {
		rights[i] = int(f.Fd())
	}
	oob := unix.UnixRights(rights...)
	raw, err := s.j.rch.SyscallConn()
	if err != nil {
		return err
	}
	_ = s.j.rch.SetWriteDeadline(time.Now().Add(launchTimeout))
	var serr error
	werr := raw.Write(func(fd uintptr) bool {
		for len(frame) > 0 {
			var n int
			n, serr = unix.SendmsgN(int(fd), frame, oob, nil, unix.MSG_NOSIGNAL)
			if serr == unix.EAGAIN {
				serr = nil
				return false // wait until writable
			}
			if serr != nil {
				return true
			}
			frame, oob = frame[n:], nil // the descriptors go with the first byte
		}
		return true
	})
	if werr != nil {
		return werr
	}
	return serr
}

// await waits for run seq's done (true), its time, ctx, or the
// interpreter's death, handing the runner's frames of the run to c. A run
// out of time or cancelled is interrupted (SIGINT, which the init passes
// on: KeyboardInterrupt in the code's main thread) and gets
// InterruptGrace to end; after that, or when the interpreter died or its
// channel ended, the session is killed and lost (false).
func (s *Session) await(ctx context.Context, seq int64, c *runner.Collector, timeout time.Duration, start time.Time, out *Outcome) bool {
	timer := time.NewTimer(timeout - time.Since(start))
	defer timer.Stop()
	var grace <-chan time.Time
	started := false
	interrupt := func() {
		if grace != nil {
			return
		}
		_ = s.j.proc.Signal(unix.SIGINT)
		grace = time.After(InterruptGrace)
	}
	for {
		select {
		case p, ok := <-s.frames:
			if !ok {
				// The channel ended: the interpreter is gone or going
				// (os._exit, a crash); its init exits with its status.
				select {
				case <-s.j.exited:
				case <-time.After(sessionOutputGrace):
				}
				s.kill()
				return false
			}
			t, err := runner.MessageType(p)
			if err != nil {
				continue
			}
			if !started {
				// Frames of an earlier run (a thread it left) are not
				// this one's.
				if n, ok := runner.Seq(p); t == runner.TypeStarted && ok && n == seq {
					started = true
					c.Handle(p)
				}
				continue
			}
			switch t {
			case runner.TypeVars:
				if n, ok := runner.Seq(p); ok && n == seq {
					if vars, more, err := runner.ParseVars(p); err == nil {
						s.vmu.Lock()
						s.vars, s.varsMore = vars, more
						s.vmu.Unlock()
					}
				}
			case runner.TypeDone:
				c.Handle(p)
				return true
			default:
				c.Handle(p)
			}
		case <-timer.C:
			out.TimedOut = true
			interrupt()
		case <-ctx.Done():
			out.Canceled = true
			interrupt()
			ctx = context.Background() // once
		case <-grace:
			s.kill()
			return false
		case <-s.lost:
			s.kill()
			return false
		}
	}
}

// kill kills the session's processes and marks it lost; the jail stays
// until Close.
func (s *Session) kill() {
	s.markLost()
	if err := s.j.cg.Kill(); err != nil {
		_ = s.j.proc.Signal(unix.SIGKILL)
	}
	<-s.j.exited
}
