package egress

import (
	"errors"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The host's own addresses. An address of one of the host's interfaces
// may be public (a server with a public address on eth0); a connection to
// it is delivered on the host, to whatever listens on 0.0.0.0 there, as
// one to loopback would be. So an address that classify finds public is
// also looked up in the kernel's routes, as the daemon's connection to it
// would be routed: a route of type local (or anycast, which IPv6 also
// delivers on the host) makes it private.

// hostLocal reports whether the kernel would deliver a connection to a on
// this host: `ip route get` in the daemon's network namespace, one
// netlink request. An address with no route is not local (nothing can
// reach it); any other failure is an error, and the caller refuses the
// address.
func hostLocal(a netip.Addr) (bool, error) {
	routes, err := netlink.RouteGet(net.IP(a.Unmap().AsSlice()))
	if errors.Is(err, unix.ENETUNREACH) || errors.Is(err, unix.EHOSTUNREACH) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, r := range routes {
		if r.Type == unix.RTN_LOCAL || r.Type == unix.RTN_ANYCAST {
			return true, nil
		}
	}
	return false, nil
}
