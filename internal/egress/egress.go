// Package egress is the network a jail may reach, and the only way it
// reaches it: an HTTP proxy served by the daemon on a socket that lives in
// the jail's own network namespace (which has nothing but loopback), with
// the policy that decides every connection.
//
// A run (or session) that asks for network gets a Proxy: package nsjail
// opens a listening socket on the jail's 127.0.0.1 from a thread that
// joined the jail's network namespace, and hands it to Proxy.Serve; the
// jail's environment then names it in HTTP_PROXY and its kin. The proxy
// takes CONNECT (TLS and any other TCP) and absolute-URI requests (plain
// HTTP), checks the host and port against the run's allowlist, resolves a
// name itself (the jail has no DNS), refuses loopback, private and other
// special-purpose addresses unless the operator allows them and cloud
// metadata endpoints always, and connects to exactly the address it
// checked. It caps each run's connections (at once and in all) and bytes,
// answers every refusal with a 403 saying why, and keeps a bounded list of
// denials for the run's result.
//
// It decides policy and moves bytes; it never touches a namespace itself
// (nsjail makes the socket) and it learns the operator's bound from
// Config.
package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/nsjail/layout"
)

// Defaults of Config's caps.
const (
	// DefaultMaxConnections is how many connections a run may have open
	// through its proxy at once.
	DefaultMaxConnections = 32
	// DefaultMaxConnectionsTotal is how many connections a run may make
	// through its proxy in all: each CONNECT and each plain HTTP request.
	DefaultMaxConnectionsTotal = 1024
	// DefaultMaxBytes is how many bytes a run's connections may carry in
	// all, both directions together.
	DefaultMaxBytes = 1 << 30
)

// Timeouts of the proxy.
const (
	// resolveTimeout bounds the lookup of one name.
	resolveTimeout = 5 * time.Second
	// dialTimeout bounds connecting to one address.
	dialTimeout = 10 * time.Second
	// idleTimeout closes a client connection idle between requests.
	idleTimeout = 2 * time.Minute
	// maxHeaderBytes bounds a request's line and headers.
	maxHeaderBytes = 16 << 10
	// maxDenials bounds the distinct denials kept for one result; more
	// of the same kind only count.
	maxDenials = 32
)

// headerTimeout bounds reading a request's line and headers, so that a
// client sending them slowly holds nothing for long. A variable for tests.
var headerTimeout = 10 * time.Second

// PyPI's hosts: the index and the files it links to. A dependency build
// with no --index-url reaches these (uv's and pip's default).
var pypiHosts = []string{"pypi.org:443", "files.pythonhosted.org:443"}

// Config is the operator's egress policy.
type Config struct {
	// Allow is the most any run may ask for (--network-allow); empty
	// refuses every run that asks for network.
	Allow []api.NetPattern
	// AllowPrivate lets allowed names resolve to loopback, private and
	// other special-purpose addresses (--network-allow-private).
	AllowPrivate bool
	// MaxConnections, MaxConnectionsTotal and MaxBytes cap each run's
	// proxy; zero takes the defaults above.
	MaxConnections      int
	MaxConnectionsTotal int
	MaxBytes            int64
	// Resolve looks a name up; nil uses the daemon's resolver. Tests may
	// pin names with it.
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// Local reports whether an address is the host's own (the kernel
	// delivers connections to it on the host); nil asks the kernel's
	// routes (hostLocal). Such an address is private.
	Local func(netip.Addr) (bool, error)
	// OnDenial is told the reason (api.Deny*) of every denial, for
	// metrics; nil for none.
	OnDenial func(reason string)
	Log      *slog.Logger
}

// Egress makes the proxies of runs and dependency builds.
type Egress struct {
	cfg Config
}

// New checks cfg and fills its defaults.
func New(cfg Config) (*Egress, error) {
	if cfg.MaxConnections == 0 {
		cfg.MaxConnections = DefaultMaxConnections
	}
	if cfg.MaxConnectionsTotal == 0 {
		cfg.MaxConnectionsTotal = DefaultMaxConnectionsTotal
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.MaxConnections < 1 || cfg.MaxConnectionsTotal < 1 || cfg.MaxBytes < 1 {
		return nil, errors.New("egress: the caps on connections and bytes must be positive")
	}
	if cfg.Resolve == nil {
		cfg.Resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", rooted(host))
		}
	}
	if cfg.Local == nil {
		cfg.Local = hostLocal
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.OnDenial == nil {
		cfg.OnDenial = func(string) {}
	}
	return &Egress{cfg: cfg}, nil
}

// rooted is name as the resolver must look it up: with a final dot when
// it has a dot at all, so that the resolver never tries it under the
// search list's domains (a program allowed *.example.org must not reach
// x.example.org.corp.internal). A name of one label stays as it is: the
// operator allowed it by that name, and the hosts file knows localhost
// only without the dot.
func rooted(name string) string {
	if strings.Contains(name, ".") && !strings.HasSuffix(name, ".") {
		return name + "."
	}
	return name
}

// Describe is Info's one-line network policy.
func (e *Egress) Describe() string {
	if !e.Enabled() {
		return "none: a private network namespace with only loopback"
	}
	return "none unless asked: a private network namespace with only loopback; a run whose network.allow is within " +
		patternList(e.cfg.Allow) + " reaches those hosts through the daemon's HTTP proxy in its namespace"
}

// Info describes the policy for the daemon's info, with what a build
// against indexURL (noIndex: none) may reach.
func (e *Egress) Info(indexURL string, noIndex bool) *api.NetworkInfo {
	if e == nil {
		return nil
	}
	info := &api.NetworkInfo{
		Allow:               []string{},
		AllowPrivate:        e.cfg.AllowPrivate,
		MaxConnections:      e.cfg.MaxConnections,
		MaxConnectionsTotal: e.cfg.MaxConnectionsTotal,
		MaxBytes:            e.cfg.MaxBytes,
		Proxy:               "http://127.0.0.1:" + strconv.Itoa(layout.ProxyPort),
	}
	for _, p := range e.cfg.Allow {
		info.Allow = append(info.Allow, p.String())
	}
	if !noIndex {
		if allow, _, err := buildAllow(indexURL); err == nil {
			for _, p := range allow {
				info.Builds = append(info.Builds, p.String())
			}
		}
	}
	return info
}

// Enabled reports whether the operator lets runs ask for network at all.
func (e *Egress) Enabled() bool { return e != nil && len(e.cfg.Allow) > 0 }

// ForRun returns the proxy of run id, which asked for n, or nil when n
// asks for no network. A request beyond the operator's bound is refused
// with api.ErrOverLimit naming "network". The caller closes the proxy.
func (e *Egress) ForRun(id string, n *api.Network) (*Proxy, error) {
	if !n.Wants() {
		return nil, nil
	}
	asked, aerr := api.ParseNetPatterns("network.allow", n.Allow)
	if aerr != nil {
		return nil, aerr
	}
	if !e.Enabled() {
		return nil, api.Errorf(api.ErrOverLimit, "network", "this cellblockd gives runs no network (its operator allows none with --network-allow)")
	}
	for _, p := range asked {
		if !e.within(p) {
			return nil, api.Errorf(api.ErrOverLimit, "network", "network.allow %q is beyond what this cellblockd allows (%s)", p.String(), patternList(e.cfg.Allow))
		}
	}
	return e.newProxy(id, policy{allow: asked, allowPrivate: e.cfg.AllowPrivate}), nil
}

// within reports whether p is within the operator's bound.
func (e *Egress) within(p api.NetPattern) bool {
	for _, b := range e.cfg.Allow {
		if p.Within(b) {
			return true
		}
	}
	return false
}

// ForBuild returns the proxy of a dependency build against the package
// index at indexURL ("" for the installers' default, PyPI): it may reach
// the index's host and port and nothing else. An index named by an IP
// address or as localhost is reached at that address whatever its kind
// (the operator named it); a DNS name is held to the rule for runs:
// private addresses only with --network-allow-private. Cloud metadata
// endpoints never. It is nil for an index that is no http(s) URL.
func (e *Egress) ForBuild(id, indexURL string) (*Proxy, error) {
	allow, named, err := buildAllow(indexURL)
	if err != nil || len(allow) == 0 {
		return nil, err
	}
	return e.newProxy(id, policy{allow: allow, allowPrivate: e.cfg.AllowPrivate || named}), nil
}

// buildAllow is what a build against indexURL may reach, and whether the
// operator named the index's address (an IP literal or localhost).
func buildAllow(indexURL string) ([]api.NetPattern, bool, error) {
	if indexURL == "" {
		var out []api.NetPattern
		for _, s := range pypiHosts {
			p, err := api.ParseNetPattern(s)
			if err != nil {
				return nil, false, err
			}
			out = append(out, p)
		}
		return out, false, nil
	}
	u, err := url.Parse(indexURL)
	if err != nil {
		return nil, false, fmt.Errorf("--index-url %q: %w", indexURL, err)
	}
	port := u.Port()
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, false, nil // a local index needs no network
	case port == "" && u.Scheme == "http":
		port = "80"
	case port == "":
		port = "443"
	}
	host := u.Hostname()
	if a, err := netip.ParseAddr(host); err == nil && a.Is6() && !a.Is4In6() {
		host = "[" + host + "]"
	}
	p, err := api.ParseNetPattern(host + ":" + port)
	if err != nil {
		return nil, false, fmt.Errorf("--index-url %q: %w", indexURL, err)
	}
	return []api.NetPattern{p}, p.Addr.IsValid() || p.Host == "localhost", nil
}

func patternList(ps []api.NetPattern) string {
	s := ""
	for i, p := range ps {
		if i > 0 {
			s += ", "
		}
		s += p.String()
	}
	return s
}
