package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/client"
)

// Exit statuses of cellblock itself. Otherwise "cellblock run" exits with
// the program's own status.
const (
	exitOK = 0
	// exitUsage: the command line was wrong (bad flag, unreadable FILE).
	exitUsage = 2
	// exitTimedOut: the wall-clock timeout ended the run (as timeout(1)).
	exitTimedOut = 124
	// exitFailed: the run could not be carried out: the daemon refused it
	// or could not be reached or answered nonsense (as docker run).
	exitFailed = 125
	// exitOOM: the memory limit ended the run (128+SIGKILL).
	exitOOM = 137
	// exitSignalBase plus the signal number: cellblock was interrupted.
	exitSignalBase = 128
)

// exitStatus maps a result to cellblock run's exit status. With jsonMode
// the program's fate is in the printed object, so any run carried out
// exits 0.
func exitStatus(res *api.Result, jsonMode bool) int {
	switch {
	case res.Error != nil:
		return exitFailed
	case jsonMode:
		return exitOK
	case res.TimedOut:
		return exitTimedOut
	case res.OOMKilled:
		return exitOOM
	case res.ExitCode < 0 || res.ExitCode > 255:
		// Not a status a process can exit with; never let it
		// wrap around to 0.
		return 1
	default:
		return res.ExitCode
	}
}

// interruptedStatus is the exit status after ctx was cancelled: 128 plus
// the signal's number, 130 (SIGINT) when the signal is not known.
func interruptedStatus(ctx context.Context) int {
	var in *interrupted
	if errors.As(context.Cause(ctx), &in) {
		if s, ok := in.sig.(syscall.Signal); ok {
			return exitSignalBase + int(s)
		}
	}
	return exitSignalBase + int(syscall.SIGINT)
}

// failure reports err, an error from talking to the daemon, on w and
// returns the exit status: the interrupted status when ctx was cancelled,
// else exitFailed.
func (inv *invocation) failure(ctx context.Context, err error) int {
	if ctx.Err() != nil {
		fmt.Fprintln(inv.stderr, "cellblock: interrupted; the run is cancelled")
		return interruptedStatus(ctx)
	}
	if errors.Is(err, client.ErrUnreachable) {
		inv.reportUnreachable(inv.stderr, err)
		return exitFailed
	}
	fmt.Fprintf(inv.stderr, "cellblock: %v\n", err)
	return exitFailed
}

// socketPath returns the socket to dial and where that choice came from.
func (inv *invocation) socketPath() (path, from string) {
	path = client.SocketPath(inv.socket)
	switch {
	case inv.socket != "":
		from = "--socket"
	case os.Getenv(api.SocketEnv) != "":
		from = "$" + api.SocketEnv
	default:
		from = "the default"
	}
	return path, from
}

func (inv *invocation) newClient() *client.Client {
	path, _ := inv.socketPath()
	return client.New(path)
}

// reportUnreachable explains a failure to reach the daemon and what to
// check, most likely cause first.
func (inv *invocation) reportUnreachable(w io.Writer, err error) {
	path, from := inv.socketPath()
	running := "  Is cellblockd running?  Check: systemctl status cellblockd\n"
	group := "  May you use the socket?  It is open to the \"cellblock\" group: check that `id -nG`\n" +
		"    lists it (after `sudo usermod -aG cellblock $USER`, log in again), and to the\n" +
		"    uids the daemon's --allow-uid names.\n"
	where := fmt.Sprintf("  Is it the right socket?  This is %s (%s); choose another with\n"+
		"    --socket PATH or $%s.\n", path, from, api.SocketEnv)

	var reason string
	hints := running + group + where
	switch {
	case errors.Is(err, syscall.ENOENT):
		reason = "there is no socket there"
		hints = running + where
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		reason = "permission denied"
		hints = group + where
	case errors.Is(err, syscall.ECONNREFUSED):
		reason = "nothing is listening on the socket (stale socket?)"
		hints = running + where
	case errors.Is(err, syscall.ENOTSOCK):
		reason = "that path is not a socket"
		hints = where
	default:
		var errno syscall.Errno
		if errors.As(err, &errno) {
			reason = errno.Error()
		} else {
			reason = err.Error()
		}
	}
	fmt.Fprintf(w, "cellblock: cannot reach cellblockd at %s: %s\n%s", path, reason, hints)
}
