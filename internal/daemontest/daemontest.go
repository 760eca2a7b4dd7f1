// Package daemontest starts a real cellblockd and stops it again, for the
// programs that drive one from outside: the root integration suite, the
// benchmark and the cgroup v2 VM guest. It owns the daemon's process: its
// command line, its log file, the wait until it is ready (its sd_notify
// READY=1, on a notify socket of its own) and its SIGTERM and exit.
//
// What it must not do: import package testing (the benchmark and the VM
// guest are programs), cgo or libcontainer (the VM guest is a static
// CGO_ENABLED=0 binary), or decide what a caller checks about the daemon:
// it returns errors and the caller reports them its own way.
package daemontest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cellblock/cellblock/internal/client"
)

// notifySocketEnv names the variable that tells the daemon where to send
// its sd_notify messages.
const notifySocketEnv = "NOTIFY_SOCKET"

// Config says how to start one daemon.
type Config struct {
	// Binary is the path of cellblockd.
	Binary string
	// Socket is where the daemon's API is reached. It is passed as
	// --socket unless Args hold one (then the daemon serves a socket
	// handed to it, e.g. by Prefix).
	Socket string
	// Args are further flags; --log-format json is always given.
	Args []string
	// LogPath is the file that gets the daemon's stdout and stderr.
	LogPath string
	// Prefix, if set, is a command that starts the daemon (it must exec
	// it, so that signals reach the daemon).
	Prefix []string
	// Env is added to the daemon's environment. Unless it sets
	// NOTIFY_SOCKET (then the caller reads the notifications and
	// WaitReady cannot be used), the daemon notifies a socket at Socket
	// plus ".notify".
	Env []string
	// SysProcAttr, if set, is given to the daemon's process (for
	// instance to start it in a cgroup of its own).
	SysProcAttr *syscall.SysProcAttr
}

// Daemon is a running cellblockd.
type Daemon struct {
	// Cmd is the daemon's process (or Prefix's, which becomes the
	// daemon's).
	Cmd *exec.Cmd
	// Client talks to the daemon's API on Socket.
	Client *client.Client
	// Socket is Config.Socket.
	Socket string
	// LogPath is Config.LogPath.
	LogPath string

	notify  *net.UnixConn // nil when the caller owns the notify socket
	ready   chan struct{} // closed on READY=1
	done    chan struct{} // closed when the process has exited
	exitErr error         // the process's exit; set before done closes
}

// Launch starts the daemon and returns without waiting for it.
func Launch(cfg Config) (*Daemon, error) {
	if cfg.Binary == "" || cfg.Socket == "" || cfg.LogPath == "" {
		return nil, errors.New("daemontest: Binary, Socket and LogPath are required")
	}
	if _, err := os.Stat(cfg.Binary); err != nil {
		return nil, fmt.Errorf("cellblockd is missing (run `make build` first): %w", err)
	}
	d := &Daemon{Socket: cfg.Socket, LogPath: cfg.LogPath, ready: make(chan struct{}), done: make(chan struct{})}
	args := append([]string{cfg.Binary, "--log-format", "json"}, cfg.Args...)
	if !hasFlag(cfg.Args, "--socket") {
		args = append(args, "--socket", cfg.Socket)
	}
	args = append(append([]string(nil), cfg.Prefix...), args...)
	env := append(os.Environ(), cfg.Env...)
	if !hasEnv(cfg.Env, notifySocketEnv) {
		// Next to the API socket: a directory that takes sockets.
		path := cfg.Socket + ".notify"
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, err
		}
		_ = os.Remove(path) // left by an earlier daemon on this socket

		conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
		if err != nil {
			return nil, fmt.Errorf("notify socket: %w", err)
		}
		d.notify = conn
		env = append(env, notifySocketEnv+"="+path)
	}
	logf, err := os.Create(cfg.LogPath)
	if err != nil {
		d.closeNotify()
		return nil, err
	}
	defer logf.Close()
	d.Cmd = exec.Command(args[0], args[1:]...)
	d.Cmd.Env = env
	d.Cmd.Stdout, d.Cmd.Stderr = logf, logf
	d.Cmd.SysProcAttr = cfg.SysProcAttr
	if err := d.Cmd.Start(); err != nil {
		d.closeNotify()
		return nil, fmt.Errorf("start %s: %w", args[0], err)
	}
	go func() {
		d.exitErr = d.Cmd.Wait()
		d.closeNotify()
		close(d.done)
	}()
	if d.notify != nil {
		go d.readNotify()
	}
	d.Client = client.New(cfg.Socket)
	return d, nil
}

// Start launches the daemon and waits until it is ready; if it is not, it
// is killed and the error says why, with its log.
func Start(ctx context.Context, cfg Config) (*Daemon, error) {
	d, err := Launch(cfg)
	if err != nil {
		return nil, err
	}
	if err := d.WaitReady(ctx); err != nil {
		d.Kill()
		return nil, err
	}
	return d, nil
}

// readNotify closes ready when the daemon sends READY=1.
func (d *Daemon) readNotify() {
	buf := make([]byte, 4096)
	for {
		n, _, err := d.notify.ReadFromUnix(buf)
		if err != nil {
			return
		}
		for _, line := range strings.Split(string(buf[:n]), "\n") {
			if line == "READY=1" {
				close(d.ready)
				return
			}
		}
	}
}

func (d *Daemon) closeNotify() {
	if d.notify != nil {
		d.notify.Close()
		os.Remove(d.notify.LocalAddr().String())
	}
}

// WaitReady waits until the daemon has said READY=1, which it does once
// its API is listening. It fails if the daemon exits first or ctx ends.
func (d *Daemon) WaitReady(ctx context.Context) error {
	if d.notify == nil {
		return errors.New("daemontest: the caller owns NOTIFY_SOCKET; wait for READY=1 there")
	}
	select {
	case <-d.ready:
		return nil
	case <-d.done:
		return fmt.Errorf("cellblockd exited during start-up: %v\n%s", d.exitErr, d.Log())
	case <-ctx.Done():
		return fmt.Errorf("cellblockd was not ready: %w\n%s", ctx.Err(), d.Log())
	}
}

// Done is closed when the daemon has exited.
func (d *Daemon) Done() <-chan struct{} { return d.done }

// Exited reports whether the daemon has exited.
func (d *Daemon) Exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// ExitErr is how the daemon exited (nil for status 0). It is valid once
// Done is closed.
func (d *Daemon) ExitErr() error {
	<-d.done
	return d.exitErr
}

// Stop sends SIGTERM and waits up to grace for the daemon to exit. It
// fails if the daemon had exited already, does not exit in time (it is
// killed then) or exits with a status other than 0.
func (d *Daemon) Stop(grace time.Duration) error {
	if d.Exited() {
		return fmt.Errorf("cellblockd had already exited: %v", d.exitErr)
	}
	if err := d.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-d.done:
		if d.exitErr != nil {
			return fmt.Errorf("cellblockd did not exit cleanly on SIGTERM: %w", d.exitErr)
		}
		return nil
	case <-time.After(grace):
		d.Kill()
		return fmt.Errorf("cellblockd did not exit within %v of SIGTERM", grace)
	}
}

// Kill SIGKILLs the daemon, as a crash would, and waits for it.
func (d *Daemon) Kill() {
	if !d.Exited() {
		_ = d.Cmd.Process.Kill()
	}
	<-d.done
}

// Log returns what the daemon has logged so far.
func (d *Daemon) Log() string {
	b, _ := os.ReadFile(d.LogPath)
	return string(b)
}

// logPoll is how often WaitLog reads the log again: a file offers no
// event for a line written to it.
const logPoll = 10 * time.Millisecond

// WaitLog waits until the daemon's log holds substr. It fails if the
// daemon exits without having logged it, or ctx ends.
func (d *Daemon) WaitLog(ctx context.Context, substr string) error {
	t := time.NewTicker(logPoll)
	defer t.Stop()
	for {
		if strings.Contains(d.Log(), substr) {
			return nil
		}
		select {
		case <-d.done:
			if strings.Contains(d.Log(), substr) {
				return nil
			}
			return fmt.Errorf("cellblockd exited (%v) without logging %q\n%s", d.exitErr, substr, d.Log())
		case <-ctx.Done():
			return fmt.Errorf("cellblockd did not log %q: %w\n%s", substr, ctx.Err(), d.Log())
		case <-t.C:
		}
	}
}

// LogTail returns the last max bytes of the log, for error messages.
func (d *Daemon) LogTail(max int) string {
	s := d.Log()
	if len(s) > max {
		s = s[len(s)-max:]
	}
	return strings.TrimSpace(s)
}

// hasFlag reports whether args hold the flag name.
func hasFlag(args []string, name string) bool {
	for _, a := range args {
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}

func hasEnv(env []string, name string) bool {
	for _, e := range env {
		if strings.HasPrefix(e, name+"=") {
			return true
		}
	}
	return false
}
