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
// A run may also ask for the operator's secrets (package secrets): the
// proxy then allows the secrets' hosts too, terminates TLS to them with a
// CA of the daemon's, and puts each value in place of the run's
// placeholder in the requests to the secret's hosts (see secret.go).
//
// It decides policy and moves bytes; it never touches a namespace itself
// (nsjail makes the socket) and it learns the operator's bound from
// Config. It must not let a secret's value reach a jail, a log line, an
// error or a denial: values go only into requests to their hosts, over
// TLS, and what comes back from there passes a filter that takes them
// out.
package egress

import (
	"context"
	"crypto/x509"
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
	"github.com/cellblock/cellblock/internal/secrets"
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
	// OnDenial is told the reason (api.Deny*) of every network denial,
	// for metrics; nil for none.
	OnDenial func(reason string)
	// Secrets are the secrets runs may ask for; nil for none. CA is then
	// required: it signs the certificates the proxy presents to a jail
	// for the secrets' hosts, which the jail trusts through the bundle at
	// CABundle (a path in the jail). UpstreamRoots verify those hosts
	// (nil: the system's roots).
	Secrets       *secrets.Store
	CA            *CA
	CABundle      string
	UpstreamRoots *x509.CertPool
	// OnSecret is told of every use of a secret by its outcome
	// (api.Secret*), for metrics; nil for none.
	OnSecret func(name, outcome string)
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
	if cfg.OnSecret == nil {
		cfg.OnSecret = func(string, string) {}
	}
	if cfg.Secrets.Len() > 0 && (cfg.CA == nil || cfg.CABundle == "") {
		return nil, errors.New("egress: secrets need a CA and the path of its bundle in the jail")
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

// ForRun returns the proxy of run id, which uid asked for with network n
// and the secrets named secretNames, or nil when it asks for neither. A
// request beyond the operator's bound is refused with api.ErrOverLimit
// naming "network"; an unknown secret with api.ErrBadRequest and a secret
// not granted to uid with api.ErrForbidden, each naming its entry of
// "secrets". Each secret asked for allows its hosts. The caller closes
// the proxy.
func (e *Egress) ForRun(id string, uid uint32, n *api.Network, secretNames []string) (*Proxy, error) {
	if !n.Wants() && len(secretNames) == 0 {
		return nil, nil
	}
	var asked []api.NetPattern
	if n.Wants() {
		var aerr *api.Error
		if asked, aerr = api.ParseNetPatterns("network.allow", n.Allow); aerr != nil {
			return nil, aerr
		}
	}
	runSecrets, err := e.secretsFor(uid, secretNames)
	if err != nil {
		return nil, err
	}
	if !e.Enabled() {
		return nil, api.Errorf(api.ErrOverLimit, "network", "this cellblockd gives runs no network (its operator allows none with --network-allow)")
	}
	for _, p := range asked {
		if !e.within(p) {
			return nil, api.Errorf(api.ErrOverLimit, "network", "network.allow %q is beyond what this cellblockd allows (%s)", p.String(), patternList(e.cfg.Allow))
		}
	}
	for _, s := range runSecrets {
		for _, h := range s.hosts {
			// The daemon's configuration keeps them within; should it
			// not, the bound still applies.
			if !e.within(h) {
				return nil, api.Errorf(api.ErrOverLimit, "network", "secret %s's host %q is beyond what this cellblockd allows (%s)", s.name, h.String(), patternList(e.cfg.Allow))
			}
			asked = append(asked, h)
		}
	}
	return e.newProxy(id, policy{allow: asked, allowPrivate: e.cfg.AllowPrivate, secrets: runSecrets}), nil
}

// secretsFor checks the secrets uid asked for and gives each its
// placeholder for the run.
func (e *Egress) secretsFor(uid uint32, names []string) ([]*runSecret, error) {
	var out []*runSecret
	for i, name := range names {
		field := fmt.Sprintf("secrets[%d]", i)
		d, ok := e.cfg.Secrets.Decl(name)
		if !ok {
			// The names the caller may use: which secrets exist is for
			// root to see (info).
			names := e.secretNames(uid)
			switch {
			case e.cfg.Secrets.Len() == 0:
				return nil, api.Errorf(api.ErrBadRequest, field, "no secret %.80q: this cellblockd declares none (cellblockd --secret)", name)
			case uid == 0:
				return nil, api.Errorf(api.ErrBadRequest, field, "no secret %.80q: this cellblockd declares %s", name, strings.Join(names, ", "))
			case len(names) == 0:
				return nil, api.Errorf(api.ErrBadRequest, field, "no secret %.80q: this cellblockd declares none you may use", name)
			}
			return nil, api.Errorf(api.ErrBadRequest, field, "no secret %.80q: those you may use are %s", name, strings.Join(names, ", "))
		}
		if !d.Granted(uid) {
			return nil, api.Errorf(api.ErrForbidden, field, "uid %d may not use secret %s (cellblockd --secret-allow-uid %s=UID grants it)", uid, name, name)
		}
		out = append(out, &runSecret{name: name, hosts: d.Hosts, placeholder: newPlaceholder()})
	}
	return out, nil
}

// secretNames are the names of the secrets uid may ask for.
func (e *Egress) secretNames(uid uint32) []string {
	var names []string
	for _, si := range e.cfg.Secrets.Info() {
		if d, _ := e.cfg.Secrets.Decl(si.Name); d.Granted(uid) {
			names = append(names, si.Name)
		}
	}
	return names
}

// Secrets lists the declared secrets, their hosts and grants, for root's
// info; nil when there are none.
func (e *Egress) Secrets() []api.SecretInfo {
	if e == nil || e.cfg.Secrets.Len() == 0 {
		return nil
	}
	return e.cfg.Secrets.Info()
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

// CAEnv are the variables that point a jail's TLS clients at bundle, the
// CA bundle that trusts the proxy's certificates: OpenSSL's (Python's ssl,
// urllib, httpx, uv), requests', curl's, pip's, Node's and git's.
func CAEnv(bundle string) map[string]string {
	return map[string]string{
		"SSL_CERT_FILE":       bundle,
		"REQUESTS_CA_BUNDLE":  bundle,
		"CURL_CA_BUNDLE":      bundle,
		"PIP_CERT":            bundle,
		"NODE_EXTRA_CA_CERTS": bundle,
		"GIT_SSL_CAINFO":      bundle,
	}
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
