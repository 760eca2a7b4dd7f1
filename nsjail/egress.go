package nsjail

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/cellblock/cellblock/nsjail/layout"
)

// Egress is how a jail whose run may reach the network reaches it: the
// daemon's proxy (package egress). The jail's network namespace keeps only
// its loopback; the Runner opens a TCP socket listening on that loopback
// and hands it to Serve, which owns it from then on and returns the
// environment that points the jail's programs at it. Whoever made the
// Egress closes it after the run (or session), which closes the socket.
type Egress interface {
	Serve(ln net.Listener) map[string]string
}

// attachEgress gives spec.Egress, if any, its socket in the jail's
// network namespace, and keeps the environment it returns in spec. The
// jail's init must be waiting for its program (awaitReady): it exits only
// when told to or killed, so its pid names the jail until then.
func (j *Jail) attachEgress(spec *Spec) error {
	if spec.Egress == nil {
		return nil
	}
	ln, err := j.listenLoopback()
	if err != nil {
		return fmt.Errorf("the network proxy's socket in jail %s: %w", j.id, err)
	}
	spec.egressEnv = spec.Egress.Serve(ln)
	return nil
}

// listenLoopback opens a TCP socket listening on 127.0.0.1 in the jail's
// network namespace: on layout.ProxyPort, or any free port when a
// program of the jail (a preloaded module) holds that one.
func (j *Jail) listenLoopback() (net.Listener, error) {
	pid, err := j.proc.Pid()
	if err != nil {
		return nil, err
	}
	ns, err := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/net")
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	// The init is our child, reaped only by the jail's own Wait, which
	// then closes j.exited; and it is waiting for its program, which it
	// leaves only when told to or killed. Alive after the open, it was
	// the init when opened: a pid is reused only once reaped. (Should
	// that ever fail, listenInNetns still refuses the daemon's own
	// namespace.)
	if !j.alive() {
		return nil, errors.New("the jail's init exited")
	}
	ln, err := listenInNetns(ns, "127.0.0.1:"+strconv.Itoa(layout.ProxyPort))
	if errors.Is(err, unix.EADDRINUSE) {
		ln, err = listenInNetns(ns, "127.0.0.1:0")
	}
	return ln, err
}

// errOwnNamespace refuses to open the socket in the daemon's own network
// namespace, where it would reach the host.
var errOwnNamespace = errors.New("the namespace is the daemon's own")

// listenInNetns opens a TCP socket listening on addr in the network
// namespace ns. A socket belongs to the namespace of the thread that made
// it, for good, so one goroutine locks itself to its OS thread, moves the
// thread into ns (setns(2) changes only the calling thread), makes the
// socket, and moves the thread back before unlocking it. Go schedules no
// other goroutine on a locked thread, and starts new threads from a clean
// template thread rather than a locked one, so nothing else ever runs in
// ns. Should the way back fail, the goroutine returns without unlocking:
// the runtime then ends the thread instead of reusing it.
func listenInNetns(ns *os.File, addr string) (net.Listener, error) {
	type result struct {
		ln  net.Listener
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{nil, err}
			return
		}
		defer own.Close()
		same, err := sameFile(own, ns)
		if err == nil && same {
			err = errOwnNamespace
		}
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{nil, err}
			return
		}
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- result{nil, fmt.Errorf("setns: %w", err)}
			return
		}
		var lc net.ListenConfig
		ln, lerr := lc.Listen(context.Background(), "tcp4", addr)
		if err := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); err != nil {
			// The thread stays locked and dies with this goroutine.
			if ln != nil {
				ln.Close()
			}
			done <- result{nil, fmt.Errorf("setns back to the daemon's network namespace: %w", err)}
			return
		}
		runtime.UnlockOSThread()
		done <- result{ln, lerr}
	}()
	r := <-done
	return r.ln, r.err
}

// sameFile reports whether a and b are the same file (namespace).
func sameFile(a, b *os.File) (bool, error) {
	var sa, sb unix.Stat_t
	if err := unix.Fstat(int(a.Fd()), &sa); err != nil {
		return false, err
	}
	if err := unix.Fstat(int(b.Fd()), &sb); err != nil {
		return false, err
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino, nil
}
