package api

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Network asks for egress: the hosts and ports the run's programs may
// reach through the daemon's proxy. Without it (or with an empty Allow)
// a run has no network at all. The operator bounds what may be asked
// (cellblockd --network-allow); a request outside the bound is refused
// with ErrOverLimit naming "network".
type Network struct {
	// Allow lists patterns: "host:port", "*.example.org:443" (any name
	// below example.org, not example.org itself), "*:443" (any host),
	// "203.0.113.7:443" or "[2001:db8::7]:443" (that address, when the
	// program names it). The port is always explicit.
	Allow []string `json:"allow"`
}

// Bounds of a request's network allowlist.
const (
	MaxNetworkAllow   = 64
	maxNetPatternLen  = 300
	maxHostNameLength = 253
)

// Denial kinds (Denial.Kind).
const (
	DenialNetwork = "network"
	DenialSyscall = "syscall"
)

// Reasons of a network denial (Denial.Reason): a closed set, so that
// metrics may count by it.
const (
	// DenyNotAllowed: the host and port match no pattern of the run's
	// allowlist.
	DenyNotAllowed = "not_allowed"
	// DenyPrivateAddress: the name is allowed but resolves only to
	// loopback, private, link-local or other special-purpose addresses,
	// which runs may reach only with cellblockd --network-allow-private.
	DenyPrivateAddress = "private_address"
	// DenyForbiddenAddress: an address no run ever reaches: cloud
	// metadata endpoints, unspecified, multicast and broadcast addresses.
	DenyForbiddenAddress = "forbidden_address"
	// DenyConnectionLimit: the run had as many connections open as it may
	// have at once, or had made as many as it may make in all.
	DenyConnectionLimit = "connection_limit"
	// DenyByteLimit: the run's connections carried as many bytes as it
	// may move in all.
	DenyByteLimit = "byte_limit"
)

// DenyReasons lists every reason, for metrics that want all label values
// present from the start.
var DenyReasons = []string{DenyNotAllowed, DenyPrivateAddress, DenyForbiddenAddress, DenyConnectionLimit, DenyByteLimit}

// Denial is something the sandbox refused the program: the contract's
// kind and detail, and for the network the host, port and reason (and for
// a secret, its name). Count says how many times the same refusal
// happened.
type Denial struct {
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
	Secret string `json:"secret,omitempty"`
	Host   string `json:"host,omitempty"`
	Port   int    `json:"port,omitempty"`
	Reason string `json:"reason,omitempty"`
	Count  int    `json:"count,omitempty"`
}

// NetworkInfo is Info's description of egress.
type NetworkInfo struct {
	// Allow is the operator's bound (--network-allow): the most a run may
	// ask for. Empty: no run gets network.
	Allow []string `json:"allow"`
	// AllowPrivate: allowed names may resolve to loopback and private
	// addresses (--network-allow-private).
	AllowPrivate bool `json:"allow_private"`
	// MaxConnections a run may have open at once, MaxConnectionsTotal it
	// may make in all, MaxBytes it may move in all (both directions).
	MaxConnections      int   `json:"max_connections"`
	MaxConnectionsTotal int   `json:"max_connections_total"`
	MaxBytes            int64 `json:"max_bytes"`
	// Proxy is the proxy's URL inside a jail that asked for network.
	Proxy string `json:"proxy"`
	// Builds is what dependency builds may reach: the package index's
	// host and port; empty when they need no network (--no-index).
	Builds []string `json:"builds,omitempty"`
}

// NetPattern is one parsed network.allow entry. Exactly one of Any, Addr
// (an IP literal) and Host (a DNS name) says which hosts it matches.
type NetPattern struct {
	// Any matches every host and address: the pattern "*:PORT".
	Any bool
	// Addr is the pattern's address when it is an IP literal.
	Addr netip.Addr
	// Host is a DNS name in lower case without a final dot. With
	// Subdomains the pattern is "*.Host": it matches the names below
	// Host, not Host itself.
	Host       string
	Subdomains bool
	// Port is the one port it matches.
	Port uint16
}

// ParseNetPattern parses "host:port", "*.domain:port", "*:port",
// "1.2.3.4:port" or "[v6]:port".
func ParseNetPattern(s string) (NetPattern, error) {
	var p NetPattern
	if len(s) > maxNetPatternLen {
		return p, fmt.Errorf("is %d bytes; a pattern is at most %d", len(s), maxNetPatternLen)
	}
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return p, errors.New("needs a port: HOST:PORT, such as api.example.org:443")
	}
	host, port := s[:i], s[i+1:]
	n, err := parsePort(port)
	if err != nil {
		return p, err
	}
	p.Port = n
	switch {
	case host == "*":
		p.Any = true
		return p, nil
	case strings.HasPrefix(host, "["):
		a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
		if err != nil || !strings.HasSuffix(host, "]") || !a.Is6() || a.Zone() != "" {
			return p, fmt.Errorf("%q is not an IPv6 address in brackets, such as [2001:db8::1]", host)
		}
		p.Addr = a.Unmap()
		return p, nil
	case strings.Contains(host, ":"):
		return p, errors.New("an IPv6 address needs brackets: [2001:db8::1]:443")
	}
	if a, err := netip.ParseAddr(host); err == nil {
		p.Addr = a
		return p, nil
	}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		p.Subdomains = true
		host = rest
	}
	if strings.Contains(host, "*") {
		return p, errors.New("a wildcard may only be a whole first label: *.example.org:443, or * for any host")
	}
	name, err := hostName(host)
	if err != nil {
		return p, err
	}
	p.Host = name
	return p, nil
}

func parsePort(s string) (uint16, error) {
	if s == "*" || strings.Contains(s, "-") {
		return 0, errors.New("needs one explicit port: list each port (HOST:80, HOST:443); port wildcards and ranges are not allowed")
	}
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 || s[0] == '+' || s[0] == '0' {
		return 0, fmt.Errorf("port %q is not a number from 1 to 65535", s)
	}
	return uint16(n), nil
}

// hostName checks and normalizes a DNS name: ASCII letters, digits, '-'
// and '_' in labels of 1 to 63, at most 253 in all, in lower case, a
// final dot dropped. A name whose last label is all digits is refused:
// it is no name, and resolvers read forms such as 127.1 as addresses.
func hostName(h string) (string, error) {
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if h == "" || len(h) > maxHostNameLength {
		return "", fmt.Errorf("%q is not a host name", h)
	}
	labels := strings.Split(h, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return "", fmt.Errorf("%q is not a host name (labels are 1 to 63 letters, digits or hyphens; internationalized names in their xn-- form)", h)
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", fmt.Errorf("%q is not a host name (labels are 1 to 63 letters, digits or hyphens; internationalized names in their xn-- form)", h)
			}
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return "", fmt.Errorf("%q is neither a host name nor an IP address", h)
	}
	return h, nil
}

// NormalizeHost reads a host as a program names it (in a proxy request):
// an IP literal (an IPv6 one with or without brackets) or a DNS name. It
// returns the name in lower case, or the address.
func NormalizeHost(h string) (name string, addr netip.Addr, err error) {
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Zone() != "" {
			return "", netip.Addr{}, fmt.Errorf("%q: addresses with a zone are not reachable", h)
		}
		return "", a.Unmap(), nil
	}
	name, err = hostName(h)
	return name, netip.Addr{}, err
}

// String is the pattern as ParseNetPattern reads it.
func (p NetPattern) String() string {
	port := strconv.Itoa(int(p.Port))
	switch {
	case p.Any:
		return "*:" + port
	case p.Addr.Is6():
		return "[" + p.Addr.String() + "]:" + port
	case p.Addr.IsValid():
		return p.Addr.String() + ":" + port
	case p.Subdomains:
		return "*." + p.Host + ":" + port
	}
	return p.Host + ":" + port
}

// Matches reports whether a connection to host (a normalized name, "" for
// an address) or addr (valid for an IP literal) on port is allowed by p.
// Names match names and addresses addresses: a pattern naming a host
// never allows the address it resolves to, when the program names that
// address instead.
func (p NetPattern) Matches(host string, addr netip.Addr, port uint16) bool {
	if port != p.Port {
		return false
	}
	switch {
	case p.Any:
		return true
	case p.Addr.IsValid():
		return addr.IsValid() && addr.Unmap() == p.Addr
	case addr.IsValid() || host == "":
		return false
	case p.Subdomains:
		return strings.HasSuffix(host, "."+p.Host)
	}
	return host == p.Host
}

// Within reports whether everything p allows, b allows too.
func (p NetPattern) Within(b NetPattern) bool {
	if p.Port != b.Port {
		return false
	}
	switch {
	case b.Any:
		return true
	case p.Any:
		return false
	case p.Addr.IsValid() || b.Addr.IsValid():
		return p.Addr == b.Addr
	case b.Subdomains:
		return p.Subdomains && p.Host == b.Host || strings.HasSuffix(p.Host, "."+b.Host)
	}
	return !p.Subdomains && p.Host == b.Host
}

// ParseNetPatterns parses a list of patterns; field names each entry in
// an error (field[i]).
func ParseNetPatterns(field string, list []string) ([]NetPattern, *Error) {
	if len(list) > MaxNetworkAllow {
		return nil, Errorf(ErrBadRequest, field, "has %d entries; the maximum is %d", len(list), MaxNetworkAllow)
	}
	out := make([]NetPattern, 0, len(list))
	for i, s := range list {
		p, err := ParseNetPattern(s)
		if err != nil {
			return nil, Errorf(ErrBadRequest, fmt.Sprintf("%s[%d]", field, i), "%.100q %v", s, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// validate checks the request's network allowlist.
func (n *Network) validate() *Error {
	if n == nil {
		return nil
	}
	_, err := ParseNetPatterns("network.allow", n.Allow)
	return err
}

// Wants reports whether n asks for any network.
func (n *Network) Wants() bool { return n != nil && len(n.Allow) > 0 }
