// Package jailinit is the tiny pid 1 of every jail. libcontainer executes it
// (as the unprivileged jail user, under seccomp) instead of Python because a
// pid-namespace init has special semantics that break ordinary programs: it
// ignores signals it has no handler for (so os.abort() or a self-kill would
// not end it) and it inherits every orphan (so double-forked daemons would
// pile up as zombies). The init:
//
//  1. copies the script from file descriptor 3 into the working directory,
//  2. starts Python as its child with the same stdio and environment,
//  3. reaps every process that is reparented to it,
//  4. exits with Python's status: its exit code, or 128+N after signal N.
//
// When it exits the kernel kills whatever is left in the pid namespace, so
// no process of the run outlives it. It must stay cgo-free and statically
// linked (it runs inside the jail's rootfs), print nothing on success, and
// never log: its stdout and stderr belong to the program.
package jailinit

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
)

// ScriptFD is the descriptor that carries the script into the jail.
const ScriptFD = 3

// ExitSetupFailed is the init's exit code when it cannot start Python. It
// is chosen to be unlike any code Python itself uses.
const ExitSetupFailed = 126

// Main runs the init with args: SCRIPT-PATH PROGRAM [ARGS...]. It returns the
// exit code.
func Main(args []string) int {
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "cellblock-init: usage: cellblock-init SCRIPT-PATH PROGRAM [ARGS...]")
		return ExitSetupFailed
	}
	if err := plantScript(args[0]); err != nil {
		fmt.Fprintf(os.Stderr, "cellblock-init: %v\n", err)
		return ExitSetupFailed
	}
	// Forward the polite signals to the program; SIGKILL from outside
	// (the cgroup kill) needs no forwarding.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)

	pid, err := syscall.ForkExec(args[1], args[1:], &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Setpgid: false},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "cellblock-init: start %s: %v\n", args[1], err)
		return ExitSetupFailed
	}
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

// plantScript copies the script from ScriptFD to path and closes the
// descriptor so that the program does not inherit it.
func plantScript(path string) error {
	src := os.NewFile(ScriptFD, "script")
	if src == nil {
		return errors.New("no script descriptor")
	}
	defer src.Close()
	if !filepath.IsAbs(path) {
		return fmt.Errorf("script path %q is not absolute", path)
	}
	dst, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("create script: %w", err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return fmt.Errorf("write script: %w", err)
	}
	return dst.Close()
}
