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
//  1. says AckReady on file descriptor 3 (a socket to the daemon; nothing
//     the program inherits) and waits there for one Launch message,
//  2. writes the script into the working directory,
//  3. starts Python as its child with the message's argv, environment and
//     standard input, and the jail's stdout and stderr,
//  4. answers AckStarted (or AckFailed) on descriptor 3 and closes it,
//  5. reaps every process that is reparented to it,
//  6. exits with Python's status: its exit code, or 128+N after signal N.
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

// Launch is what the daemon sends to start a run's program.
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

// Main runs the init. It takes no arguments and returns the exit code.
func Main(args []string) int {
	if len(args) != 0 {
		fmt.Fprintln(os.Stderr, "cellblock-init: takes no arguments; the run arrives on descriptor 3")
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
	// A daemon that is gone shows as EOF below.
	_, _ = io.WriteString(ctl, AckReady)
	l, err := receive(ctl)
	if errors.Is(err, io.EOF) {
		return ExitNotLaunched
	}
	failed := func(err error) int {
		fmt.Fprintf(os.Stderr, "cellblock-init: %v\n", err)
		_, _ = io.WriteString(ctl, AckFailed)
		ctl.Close()
		return ExitSetupFailed
	}
	if err == nil {
		err = plantScript(l.ScriptPath, l.Script)
	}
	if err != nil {
		return failed(err)
	}
	stdin, err := stdinFor(l.Stdin)
	if err != nil {
		return failed(err)
	}
	pid, err := syscall.ForkExec(l.Argv[0], l.Argv, &syscall.ProcAttr{
		Env:   l.Env,
		Files: []uintptr{stdin.Fd(), 1, 2},
	})
	if stdin != os.Stdin {
		stdin.Close()
	}
	if err != nil {
		return failed(fmt.Errorf("start %s: %w", l.Argv[0], err))
	}
	_, _ = io.WriteString(ctl, AckStarted)
	ctl.Close()
	go func() {
		for s := range sigs {
			_ = syscall.Kill(pid, s.(syscall.Signal))
		}
	}()
	for {
		var ws syscall.WaitStatus
		wpid, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			// ECHILD: nothing left, which cannot happen before the
			// program itself was reaped.
			return ExitSetupFailed
		}
		if wpid != pid {
			continue // an orphan: reaped, nothing more to do
		}
		switch {
		case ws.Exited():
			return ws.ExitStatus()
		case ws.Signaled():
			return 128 + int(ws.Signal())
		}
	}
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
	switch {
	case !filepath.IsAbs(l.ScriptPath):
		return nil, fmt.Errorf("script path %q is not absolute", l.ScriptPath)
	case len(l.Argv) == 0 || !filepath.IsAbs(l.Argv[0]):
		return nil, fmt.Errorf("argv %q does not start with an absolute path", l.Argv)
	}
	return &l, nil
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
