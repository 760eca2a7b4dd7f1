package egress

import "net/netip"

// class is what kind of destination an address is.
type class int

const (
	// public addresses are reachable when a run's allowlist allows them.
	public class = iota
	// private addresses (loopback, RFC 1918, unique local, link-local,
	// shared and special-purpose ranges) are reachable only with
	// --network-allow-private, or, for a dependency build, when the
	// operator named the index by that address.
	private
	// forbidden addresses are never reached: cloud metadata endpoints,
	// and addresses that are no single host (unspecified, multicast,
	// broadcast, "this network", reserved).
	forbidden
)

// metadata are the instance metadata and platform endpoints of cloud
// providers: a program that reaches one may read the host's credentials.
var metadata = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"), // AWS, GCP, Azure, OpenStack, DigitalOcean, ...
	netip.MustParseAddr("169.254.170.2"),   // AWS ECS task metadata and credentials
	netip.MustParseAddr("fd00:ec2::254"),   // AWS over IPv6
	netip.MustParseAddr("168.63.129.16"),   // Azure's WireServer
	netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
	netip.MustParseAddr("192.0.0.192"),     // Oracle Cloud
}

// forbiddenNets are ranges no connection goes to.
var forbiddenNets = prefixes(
	"0.0.0.0/8",   // "this network"
	"240.0.0.0/4", // reserved, and the broadcast address
)

// specialNets are special-purpose ranges (RFC 6890 and its successors)
// that netip's predicates do not cover: not the public internet, so held
// to the rule for private addresses.
var specialNets = prefixes(
	"100.64.0.0/10",   // shared address space (carrier-grade NAT)
	"192.0.0.0/24",    // IETF protocol assignments
	"192.0.2.0/24",    // documentation
	"198.18.0.0/15",   // benchmarking
	"198.51.100.0/24", // documentation
	"203.0.113.0/24",  // documentation
	"::/96",           // IPv4-compatible (deprecated)
	"64:ff9b::/96",    // NAT64: would reach any IPv4 address
	"64:ff9b:1::/48",  // local NAT64
	"100::/64",        // discard
	"2001::/23",       // IETF protocol assignments, Teredo among them
	"2001:db8::/32",   // documentation
	"2002::/16",       // 6to4: would reach any IPv4 address
	"3fff::/20",       // documentation
	"fec0::/10",       // site-local (deprecated)
)

func prefixes(list ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(list))
	for i, s := range list {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// classify says what kind of destination a is.
func classify(a netip.Addr) class {
	a = a.Unmap()
	for _, m := range metadata {
		if a == m {
			return forbidden
		}
	}
	if !a.IsValid() || a.IsUnspecified() || a.IsMulticast() || a.Zone() != "" || inAny(a, forbiddenNets) {
		return forbidden
	}
	if a.IsLoopback() {
		return private
	}
	if a.IsPrivate() || a.IsLinkLocalUnicast() || inAny(a, specialNets) {
		// An IPv6 address that carries an IPv4 one may reach it (through
		// a NAT64 gateway, a 6to4 or Teredo relay): it is no better.
		c := private
		for _, v4 := range embeddedIPv4(a) {
			c = max(c, classify(v4))
		}
		return c
	}
	return public
}

// The IPv6 ranges that carry an IPv4 address, and where.
var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")   // RFC 6052: the last 32 bits
	nat64Any  = netip.MustParsePrefix("64:ff9b:1::/48") // RFC 8215: as RFC 6052 places it, for any prefix length
	v4compat  = netip.MustParsePrefix("::/96")          // the last 32 bits
	sixToFour = netip.MustParsePrefix("2002::/16")      // bits 16-47
	teredo    = netip.MustParsePrefix("2001::/32")      // the server's in bits 32-63, the client's inverted in the last 32
)

// embeddedIPv4 is the IPv4 addresses an IPv6 address of a transition
// range carries (every place one may be, when its range allows several).
func embeddedIPv4(a netip.Addr) []netip.Addr {
	if !a.Is6() {
		return nil
	}
	b := a.As16()
	at := func(i, j, k, l int) netip.Addr { return netip.AddrFrom4([4]byte{b[i], b[j], b[k], b[l]}) }
	switch {
	case nat64.Contains(a) || v4compat.Contains(a):
		return []netip.Addr{at(12, 13, 14, 15)}
	case nat64Any.Contains(a):
		// RFC 6052's formats for /48, /56, /64 and /96 prefixes (bits
		// 64-71 are the "u" octet, never part of the address).
		return []netip.Addr{at(6, 7, 9, 10), at(7, 9, 10, 11), at(9, 10, 11, 12), at(12, 13, 14, 15)}
	case sixToFour.Contains(a):
		return []netip.Addr{at(2, 3, 4, 5)}
	case teredo.Contains(a):
		client := netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]})
		return []netip.Addr{at(4, 5, 6, 7), client}
	}
	return nil
}

func inAny(a netip.Addr, nets []netip.Prefix) bool {
	for _, n := range nets {
		if n.Contains(a) {
			return true
		}
	}
	return false
}
