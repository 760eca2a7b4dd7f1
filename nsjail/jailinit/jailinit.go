// Package jailinit is the tiny pid 1 of every jail. libcontainer executes it
// (as the unprivileged jail user, under seccomp) instead of Python because a
// pid-namespace init has special semantics that break ordinary programs: it
// ignores signals it has no handler for (so os.abort() or a self-kill would
// not end it) and it inherits every orphan (so double-forked daemons would
// pile up as zombies).
//
// The init is started before the run's program is known, so that a jail can
// be built ahead of a request (see nsjail.Pool). It:
//
//  1. in runner mode (cellblock-init --runner PYTHON ARG...), starts
//     PYTHON ARG... at once: the runner (package runner), which imports
//     what it needs and waits for its run on its own channel (descriptor 4
//     of the init, 3 of Python), while the init waits for the Launch,
//  2. says AckReady on file descriptor 3 (a socket to the daemon; nothing
//     the program inherits) and waits there for one Launch message,
//  3. otherwise writes the script into the working directory and starts
//     Python as its child with the message's argv and environment; in both
//     modes the program's standard input is the message's, and its stdout
//     and stderr are the jail's,
//  4. answers AckStarted (or AckFailed) on descriptor 3 and closes it,
//     and points its own stdout and stderr at /dev/null, so that the
//     output pipes end when the program's processes are done with them,
//  5. reaps every process that is reparented to it,
//  6. exits with Python's status: its exit code, or 128+N after signal N.
//
// A runner that dies before the Launch has run nothing: the init then
// exits ExitNotLaunched without answering, and the run goes to another
// jail.
//
// AckReady tells the daemon that the init is itself and idle: every task
// in the jail's cgroup is the init's, so the daemon can put the program's
// tasks limit on top of them. The answer to the Launch tells it that the
// program really started: an init that dies before answering has run
// nothing, and the run can be given to another jail.
//
// When it exits the kernel kills whatever is left in the pid namespace, so
// no process of the run outlives it. It must stay cgo-free and statically
// linked (it runs inside the jail's rootfs), print nothing on success, and
// never log: its stdout and stderr belong to the program.
package jailinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
)

// LaunchFD is the descriptor the Launch message arrives on and the answer
// leaves by.
const LaunchFD = 3

// In runner mode the init gets the runner's channel as RunnerFD and hands
// it to Python as RunnerChildFD, named in Python's environment by
// RunnerFDEnv.
const (
	RunnerFD      = 4
	RunnerChildFD = 3
	RunnerFDEnv   = "CELLBLOCK_RUNNER_FD"
)

// RunnerFlag starts the init in runner mode: cellblock-init --runner
// PYTHON ARG...
const RunnerFlag = "--runner"

// What the init says on LaunchFD, each one line: AckReady while it waits,
// then one answer to the Launch message.
const (
	AckReady   = "ready\n"   // waiting for a Launch, with every task it needs
	AckStarted = "started\n" // the program is running
	AckFailed  = "failed\n"  // it could not be started; see stderr and ExitSetupFailed
)

// MaxLaunchBytes bounds the encoded Launch message the init reads.
const MaxLaunchBytes = 256 << 20

// Exit codes of the init itself, chosen to be unlike any code Python uses.
const (
	// ExitSetupFailed: the message was bad or Python could not be started.
	ExitSetupFailed = 126
	// ExitNotLaunched: the daemon closed the descriptor without a message,
	// which is how it discards a jail it built ahead of time.
	ExitNotLaunched = 125
)

// Launch is what the daemon sends to start a run's program. In runner
// mode only Stdin is used: the program goes to the runner itself.
type Launch struct {
	// ScriptPath is the absolute path the script is written to.
	ScriptPath string `json:"script_path"`
	// Script is the program's source.
	Script []byte `json:"script"`
	// Argv is the program's command line; Argv[0] is the interpreter's
	// absolute path.
	Argv []string `json:"argv"`
	// Env is the program's whole environment.
	Env []string `json:"env"`
	// Stdin is the program's standard input; nil leaves the init's own
	// (/dev/null).
	Stdin []byte `json:"stdin,omitempty"`
}

// Main runs the init with its arguments (none, or RunnerFlag and the
// runner's command line) and returns the exit code.
func Main(args []string) int {
	var runner []string
	switch {
	case len(args) == 0:
	case args[0] == RunnerFlag && len(args) > 1 && filepath.IsAbs(args[1]):
		runner = args[1:]
	default:
		fmt.Fprintln(os.Stderr, "cellblock-init: takes no arguments, or --runner /path/to/python ARG...; the run arrives on descriptor 3")
		return ExitSetupFailed
	}
	// Not dumpable, before anything else: the program runs as the same
	// uid, and a dumpable pid 1 would let it write the init's code through
	// /proc/1/mem, read /proc/1/environ or take /proc/1/fd/*, which are
	// ptrace access by another route. Exec made the init dumpable again.
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0); errno != 0 {
		fmt.Fprintf(os.Stderr, "cellblock-init: prctl(PR_SET_DUMPABLE, 0): %v\n", errno)
		return ExitSetupFailed
	}
	// Non-blocking, so that waiting on it parks a goroutine instead of
	// blocking a thread, which would make the runtime start another: the
	// init's threads count against the jail's tasks limit.
	_ = syscall.SetNonblock(LaunchFD, true)
	ctl := os.NewFile(LaunchFD, "launch")
	if ctl == nil {
		fmt.Fprintln(os.Stderr, "cellblock-init: no launch descriptor")
		return ExitSetupFailed
	}
	// The descriptor came through exec; the program must not inherit it.
	syscall.CloseOnExec(LaunchFD)
	// Forward the polite signals to the program; SIGKILL from outside
	// (the cgroup kill) needs no forwarding. Set up while the jail waits,
	// as it costs a millisecond or two.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	// SIGCHLD, asked for before any fork so that no death goes unseen:
	// the init reaps when told to, never in a blocking wait4 (see reap).
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	var pid int
	var code int
	if runner != nil {
		pid, code = runRunner(ctl, runner, chld)
	} else {
		pid, code = runProgram(ctl)
	}
	if pid == 0 {
		return code
	}
	_, _ = io.WriteString(ctl, AckStarted)
	ctl.Close()
	releaseOutput()
	go func() {
		for s := range sigs {
			_ = syscall.Kill(pid, s.(syscall.Signal))
		}
	}()
	for {
		if code, done := reap(pid); done {
			return code
		}
		<-chld
	}
}

// releaseOutput points the init's standard output and error, the run's
// output pipes, at /dev/null once the program has them: the pipes then end
// when the program's processes are done with them, which the daemon can
// take as the end of the run's output (the runner's exit message) without
// waiting for the init's own exit. The init writes nothing after the
// program started.
func releaseOutput() {
	null, err := syscall.Open("/dev/null", syscall.O_WRONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	_ = syscall.Dup3(null, 1, 0)
	_ = syscall.Dup3(null, 2, 0)
	syscall.Close(null)
}

// reap reaps every child that has ended, without blocking, and says
// whether the program was one of them, with the init's exit code. It
// never blocks in wait4: a thread blocked in a system call makes the Go
// runtime start another one for its other goroutines, and the daemon
// counts the init's threads when the program starts to set the jail's
// tasks limit on top of them. A thread started later would take one of
// the program's tasks (seen in CI: a fork under pids 2 failed at once).
func reap(pid int) (int, bool) {
	for {
		var ws syscall.WaitStatus
		wpid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			// ECHILD: nothing left, which cannot happen before the
			// program itself was reaped.
			return ExitSetupFailed, true
		case wpid == 0:
			return 0, false
		case wpid != pid:
			continue // an orphan: reaped, nothing more to do
		case ws.Exited():
			return ws.ExitStatus(), true
		case ws.Signaled():
			return 128 + int(ws.Signal()), true
		}
	}
}

// failed reports a launch that could not start the program: on stderr
// (the program's, which the daemon returns) and as AckFailed.
func failed(ctl *os.File, err error) int {
	fmt.Fprintf(os.Stderr, "cellblock-init: %v\n", err)
	_, _ = io.WriteString(ctl, AckFailed)
	ctl.Close()
	return ExitSetupFailed
}

// runProgram waits for the Launch and starts its program: the script
// planted, Python started with the message's argv and environment. It
// returns the program's pid, or 0 and the init's exit code.
func runProgram(ctl *os.File) (int, int) {
	// A daemon that is gone shows as EOF below.
	_, _ = io.WriteString(ctl, AckReady)
	l, err := receive(ctl)
	if errors.Is(err, io.EOF) {
		return 0, ExitNotLaunched
	}
	if err == nil {
		err = l.checkProgram()
	}
	if err == nil {
		err = plantScript(l.ScriptPath, l.Script)
	}
	if err != nil {
		return 0, failed(ctl, err)
	}
	stdin, err := stdinFor(l.Stdin)
	if err != nil {
		return 0, failed(ctl, err)
	}
	pid, err := syscall.ForkExec(l.Argv[0], l.Argv, &syscall.ProcAttr{
		Env:   l.Env,
		Files: []uintptr{stdin.Fd(), 1, 2},
	})
	if stdin != os.Stdin {
		stdin.Close()
	}
	if err != nil {
		return 0, failed(ctl, fmt.Errorf("start %s: %w", l.Argv[0], err))
	}
	return pid, 0
}

// runRunner starts the runner (argv, with the init's own environment and
// the channel on RunnerChildFD) before the Launch, then waits for the
// Launch, which brings only the program's standard input: the program
// itself goes to the runner over its channel. A runner that dies first
// has run nothing (ExitNotLaunched). It returns the runner's pid, or 0
// and the init's exit code.
func runRunner(ctl *os.File, argv []string, chld <-chan os.Signal) (int, int) {
	// Python's standard input is a pipe from the start; its data comes
	// with the Launch.
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return 0, failed(ctl, fmt.Errorf("stdin pipe: %w", err))
	}
	// Came through exec: only its copy as RunnerChildFD may reach Python.
	syscall.CloseOnExec(RunnerFD)
	env := append(os.Environ(), fmt.Sprintf("%s=%d", RunnerFDEnv, RunnerChildFD))
	pid, err := syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{
		Env:   env,
		Files: []uintptr{stdinR.Fd(), 1, 2, RunnerFD},
	})
	stdinR.Close()
	// Only the runner holds the jail's end of its channel from here.
	syscall.Close(RunnerFD)
	if err != nil {
		stdinW.Close()
		return 0, failed(ctl, fmt.Errorf("start %s: %w", argv[0], err))
	}
	launched := make(chan error, 1)
	var l *Launch
	go func() {
		var err error
		l, err = receive(ctl)
		launched <- err
	}()
	_, _ = io.WriteString(ctl, AckReady)
	for {
		select {
		case err := <-launched:
			if err != nil {
				stdinW.Close()
				syscall.Kill(pid, syscall.SIGKILL)
				if errors.Is(err, io.EOF) {
					return 0, ExitNotLaunched
				}
				return 0, failed(ctl, err)
			}
			go func() {
				// As for a program's stdin: EPIPE if it stops reading.
				_, _ = stdinW.Write(l.Stdin)
				stdinW.Close()
			}()
			return pid, 0
		case <-chld:
			var ws syscall.WaitStatus
			if wpid, _ := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); wpid == pid {
				// Nothing ran: say so on stderr and exit; the daemon
				// sees the init gone before it answered.
				fmt.Fprintf(os.Stderr, "cellblock-init: the runner exited before its run (%v)\n", describe(ws))
				return 0, ExitNotLaunched
			}
		}
	}
}

// describe says how a process ended.
func describe(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return "signal " + ws.Signal().String()
	}
	return fmt.Sprintf("exit status %d", ws.ExitStatus())
}

// receive reads the Launch message from f. It returns io.EOF when the
// daemon closed f without a message.
func receive(f *os.File) (*Launch, error) {
	var l Launch
	if err := json.NewDecoder(io.LimitReader(f, MaxLaunchBytes)).Decode(&l); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		return nil, fmt.Errorf("read launch message: %w", err)
	}
	return &l, nil
}

// checkProgram checks what a Launch needs outside runner mode: where the
// script goes and what to start.
func (l *Launch) checkProgram() error {
	switch {
	case !filepath.IsAbs(l.ScriptPath):
		return fmt.Errorf("script path %q is not absolute", l.ScriptPath)
	case len(l.Argv) == 0 || !filepath.IsAbs(l.Argv[0]):
		return fmt.Errorf("argv %q does not start with an absolute path", l.Argv)
	}
	return nil
}

// plantScript writes the script to path, which must not exist yet.
func plantScript(path string, script []byte) error {
	dst, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("create script: %w", err)
	}
	if _, err := dst.Write(script); err != nil {
		dst.Close()
		return fmt.Errorf("write script: %w", err)
	}
	return dst.Close()
}

// stdinFor returns the program's standard input: the init's own (/dev/null)
// for nil, else the read end of a pipe that a goroutine fills with data and
// then closes. The caller closes what it gets unless it is os.Stdin.
func stdinFor(data []byte) (*os.File, error) {
	if data == nil {
		return os.Stdin, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("stdin pipe: %w", err)
	}
	go func() {
		// A program that stops reading early gets EPIPE here, not a
		// signal: Go ignores SIGPIPE on descriptors other than 1 and 2.
		_, _ = w.Write(data)
		w.Close()
	}()
	return r, nil
}
