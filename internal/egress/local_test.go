package egress

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/cellblock/cellblock/internal/api"
)

// TestHostAddressesArePrivate: an address that is public by its range but
// the host's own is refused as private, allowed with
// --network-allow-private; one whose route cannot be looked up is
// refused. Nothing is dialled.
func TestHostAddressesArePrivate(t *testing.T) {
	own := netip.MustParseAddr("93.184.215.14")
	other := netip.MustParseAddr("93.184.215.15")
	broken := netip.MustParseAddr("93.184.215.16")
	local := func(a netip.Addr) (bool, error) {
		if a == broken {
			return false, errors.New("no netlink")
		}
		return a == own, nil
	}
	for _, allowPrivate := range []bool{false, true} {
		e, err := New(Config{Allow: patterns(t, "*:443"), AllowPrivate: allowPrivate, Local: local})
		if err != nil {
			t.Fatal(err)
		}
		p := e.newProxy("test", policy{allow: patterns(t, "*:443"), allowPrivate: allowPrivate})
		for _, a := range []netip.Addr{own, other, broken} {
			got, err := p.addresses(context.Background(), target{addr: a, port: 443})
			var d *denial
			refused := errors.As(err, &d) && d.reason == api.DenyPrivateAddress
			if want := a != other && !allowPrivate; refused != want || !refused && (len(got) != 1 || got[0] != a) {
				t.Errorf("allow private %v, %s: %v %v", allowPrivate, a, got, err)
			}
		}
		p.Close()
	}
}

// TestHostLocalAsksTheKernel, as root, in a network namespace of its own
// whose loopback also has 8.8.8.8: that address is local there, as is
// 127.0.0.1, and 1.1.1.1 (no route) is not. Nothing is sent.
func TestHostLocalAsksTheKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it makes a network namespace")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// This thread never leaves the new namespace: it ends with the
		// goroutine.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			t.Errorf("unshare: %v", err)
			return
		}
		lo, err := netlink.LinkByName("lo")
		if err == nil {
			err = netlink.LinkSetUp(lo)
		}
		if err == nil {
			err = netlink.AddrAdd(lo, &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(8, 8, 8, 8), Mask: net.CIDRMask(32, 32)}})
		}
		if err != nil {
			t.Errorf("set up the namespace's loopback: %v", err)
			return
		}
		for addr, want := range map[string]bool{"8.8.8.8": true, "127.0.0.1": true, "1.1.1.1": false, "::ffff:8.8.8.8": true} {
			got, err := hostLocal(netip.MustParseAddr(addr))
			if err != nil || got != want {
				t.Errorf("%s: local %v %v, want %v", addr, got, err, want)
			}
		}
	}()
	<-done
}

// TestNamesAreLookedUpRooted: a name with a dot is looked up with a final
// dot (never under the search list's domains), and localhost still
// resolves from the hosts file.
func TestNamesAreLookedUpRooted(t *testing.T) {
	for name, want := range map[string]string{"x.example.org": "x.example.org.", "x.example.org.": "x.example.org.", "localhost": "localhost", "pypi": "pypi"} {
		if got := rooted(name); got != want {
			t.Errorf("rooted(%q) = %q, want %q", name, got, want)
		}
	}
	e, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := e.cfg.Resolve(context.Background(), "localhost")
	if err != nil || len(addrs) == 0 || !addrs[0].Unmap().IsLoopback() {
		t.Errorf("localhost: %v %v", addrs, err)
	}
}
