package nsjail

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// newNetns makes a network namespace with its loopback up, held by the
// returned file, without moving any thread of this process into it for
// longer than it takes.
func newNetns(t *testing.T) *os.File {
	t.Helper()
	type result struct {
		f   *os.File
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
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- result{nil, err}
			return
		}
		ns, err := os.Open("/proc/thread-self/ns/net")
		if err == nil {
			err = loopbackUp()
		}
		if serr := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); serr != nil {
			done <- result{nil, serr} // the thread dies locked
			return
		}
		runtime.UnlockOSThread()
		done <- result{ns, err}
	}()
	r := <-done
	if r.err != nil {
		t.Fatalf("new network namespace: %v", r.err)
	}
	t.Cleanup(func() { r.f.Close() })
	return r.f
}

// loopbackUp brings up lo in the calling thread's network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// dialIn connects to addr from inside ns.
func dialIn(ns *os.File, addr string) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		defer own.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		c, derr := net.DialTimeout("tcp", addr, 5*time.Second)
		if c != nil {
			c.Write([]byte("hi"))
			c.Close()
		}
		if err := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- err
			return
		}
		runtime.UnlockOSThread()
		done <- derr
	}()
	return <-done
}

// threadNamespaces lists the network namespace of every thread of this
// process.
func threadNamespaces(t *testing.T) map[string]int {
	t.Helper()
	tasks, err := filepath.Glob("/proc/self/task/*/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, p := range tasks {
		if l, err := os.Readlink(p); err == nil {
			seen[l]++
		}
	}
	return seen
}

// The proxy's socket is made in the jail's namespace: reachable there, not
// from the host, and no thread of the daemon is left in that namespace.
func TestListenInNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it makes a network namespace")
	}
	own, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	ns := newNetns(t)
	for range 20 { // many times: each on whatever thread the goroutine gets
		ln, err := listenInNetns(ns, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln.Close()
	}
	// The same address as a socket of the host's: another namespace.
	host, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	addr := host.Addr().String()
	ln, err := listenInNetns(ns, addr)
	if err != nil {
		t.Fatalf("listen on %s in the namespace: %v", addr, err)
	}
	defer ln.Close()
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(got)
			return
		}
		b := make([]byte, 2)
		n, _ := c.Read(b)
		got <- string(b[:n])
		c.Close()
	}()
	if err := dialIn(ns, addr); err != nil {
		t.Fatalf("from inside the namespace: %v", err)
	}
	if s := <-got; s != "hi" {
		t.Fatalf("accepted %q", s)
	}
	for l, n := range threadNamespaces(t) {
		if l != own {
			t.Errorf("%d threads of the process are left in %s (the process's is %s)", n, l, own)
		}
	}
	// Never the daemon's own namespace.
	self, err := os.Open("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	if ln, err := listenInNetns(self, "127.0.0.1:0"); !errors.Is(err, errOwnNamespace) {
		if ln != nil {
			ln.Close()
		}
		t.Errorf("the daemon's own namespace: %v", err)
	}
}
