package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellblock/cellblock/internal/api"
)

// policy is what one proxy allows.
type policy struct {
	allow []api.NetPattern
	// allowPrivate lets names resolve to private addresses (class
	// private); forbidden ones never are.
	allowPrivate bool
	// secrets are the secrets the run asked for; their hosts are in
	// allow.
	secrets []*runSecret
}

// Proxy is the HTTP proxy of one run, session or dependency build. It
// serves the listeners given to Serve until Close, which closes them and
// every connection they carried and returns the denials.
type Proxy struct {
	id  string
	e   *Egress
	pol policy
	log *slog.Logger
	srv *http.Server
	// transport forwards plain HTTP requests, dialling through dial; no
	// connection outlives its request.
	transport *http.Transport
	// secure forwards the requests of intercepted connections (those to
	// the hosts of the run's secrets) over TLS of its own; nil without
	// secrets.
	secure *http.Transport

	mu        sync.Mutex
	closed    bool
	listeners []net.Listener
	clients   int                   // connections open to the proxy
	upstream  map[net.Conn]struct{} // connections open to the outside
	made      int                   // connections made to the outside in all
	bytes     int64                 // bytes carried in all
	overBytes bool                  // the byte cap was reached
	denials   []api.Denial
	// uses are the requests that used a secret since the last
	// TakeSecretUses; sent are the values put in requests, by secret
	// (more than one after a rotation), which responses are filtered of.
	uses []api.SecretUse
	sent map[*runSecret][]string
	// intercepted are the program's connections that the proxy
	// terminates TLS of, which Close closes.
	intercepted map[net.Conn]struct{}
	work        sync.WaitGroup // Serve loops and handlers in progress
}

func (e *Egress) newProxy(id string, pol policy) *Proxy {
	p := &Proxy{id: id, e: e, pol: pol, log: e.cfg.Log.With("egress", id), upstream: map[net.Conn]struct{}{},
		sent: map[*runSecret][]string{}, intercepted: map[net.Conn]struct{}{}}
	p.transport = &http.Transport{
		Proxy:                  nil, // never the daemon's own proxy settings
		DialContext:            p.dialContext,
		DisableKeepAlives:      true,
		DisableCompression:     true,
		MaxResponseHeaderBytes: 1 << 20,
	}
	p.srv = &http.Server{
		Handler:           http.HandlerFunc(p.serveHTTP),
		ReadHeaderTimeout: headerTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
	}
	if len(pol.secrets) > 0 {
		p.secure = p.secureTransport(nil)
	}
	return p
}

// Serve serves ln, a socket listening on the loopback of a jail's network
// namespace, until Close; the proxy owns it from now on. It returns the
// environment variables that point the jail's programs at it. A closed
// proxy closes ln at once.
func (p *Proxy) Serve(ln net.Listener) map[string]string {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		ln.Close()
		return nil
	}
	p.listeners = append(p.listeners, ln)
	p.work.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.work.Done()
		err := p.srv.Serve(&capListener{Listener: ln, p: p})
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			p.log.Warn("the proxy stopped serving", "err", err)
		}
	}()
	env := Environ(ln.Addr().String())
	if len(p.pol.secrets) > 0 {
		for k, v := range CAEnv(p.e.cfg.CABundle) {
			env[k] = v
		}
		for _, s := range p.pol.secrets {
			env[s.name] = s.placeholder
		}
	}
	return env
}

// Environ is the environment that points a jail's programs at a proxy on
// addr (host:port): the variables urllib, requests, httpx, pip, uv and curl
// read. NO_PROXY is left to the run: a program that bypasses the proxy
// reaches only the jail's own loopback.
func Environ(addr string) map[string]string {
	u := "http://" + addr
	return map[string]string{
		"HTTP_PROXY": u, "http_proxy": u,
		"HTTPS_PROXY": u, "https_proxy": u,
		"ALL_PROXY": u, "all_proxy": u,
		"PIP_PROXY": u,
	}
}

// Close stops serving, closes every connection and returns the denials
// not yet taken. It waits for the proxy's goroutines. Closing twice
// returns nothing more.
func (p *Proxy) Close() []api.Denial {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	up := make([]net.Conn, 0, len(p.upstream))
	for c := range p.upstream {
		up = append(up, c)
	}
	for c := range p.intercepted {
		up = append(up, c)
	}
	p.mu.Unlock()
	// Listeners and the connections the server tracks (hijacked tunnels
	// are not: their handlers close them once the upstream side below is
	// closed).
	_ = p.srv.Close()
	for _, ln := range p.listeners {
		ln.Close()
	}
	for _, c := range up {
		c.Close()
	}
	p.transport.CloseIdleConnections()
	if p.secure != nil {
		p.secure.CloseIdleConnections()
	}
	p.work.Wait()
	return p.TakeDenials()
}

// TakeDenials returns the denials since the last call and forgets them:
// a session's run reports those of its own time.
func (p *Proxy) TakeDenials() []api.Denial {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	d := p.denials
	p.denials = nil
	return d
}

// NextRun ends a session's run: it returns the run's denials and starts
// the next run's totals of connections made and bytes moved afresh, so
// that the caps apply to each run of a long session as to a run of its
// own. Connections open now stay open and count on.
func (p *Proxy) NextRun() []api.Denial {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	p.made, p.bytes, p.overBytes = 0, 0, false
	p.mu.Unlock()
	return p.TakeDenials()
}

// TakeSecretUses returns the uses of secrets since the last call and
// forgets them, as TakeDenials.
func (p *Proxy) TakeSecretUses() []api.SecretUse {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	u := p.uses
	p.uses = nil
	return u
}

// deny records a network denial (merged with an earlier one of the same
// host, port and reason) and tells the metrics. Past maxDenials distinct
// ones, the last entry counts the rest.
func (p *Proxy) deny(host string, port uint16, reason, detail string) {
	p.e.cfg.OnDenial(reason)
	p.log.Debug("network denial", "host", host, "port", port, "reason", reason, "detail", detail)
	p.record(api.Denial{Kind: api.DenialNetwork, Detail: detail, Host: host, Port: int(port), Reason: reason, Count: 1})
}

// record adds a denial to the run's, merged with an earlier one of the
// same kind, secret, host, port and reason.
func (p *Proxy) record(nd api.Denial) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.denials {
		d := &p.denials[i]
		if d.Kind == nd.Kind && d.Secret == nd.Secret && d.Host == nd.Host && d.Port == nd.Port && d.Reason == nd.Reason {
			d.Count++
			return
		}
	}
	if len(p.denials) < maxDenials-1 {
		p.denials = append(p.denials, nd)
		return
	}
	if len(p.denials) < maxDenials {
		p.denials = append(p.denials, api.Denial{Kind: api.DenialNetwork,
			Detail: fmt.Sprintf("more network denials than a result lists (%d); the rest are counted here", maxDenials-1)})
	}
	p.denials[len(p.denials)-1].Count++
}

// denial is a refusal on its way to the client.
type denial struct {
	host   string
	port   uint16
	reason string
	// why says it in words, after the host and port.
	why string
	// secret, for a denial of kind api.DenialSecret, is the secret whose
	// placeholder the request carried; method and path are the request's.
	secret       *runSecret
	method, path string
}

func (d *denial) Error() string { return d.why }

// target is a host and port a program asked for.
type target struct {
	host string     // a name in lower case, or "" for an address
	addr netip.Addr // valid for an IP literal
	port uint16
	// shown is host:port as the program wrote it, normalized.
	shown string
}

// parseTarget reads host:port from a request; without a port it takes
// defaultPort, or fails when that is 0 (CONNECT).
func parseTarget(hostport string, defaultPort uint16) (target, error) {
	host, portStr, err := net.SplitHostPort(hostport)
	if err != nil {
		if defaultPort == 0 {
			return target{}, fmt.Errorf("%.100q is not HOST:PORT", hostport)
		}
		host, portStr = hostport, strconv.Itoa(int(defaultPort))
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || port == 0 {
		return target{}, fmt.Errorf("%.100q has no valid port", hostport)
	}
	name, addr, err := api.NormalizeHost(host)
	if err != nil {
		return target{}, err
	}
	t := target{host: name, addr: addr, port: uint16(port)}
	shown := name
	if addr.Is6() {
		shown = "[" + addr.String() + "]"
	} else if addr.IsValid() {
		shown = addr.String()
	}
	t.shown = shown + ":" + strconv.Itoa(int(port))
	return t, nil
}

// label is the host as a denial names it.
func (t target) label() string {
	if t.addr.IsValid() {
		return t.addr.String()
	}
	return t.host
}

// allowed checks t against the allowlist.
func (p *Proxy) allowed(t target) *denial {
	for _, a := range p.pol.allow {
		if a.Matches(t.host, t.addr, t.port) {
			return nil
		}
	}
	return &denial{host: t.label(), port: t.port, reason: api.DenyNotAllowed,
		why: fmt.Sprintf("not in the network allowlist (%s)", patternList(p.pol.allow))}
}

// addresses resolves t (an IP literal is its own address) and keeps the
// addresses the policy lets it reach.
func (p *Proxy) addresses(ctx context.Context, t target) ([]netip.Addr, error) {
	var found []netip.Addr
	if t.addr.IsValid() {
		found = []netip.Addr{t.addr}
	} else {
		rctx, cancel := context.WithTimeout(ctx, resolveTimeout)
		addrs, err := p.e.cfg.Resolve(rctx, t.host)
		cancel()
		if err != nil {
			// In the program's words, without the daemon's resolver.
			why := "the lookup failed"
			var dnsErr *net.DNSError
			switch {
			case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
				why = "no such host"
			case errors.As(err, &dnsErr) && dnsErr.IsTimeout:
				why = "the lookup timed out"
			}
			p.log.Debug("resolve", "host", t.host, "err", err)
			return nil, fmt.Errorf("cannot resolve %s: %s", t.host, why)
		}
		found = addrs
	}
	var ok []netip.Addr
	worst := public
	for _, a := range found {
		a = a.Unmap()
		c := classify(a)
		if c == public {
			// The host's own address is no public host.
			local, err := p.e.cfg.Local(a)
			if err != nil {
				p.log.Warn("look up the route to an address; it is refused as private", "addr", a, "err", err)
			}
			if local || err != nil {
				c = private
			}
		}
		switch {
		case c == forbidden:
			worst = forbidden
		case c == private && !p.pol.allowPrivate:
			worst = max(worst, private)
		default:
			ok = append(ok, a)
		}
	}
	switch {
	case len(ok) > 0:
		return ok, nil
	case worst == forbidden:
		return nil, &denial{host: t.label(), port: t.port, reason: api.DenyForbiddenAddress,
			why: fmt.Sprintf("its address %s is one nothing in a jail may reach (a cloud metadata endpoint, or no single host)", addrList(found))}
	case worst == private:
		return nil, &denial{host: t.label(), port: t.port, reason: api.DenyPrivateAddress,
			why: fmt.Sprintf("its address %s is loopback, private, special-purpose or this host's own, which cellblockd refuses without --network-allow-private", addrList(found))}
	}
	return nil, fmt.Errorf("%s has no address", t.host)
}

func addrList(as []netip.Addr) string {
	s := make([]string, 0, len(as))
	for _, a := range as {
		s = append(s, a.Unmap().String())
		if len(s) == 4 && len(as) > 4 {
			s = append(s, "...")
			break
		}
	}
	return strings.Join(s, ", ")
}

// connect makes a connection to t for a client: policy, caps, resolution,
// then a dial of exactly the addresses checked. A *denial error is a
// refusal; others are failures to reach t.
func (p *Proxy) connect(ctx context.Context, t target) (net.Conn, error) {
	if d := p.allowed(t); d != nil {
		return nil, d
	}
	if d := p.takeConnection(t); d != nil {
		return nil, d
	}
	addrs, err := p.addresses(ctx, t)
	if err != nil {
		return nil, err
	}
	d := net.Dialer{Timeout: dialTimeout}
	var errs []error
	for _, a := range addrs {
		c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(a, t.port).String())
		if err == nil {
			return p.track(c, t)
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("cannot connect to %s: %w", t.shown, errors.Join(errs...))
}

// takeConnection counts a connection to the outside against the run's
// total, or refuses it.
func (p *Proxy) takeConnection(t target) *denial {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.overBytes:
		return &denial{host: t.label(), port: t.port, reason: api.DenyByteLimit,
			why: fmt.Sprintf("this run's connections carried %d bytes, the most it may move (cellblockd --network-max-bytes)", p.e.cfg.MaxBytes)}
	case p.made >= p.e.cfg.MaxConnectionsTotal:
		return &denial{host: t.label(), port: t.port, reason: api.DenyConnectionLimit,
			why: fmt.Sprintf("this run made %d connections, the most it may make (cellblockd --network-max-connections-total)", p.made)}
	}
	p.made++
	return nil
}

// track registers an upstream connection, which Close closes and which
// counts its bytes against the run's cap.
func (p *Proxy) track(c net.Conn, t target) (net.Conn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return nil, errors.New("the proxy is closed")
	}
	uc := &upstreamConn{Conn: c, p: p, t: t}
	p.upstream[uc] = struct{}{}
	return uc, nil
}

// reserve takes up to n bytes of the run's budget for one read or write
// and returns how many it may move; give back what it did not move.
func (p *Proxy) reserve(n int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	grant := int(min(int64(n), max(p.e.cfg.MaxBytes-p.bytes, 0)))
	p.bytes += int64(grant)
	return grant
}

// giveBack returns n reserved bytes that were not moved.
func (p *Proxy) giveBack(n int) {
	if n > 0 {
		p.mu.Lock()
		p.bytes = max(p.bytes-int64(n), 0) // NextRun may have started afresh meanwhile
		p.mu.Unlock()
	}
}

// exhaust records that the run used up its bytes on a connection to t
// (a denial, once) and closes every connection to the outside.
func (p *Proxy) exhaust(t target) {
	p.mu.Lock()
	first := !p.overBytes
	p.overBytes = true
	p.mu.Unlock()
	if first {
		p.deny(t.label(), t.port, api.DenyByteLimit,
			fmt.Sprintf("a connection to %s closed: the run's connections carried %d bytes, the most it may move, and all were closed (cellblockd --network-max-bytes)", t.shown, p.e.cfg.MaxBytes))
	}
	p.closeUpstream()
}

// closeUpstream closes every upstream connection: the byte cap is
// reached.
func (p *Proxy) closeUpstream() {
	p.mu.Lock()
	up := make([]net.Conn, 0, len(p.upstream))
	for c := range p.upstream {
		up = append(up, c)
	}
	p.mu.Unlock()
	for _, c := range up {
		c.Close()
	}
}

// errByteLimit ends a connection that went past the byte cap.
var errByteLimit = errors.New("the run's network byte limit is reached")

// upstreamConn is a connection to the outside: it counts its bytes
// against the run's cap and leaves the proxy's set when closed.
type upstreamConn struct {
	net.Conn
	p    *Proxy
	t    target
	once sync.Once
}

func (c *upstreamConn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return c.Conn.Read(b)
	}
	grant := c.p.reserve(len(b))
	if grant == 0 {
		c.p.exhaust(c.t)
		return 0, errByteLimit
	}
	n, err := c.Conn.Read(b[:grant])
	c.p.giveBack(grant - n)
	return n, err
}

func (c *upstreamConn) Write(b []byte) (int, error) {
	grant := c.p.reserve(len(b))
	n, err := c.Conn.Write(b[:grant])
	c.p.giveBack(grant - n)
	if grant < len(b) && err == nil {
		c.p.exhaust(c.t)
		err = errByteLimit
	}
	return n, err
}

func (c *upstreamConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.p.mu.Lock()
		delete(c.p.upstream, c)
		c.p.mu.Unlock()
	})
	return err
}

// CloseWrite half-closes the connection, as a tunnel does when the
// client finished sending.
func (c *upstreamConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// capListener admits at most MaxConnections client connections at once;
// beyond that it answers a connection with a 403 and closes it.
type capListener struct {
	net.Listener
	p *Proxy
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		p := l.p
		p.mu.Lock()
		closed := p.closed
		admit := !closed && p.clients < p.e.cfg.MaxConnections
		if admit {
			p.clients++
		}
		p.mu.Unlock()
		switch {
		case closed:
			c.Close()
			return nil, net.ErrClosed
		case admit:
			return &clientConn{Conn: c, p: p}, nil
		}
		p.deny("", 0, api.DenyConnectionLimit,
			fmt.Sprintf("a connection to the proxy while %d were open, the most a run may have at once (cellblockd --network-max-connections)", p.e.cfg.MaxConnections))
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		writeRefusal(c, http.StatusForbidden, "refused: too many connections", api.DenyConnectionLimit,
			fmt.Sprintf("this run has %d connections open through the proxy, the most it may have at once", p.e.cfg.MaxConnections))
		c.Close()
	}
}

// clientConn is a connection from the jail to the proxy.
type clientConn struct {
	net.Conn
	p    *Proxy
	once sync.Once
}

func (c *clientConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.p.mu.Lock()
		c.p.clients--
		c.p.mu.Unlock()
	})
	return err
}

func (c *clientConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// enter counts a handler in progress, unless the proxy is closed.
func (p *Proxy) enter() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.work.Add(1)
	return true
}

func (p *Proxy) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if !p.enter() {
		return
	}
	defer p.work.Done()
	if r.Method == http.MethodConnect {
		p.tunnel(w, r)
		return
	}
	p.forward(w, r)
}

// tunnel carries out a CONNECT: TLS, or any other TCP, to an allowed host
// and port.
func (p *Proxy) tunnel(w http.ResponseWriter, r *http.Request) {
	t, err := parseTarget(r.Host, 0)
	if err != nil {
		p.fail(w, http.StatusBadRequest, "CONNECT needs HOST:PORT: "+err.Error())
		return
	}
	// The CONNECT itself may carry a placeholder only of a secret bound
	// to its host; the hosts of the run's secrets are intercepted, and
	// every other CONNECT of a run with secrets inspected (inspect.go).
	bound := p.boundSecrets(t)
	if d := p.foreignPlaceholder(t, bound, append(headerTexts(r.Header), r.Host)...); d != nil {
		d.method = http.MethodConnect
		p.refuse(w, "CONNECT "+t.shown, d)
		return
	}
	switch {
	case len(bound) > 0:
		p.intercept(w, r, t, bound)
		return
	case len(p.pol.secrets) > 0:
		p.inspect(w, r, t)
		return
	}
	up, err := p.connect(r.Context(), t)
	if err != nil {
		p.refuseOrFail(w, "CONNECT "+t.shown, err)
		return
	}
	defer up.Close()
	hj, ok := w.(http.Hijacker)
	if !ok {
		p.fail(w, http.StatusInternalServerError, "cannot tunnel on this connection")
		return
	}
	client, brw, err := hj.Hijack()
	if err != nil {
		return
	}
	defer client.Close()
	_ = client.SetDeadline(time.Time{})
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	splice(client, brw.Reader, up, up)
}

// splice copies both ways, what fromClient reads (the client's bytes) to
// up and what fromUp reads (up's) to client, until each side has finished
// sending, half-closing as each ends; an error on either side ends both.
func splice(client net.Conn, fromClient io.Reader, up net.Conn, fromUp io.Reader) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err := io.Copy(up, fromClient)
		if err != nil {
			up.Close()
			client.Close()
			return
		}
		closeWrite(up)
	}()
	_, err := io.Copy(client, fromUp)
	if err != nil {
		up.Close()
		client.Close()
	} else {
		closeWrite(client)
	}
	<-done
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}

// forward carries out a plain HTTP request given in absolute form.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request) {
	if !r.URL.IsAbs() || r.URL.Host == "" {
		p.fail(w, http.StatusBadRequest, "this is an HTTP proxy: send absolute-URI requests (GET http://host/path) or CONNECT host:port; HTTP_PROXY and HTTPS_PROXY point at it")
		return
	}
	if r.URL.Scheme != "http" {
		p.fail(w, http.StatusBadRequest, fmt.Sprintf("%s URLs go through CONNECT (HTTPS_PROXY), not as a proxy request", r.URL.Scheme))
		return
	}
	t, err := parseTarget(r.URL.Host, 80)
	if err != nil {
		p.fail(w, http.StatusBadRequest, err.Error())
		return
	}
	what := r.Method + " " + t.shown
	// No placeholder goes over plain HTTP, to any host: not in the
	// request's line or headers, nor (found as it streams) in its body.
	if found := foundIn(p.pol.secrets, requestTexts(r)...); len(found) > 0 {
		d := plainDenial(t, found[0])
		d.method, d.path = r.Method, usePath(r.URL)
		p.refuse(w, what, d)
		return
	}
	if d := p.allowed(t); d != nil {
		p.refuse(w, what, d)
		return
	}
	var inBody atomic.Pointer[runSecret]
	if len(p.pol.secrets) > 0 && r.Body != nil && r.Body != http.NoBody {
		r.Body = newFilterReader(r.Body, newFilter(placeholderRules(p.pol.secrets), func(ru *rule) error {
			if inBody.CompareAndSwap(nil, ru.secret) {
				p.denySecret(plainDenial(t, ru.secret), what, r.Method, usePath(r.URL))
			}
			return errPlaceholder
		}))
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// To the host checked, and saying so: the Host header is the
			// URL's, not one the program set apart from it.
			pr.Out.URL = pr.In.URL
			pr.Out.Host = ""
		},
		Transport: p.transport,
		ErrorLog:  slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if s := inBody.Load(); s != nil {
				d := plainDenial(t, s)
				p.answer(w, http.StatusForbidden, "refused "+what+": "+shortReasons[d.reason], d.reason, what+" refused: "+d.why)
				return
			}
			p.refuseOrFail(w, what, err)
		},
	}
	rp.ServeHTTP(w, r)
}

// dialContext is the transport's dialer for plain HTTP: the same checks
// as a tunnel.
func (p *Proxy) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	t, err := parseTarget(addr, 80)
	if err != nil {
		return nil, err
	}
	return p.connect(ctx, t)
}

// refuseOrFail answers a request that could not be carried out: a 403
// for a denial, a 502 for a failure to reach the host.
func (p *Proxy) refuseOrFail(w http.ResponseWriter, what string, err error) {
	var d *denial
	if errors.As(err, &d) {
		p.refuse(w, what, d)
		return
	}
	if errors.Is(err, context.Canceled) {
		return
	}
	p.fail(w, http.StatusBadGateway, what+": "+err.Error())
}

// refuse records d and answers 403 with the reason in the status line
// (where urllib's and requests' errors show it) and the body.
func (p *Proxy) refuse(w http.ResponseWriter, what string, d *denial) {
	if d.secret != nil {
		p.denySecret(d, what, d.method, d.path)
	} else {
		p.deny(d.host, d.port, d.reason, what+" refused: "+d.why)
	}
	p.answer(w, http.StatusForbidden, "refused "+what+": "+shortReasons[d.reason], d.reason, what+" refused: "+d.why)
}

// shortReasons say each reason in the few words of a status line.
var shortReasons = map[string]string{
	api.DenyNotAllowed:       "not in the network allowlist",
	api.DenyPrivateAddress:   "a private address",
	api.DenyForbiddenAddress: "a forbidden address",
	api.DenyConnectionLimit:  "too many connections",
	api.DenyByteLimit:        "the byte limit is reached",
	api.DenySecretHost:       "a secret's placeholder for another host",
	api.DenySecretPlainHTTP:  "a secret's placeholder over plain HTTP",
}

// fail answers an error that is no denial.
func (p *Proxy) fail(w http.ResponseWriter, status int, msg string) {
	p.answer(w, status, http.StatusText(status), "", msg)
}

// answer writes a response whose reason phrase says why, on a connection
// that is then closed.
func (p *Proxy) answer(w http.ResponseWriter, status int, phrase, reason, body string) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "cellblock: "+body, status)
		return
	}
	c, _, err := hj.Hijack()
	if err != nil {
		http.Error(w, "cellblock: "+body, status)
		return
	}
	defer c.Close()
	_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	writeRefusal(c, status, phrase, reason, body)
}

// writeRefusal writes a whole response with a plain-text body.
func writeRefusal(w io.Writer, status int, phrase, reason, body string) {
	phrase = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, "cellblock "+phrase)
	body = "cellblock: " + body + "\n"
	head := fmt.Sprintf("HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n", status, phrase, len(body))
	if reason != "" {
		head += "X-Cellblock-Denial: " + reason + "\r\n"
	}
	_, _ = io.WriteString(w, head+"\r\n"+body)
}
