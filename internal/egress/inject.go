package egress

import (
	"bufio"
	"compress/gzip"
	"compress/zlib"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellblock/cellblock/internal/api"
)

// The interception of the connections to the hosts of a run's secrets:
// see secret.go for what is replaced where, and what is refused.

// errPlaceholder stops a body that carries a placeholder where it may not
// go.
var errPlaceholder = errors.New("a secret's placeholder where it may not go")

// maxSent bounds the values kept per secret for filtering responses: the
// value of each rotation (SIGHUP) since the run began, the oldest
// forgotten first.
const maxSent = 8

// boundSecrets are the run's secrets bound to t.
func (p *Proxy) boundSecrets(t target) []*runSecret {
	var bound []*runSecret
	for _, s := range p.pol.secrets {
		if s.boundTo(t) {
			bound = append(bound, s)
		}
	}
	return bound
}

// foreignPlaceholder is the denial of a request to t that carries, in
// texts, the placeholder of a secret of the run not in bound; nil when it
// carries none.
func (p *Proxy) foreignPlaceholder(t target, bound []*runSecret, texts ...string) *denial {
	for _, s := range foundIn(p.pol.secrets, texts...) {
		if !slices.Contains(bound, s) {
			return hostDenial(t, s)
		}
	}
	return nil
}

// foreign are the run's secrets not in bound.
func (p *Proxy) foreign(bound []*runSecret) []*runSecret {
	var out []*runSecret
	for _, s := range p.pol.secrets {
		if !slices.Contains(bound, s) {
			out = append(out, s)
		}
	}
	return out
}

func hostDenial(t target, s *runSecret) *denial {
	return &denial{host: t.label(), port: t.port, reason: api.DenySecretHost, secret: s,
		why: fmt.Sprintf("it carries secret %s's placeholder, and the secret goes only to %s", s.name, patternList(s.hosts))}
}

func plainDenial(t target, s *runSecret) *denial {
	return &denial{host: t.label(), port: t.port, reason: api.DenySecretPlainHTTP, secret: s,
		why: fmt.Sprintf("it carries secret %s's placeholder over plain HTTP; the secret goes only over HTTPS to %s", s.name, patternList(s.hosts))}
}

// denySecret records a refused use of d's secret: a denial of kind
// secret, a use, the metrics and the log (never a value: the proxy holds
// none when it refuses).
func (p *Proxy) denySecret(d *denial, what, method, path string) {
	s := d.secret
	p.e.cfg.OnSecret(s.name, api.SecretRefused)
	// Debug, as network denials: a program may send many, and each is in
	// the run's result, audit line and metrics.
	p.log.Debug("secret refused", "secret", s.name, "host", d.host, "port", d.port, "method", method, "path", path, "reason", d.reason)
	p.record(api.Denial{Kind: api.DenialSecret, Secret: s.name, Detail: what + " refused: " + d.why,
		Host: d.host, Port: int(d.port), Reason: d.reason, Count: 1})
	p.use(api.SecretUse{Secret: s.name, Host: d.host, Port: int(d.port), Method: method, Path: path,
		Status: http.StatusForbidden, Outcome: api.SecretRefused, Count: 1})
}

// use records a use of a secret, merged with an earlier one alike. Past
// maxDenials distinct ones, the last entry counts the rest.
func (p *Proxy) use(u api.SecretUse) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.uses {
		x := &p.uses[i]
		if x.Secret == u.Secret && x.Host == u.Host && x.Port == u.Port && x.Method == u.Method &&
			x.Path == u.Path && x.Status == u.Status && x.Outcome == u.Outcome {
			x.Count++
			return
		}
	}
	if len(p.uses) < maxDenials-1 {
		p.uses = append(p.uses, u)
		return
	}
	if len(p.uses) < maxDenials {
		p.uses = append(p.uses, api.SecretUse{Path: fmt.Sprintf("(more kinds of request than a result lists, %d; the rest are counted here)", maxDenials-1)})
	}
	p.uses[len(p.uses)-1].Count++
}

// usePath is a request's path as a use records it.
func usePath(u *url.URL) string {
	path := u.EscapedPath()
	if len(path) > api.MaxSecretUsePath {
		path = path[:api.MaxSecretUsePath]
	}
	return path
}

// value is s's current value, remembered as sent for the responses'
// filter.
func (p *Proxy) value(s *runSecret) string {
	v := p.e.cfg.Secrets.Value(s.name)
	p.mu.Lock()
	defer p.mu.Unlock()
	sent := p.sent[s]
	if !slices.Contains(sent, v) {
		if len(sent) >= maxSent {
			sent = sent[1:]
		}
		p.sent[s] = append(sent, v)
	}
	return v
}

// responseRules are the rules that take every value of the run's secrets
// out of a response: the current one, those it replaced, each one this
// proxy sent, in every form valueForms knows; and extra.
func (p *Proxy) responseRules(extra []rule) []rule {
	var rules []rule
	for _, s := range p.pol.secrets {
		values := p.e.cfg.Secrets.Values(s.name)
		p.mu.Lock()
		for _, v := range p.sent[s] {
			if !slices.Contains(values, v) {
				values = append(values, v)
			}
		}
		p.mu.Unlock()
		for _, v := range values {
			rules = append(rules, valueForms(v, s.placeholder, s)...)
		}
	}
	return append(rules, extra...)
}

// secureTransport sends the requests of intercepted connections: over TLS
// of the proxy's own, verified against the upstream roots, HTTP/2 when the
// host offers it; through the same checks, caps and counts as a tunnel.
// spare, if set, gives a connection to the host already made, or nil.
func (p *Proxy) secureTransport(spare func() net.Conn) *http.Transport {
	return &http.Transport{
		Proxy: nil, // never the daemon's own proxy settings
		DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return p.dialTLS(ctx, addr, spare)
		},
		ForceAttemptHTTP2:      true,
		MaxIdleConnsPerHost:    4,
		MaxConnsPerHost:        p.e.cfg.MaxConnections,
		IdleConnTimeout:        idleTimeout,
		MaxResponseHeaderBytes: 1 << 20,
		// serveSecure asks for no compression, and decodes what comes
		// compressed anyway.
		DisableCompression: true,
	}
}

// dialTLS connects to addr as connect does (or takes the connection
// spare gives) and speaks TLS with it, verifying it is the host the
// program named.
func (p *Proxy) dialTLS(ctx context.Context, addr string, spare func() net.Conn) (net.Conn, error) {
	t, err := parseTarget(addr, 443)
	if err != nil {
		return nil, err
	}
	var c net.Conn
	if spare != nil {
		c = spare()
	}
	if c == nil {
		if c, err = p.connect(ctx, t); err != nil {
			return nil, err
		}
	}
	name := t.host
	if t.addr.IsValid() {
		name = t.addr.String()
	}
	tc := tls.Client(c, &tls.Config{
		ServerName: name,
		RootCAs:    p.e.cfg.UpstreamRoots,
		NextProtos: []string{"h2", "http/1.1"},
		MinVersion: tls.VersionTLS12,
	})
	hctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("TLS with %s: %w", t.shown, err)
	}
	return tc, nil
}

// names reports whether hostport (a Host header, an absolute URL's host,
// a TLS server name) names t: the same name or address, and the same port
// when it has one.
func (t target) names(hostport string) bool {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = hostport, ""
	}
	if port != "" && port != strconv.Itoa(int(t.port)) {
		return false
	}
	name, addr, err := api.NormalizeHost(host)
	if err != nil {
		return false
	}
	if t.addr.IsValid() {
		return addr == t.addr
	}
	return !addr.IsValid() && name == t.host
}

// intercept carries out a CONNECT to t, a host bound to the run's secrets
// bound: the program's TLS ends here, with a certificate of the CA for t,
// and each request it sends is handled by serveSecure.
func (p *Proxy) intercept(w http.ResponseWriter, r *http.Request, t target, bound []*runSecret) {
	what := "CONNECT " + t.shown
	if d := p.allowed(t); d != nil {
		p.refuse(w, what, d)
		return
	}
	// Checked now, so that a refusal is the CONNECT's answer as for a
	// tunnel; each connection to the host checks them again.
	if _, err := p.addresses(r.Context(), t); err != nil {
		p.refuseOrFail(w, what, err)
		return
	}
	cert, err := p.e.cfg.CA.leaf(t.host, t.addr)
	if err != nil {
		p.log.Error("make a certificate for an intercepted host", "host", t.shown, "err", err)
		p.fail(w, http.StatusInternalServerError, "cannot make a certificate for "+t.shown)
		return
	}
	client, br, ok := p.takeOver(w)
	if !ok {
		return
	}
	defer p.letGo(client)
	p.serveTLS(r.Context(), client, br, t, bound, cert, p.secure)
}

// takeOver takes the connection of a CONNECT from the server, answers it
// 200, and keeps it among the connections Close ends, whatever they are
// doing (a TLS handshake, requests, a wait). letGo closes it and forgets
// it.
func (p *Proxy) takeOver(w http.ResponseWriter) (net.Conn, *bufio.Reader, bool) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		p.fail(w, http.StatusInternalServerError, "cannot tunnel on this connection")
		return nil, nil, false
	}
	client, brw, err := hj.Hijack()
	if err != nil {
		return nil, nil, false
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		client.Close()
		return nil, nil, false
	}
	p.intercepted[client] = struct{}{}
	p.mu.Unlock()
	_ = client.SetDeadline(time.Time{})
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		p.letGo(client)
		return nil, nil, false
	}
	return client, brw.Reader, true
}

func (p *Proxy) letGo(client net.Conn) {
	client.Close()
	p.mu.Lock()
	delete(p.intercepted, client)
	p.mu.Unlock()
}

// serveTLS ends the program's TLS on client (read through br), with cert
// (for t), offering HTTP/1.1 alone, and serves each request it sends with
// serveSecure, which puts in the values of bound (none for a host bound to
// no secret, whose requests are only checked) and sends it with rt.
func (p *Proxy) serveTLS(ctx context.Context, client net.Conn, br *bufio.Reader, t target, bound []*runSecret, cert *tls.Certificate, rt http.RoundTripper) {
	tc := tls.Server(&bufferedConn{Conn: client, r: br}, &tls.Config{
		MinVersion: tls.VersionTLS12,
		// HTTP/1.1 only: each request is read whole here.
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if hello.ServerName != "" && !t.names(hello.ServerName) {
				return nil, fmt.Errorf("the TLS server name %.100q is not %s, which the CONNECT named", hello.ServerName, t.shown)
			}
			return cert, nil
		},
	})
	_ = tc.SetDeadline(time.Now().Add(headerTimeout))
	if err := tc.HandshakeContext(ctx); err != nil {
		p.log.Debug("TLS with the program failed", "host", t.shown, "err", err)
		return
	}
	_ = tc.SetDeadline(time.Time{})
	// The server is done when the connection is closed: by the server,
	// or by an answer that took it over (Proxy.answer).
	ln := &oneConnListener{done: make(chan struct{})}
	ln.conn = &closeNotifyConn{Conn: tc, onClose: func() { ln.Close() }}
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { p.serveSecure(w, r, t, bound, rt) }),
		ReadHeaderTimeout: headerTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		TLSNextProto:      map[string]func(*http.Server, *tls.Conn, http.Handler){}, // no HTTP/2
		ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
	}
	_ = srv.Serve(ln)
}

// serveSecure carries out one request of an intercepted connection to t,
// sending it on with rt: see secret.go.
func (p *Proxy) serveSecure(w http.ResponseWriter, r *http.Request, t target, bound []*runSecret, rt http.RoundTripper) {
	if !p.enter() {
		return
	}
	defer p.work.Done()
	path := usePath(r.URL)
	what := r.Method + " https://" + t.shown + path
	texts := requestTexts(r)
	// One host per connection: the CONNECT's.
	if !t.names(r.Host) || r.URL.Host != "" && !t.names(r.URL.Host) || r.URL.Scheme != "" && r.URL.Scheme != "https" {
		if found := foundIn(p.pol.secrets, texts...); len(found) > 0 {
			d := hostDenial(t, found[0])
			d.host, d.port = hostOf(r), 0
			p.denySecret(d, what, r.Method, path)
			p.answer(w, http.StatusForbidden, "refused "+what+": "+shortReasons[d.reason], d.reason, what+" refused: "+d.why)
			return
		}
		p.fail(w, http.StatusMisdirectedRequest, fmt.Sprintf("this connection is to %s, which the CONNECT named; a request for %.100q needs a connection of its own", t.shown, r.Host))
		return
	}
	if r.Method == http.MethodConnect {
		p.fail(w, http.StatusMethodNotAllowed, "CONNECT inside a connection to "+t.shown)
		return
	}
	if r.Header.Get("Upgrade") != "" {
		p.fail(w, http.StatusNotImplemented, "cellblock does not carry protocol upgrades (WebSocket) in a run with secrets: it reads every request of such a run, and could not read their frames")
		return
	}
	if d := p.foreignPlaceholder(t, bound, texts...); d != nil {
		p.denySecret(d, what, r.Method, path)
		p.answer(w, http.StatusForbidden, "refused "+what+": "+shortReasons[d.reason], d.reason, what+" refused: "+d.why)
		return
	}

	// The request as it goes on: to t, the placeholders of bound
	// replaced in the header values and the query.
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.Host = r.Host
	out.Close = false
	out.Trailer = nil
	out.TransferEncoding = nil
	var used []*runSecret
	value := func(s *runSecret) string { return p.value(s) }
	query, inQuery := injectQuery(r.URL.RawQuery, bound, value)
	used = append(used, inQuery...)
	out.URL = &url.URL{Scheme: "https", Host: t.shown, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: query}
	removeHop(out.Header)
	// No compression: an answer that carries a value beside what the
	// program chose (an echo) would be shorter the more of the value the
	// program's guess repeats (BREACH), which the run's byte cap, counted
	// on the bytes the host sends, lets the program read. An answer
	// compressed anyway is decoded (decoded) and filtered.
	out.Header.Set("Accept-Encoding", "identity")
	out.Header.Del("Expect") // the server here answered it
	if len(bound) > 0 {
		// The whole answer, which the filter reads whole: a range of a
		// resource that holds a value (stored by the host from a header
		// or a query) gives it in pieces, each too short to be known.
		out.Header.Del("Range")
		out.Header.Del("If-Range")
	}
	var extra []rule
	for name, vs := range out.Header {
		for i, v := range vs {
			nv, u, basic := injectHeader(name, v, bound, value)
			vs[i] = nv
			used = append(used, u...)
			if basic != nil {
				extra = append(extra, *basic)
			}
		}
	}
	used = uniq(used)
	var inBody atomic.Pointer[runSecret]
	if others := p.foreign(bound); len(others) > 0 && r.Body != nil && r.Body != http.NoBody {
		out.Body = newFilterReader(r.Body, newFilter(placeholderRules(others), func(ru *rule) error {
			if inBody.CompareAndSwap(nil, ru.secret) {
				p.denySecret(hostDenial(t, ru.secret), what, r.Method, path)
			}
			return errPlaceholder
		}))
	}

	resp, err := rt.RoundTrip(out)
	if err != nil {
		if s := inBody.Load(); s != nil {
			d := hostDenial(t, s)
			p.answer(w, http.StatusForbidden, "refused "+what+": "+shortReasons[d.reason], d.reason, what+" refused: "+d.why)
			return
		}
		p.used(used, t, r.Method, path, http.StatusBadGateway)
		var d *denial
		if errors.As(err, &d) {
			p.refuse(w, what, d)
			return
		}
		if errors.Is(err, context.Canceled) {
			return
		}
		// Filtered: an error may quote what went out, or what came back.
		msg, _ := newSecretFilter(p.responseRules(extra), nil).string(err.Error())
		p.log.Debug("an intercepted request failed", "host", t.shown, "err", msg)
		p.fail(w, http.StatusBadGateway, what+": "+msg)
		return
	}
	defer resp.Body.Close()
	body, expanded, err := decoded(resp)
	if err != nil {
		p.used(used, t, r.Method, path, http.StatusBadGateway)
		p.fail(w, http.StatusBadGateway, fmt.Sprintf("%s: %v", what, err))
		return
	}
	if expanded {
		// What decompression makes counts against the run's bytes too:
		// a small answer must not become an endless one.
		body = &budgetReader{r: body, p: p, t: t}
	}
	p.used(used, t, r.Method, path, resp.StatusCode)

	// The response as it comes back: every form of every value of the
	// run's secrets replaced, in its headers and its body.
	var redacted sync.Map
	f := newSecretFilter(p.responseRules(extra), func(ru *rule) error {
		if _, seen := redacted.LoadOrStore(ru.secret, true); !seen {
			p.e.cfg.OnSecret(ru.secret.name, api.SecretRedacted)
			p.log.Debug("secret taken out of a response", "secret", ru.secret.name, "host", t.shown, "method", r.Method, "path", path)
		}
		return nil
	})
	removeHop(resp.Header)
	resp.Header.Del("Content-Length") // the filter may change it
	h := w.Header()
	for name, vs := range resp.Header {
		if f.inName(name) {
			continue // a value in a header's name: the header goes
		}
		for _, v := range vs {
			nv, _ := f.string(v)
			h.Add(name, nv)
		}
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	var pending []byte
	for {
		n, rerr := body.Read(buf)
		// What the filter holds back goes to the program only when the
		// answer ends: an answer cut short (by the host, or by the run's
		// byte cap, which the program can make fall where it likes) may
		// be cut inside a value, whose start the filter holds.
		pending, _ = f.feed(pending[:0], buf[:n], rerr == io.EOF)
		if len(pending) > 0 {
			if _, err := w.Write(pending); err != nil {
				return
			}
			_ = rc.Flush()
		}
		if rerr != nil {
			if rerr != io.EOF {
				// Not the error's text: it may quote the host's bytes.
				p.log.Debug("an intercepted response ended early", "host", t.shown)
				panic(http.ErrAbortHandler) // the program sees it cut, not whole
			}
			return
		}
	}
}

// used records the uses of the secrets of list in a request to t that
// ended with status.
func (p *Proxy) used(list []*runSecret, t target, method, path string, status int) {
	for _, s := range list {
		p.e.cfg.OnSecret(s.name, api.SecretInjected)
		p.use(api.SecretUse{Secret: s.name, Host: t.label(), Port: int(t.port), Method: method, Path: path,
			Status: status, Outcome: api.SecretInjected, Count: 1})
	}
}

// hostOf is the host a request named, as a denial shows it.
func hostOf(r *http.Request) string {
	h := r.Host
	if len(h) > 100 {
		h = h[:100]
	}
	return api.ValidUTF8([]byte(h))
}

func uniq(list []*runSecret) []*runSecret {
	var out []*runSecret
	for _, s := range list {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// decoded is resp's body as the filter must read it: a body in gzip or
// deflate (which the proxy does not ask for) is decoded here, and any
// other encoding, or more than one, is refused: the filter cannot read
// it. Every Content-Encoding line counts, not the first alone.
// expanded says the body is decompressed (by the transport or here).
func decoded(resp *http.Response) (body io.Reader, expanded bool, err error) {
	if resp.StatusCode < 200 {
		return nil, false, fmt.Errorf("the host answered %d, which cellblock does not pass on from a host it puts secrets in", resp.StatusCode)
	}
	var codings []string
	for _, line := range resp.Header.Values("Content-Encoding") {
		for _, c := range strings.Split(line, ",") {
			if c = strings.ToLower(strings.TrimSpace(c)); c != "" && c != "identity" {
				codings = append(codings, c)
			}
		}
	}
	resp.Header.Del("Content-Encoding")
	switch {
	case len(codings) == 0:
		return resp.Body, resp.Uncompressed, nil
	case len(codings) > 1:
		return nil, false, errors.New("the response has more than one Content-Encoding, which cellblock does not undo to take secrets out of it")
	}
	switch codings[0] {
	case "gzip", "x-gzip":
		return &lazyReader{open: func() (io.Reader, error) { return gzip.NewReader(resp.Body) }}, true, nil
	case "deflate":
		return &lazyReader{open: func() (io.Reader, error) { return zlib.NewReader(resp.Body) }}, true, nil
	}
	// The encoding's name is not quoted: it is the host's text, which
	// passes no filter here.
	return nil, false, errors.New("the response has a Content-Encoding other than gzip and deflate, which cellblock cannot read to take secrets out of it")
}

// budgetReader counts what it reads against the run's byte cap, as an
// upstream connection does.
type budgetReader struct {
	r io.Reader
	p *Proxy
	t target
}

func (b *budgetReader) Read(buf []byte) (int, error) {
	if len(buf) == 0 {
		return 0, nil
	}
	grant := b.p.reserve(len(buf))
	if grant == 0 {
		b.p.exhaust(b.t)
		return 0, errByteLimit
	}
	n, err := b.r.Read(buf[:grant])
	b.p.giveBack(grant - n)
	return n, err
}

// lazyReader opens its reader on the first read: a body with no content
// (HEAD, 204, 304) is never opened.
type lazyReader struct {
	open func() (io.Reader, error)
	r    io.Reader
	err  error
}

func (l *lazyReader) Read(b []byte) (int, error) {
	if l.r == nil && l.err == nil {
		l.r, l.err = l.open()
		if errors.Is(l.err, io.EOF) {
			l.err = io.EOF // an empty body
		}
	}
	if l.err != nil {
		return 0, l.err
	}
	return l.r.Read(b)
}

// bufferedConn reads first what a bufio.Reader holds of the connection
// (bytes the program sent right after its CONNECT).
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// closeNotifyConn tells onClose, once, that it was closed.
type closeNotifyConn struct {
	net.Conn
	onClose func()
	once    sync.Once
}

func (c *closeNotifyConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.onClose)
	return err
}

// oneConnListener hands a server one connection, then waits until it is
// closed.
type oneConnListener struct {
	conn  net.Conn
	mu    sync.Mutex
	taken bool
	once  sync.Once
	done  chan struct{}
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if !l.taken {
		l.taken = true
		l.mu.Unlock()
		return l.conn, nil
	}
	l.mu.Unlock()
	<-l.done
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *oneConnListener) Addr() net.Addr { return l.conn.LocalAddr() }
