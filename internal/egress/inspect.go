package egress

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"
)

// The CONNECTs of a run with secrets to hosts bound to none of them.
//
// A run that asked for no secret keeps blind tunnels: the proxy never
// sees inside. A run that asked for secrets has every CONNECT inspected,
// so that its placeholders, which it may send anywhere, are seen and
// refused wherever they go, not only at the hosts of its other secrets:
//
//   - a tunnel whose program speaks first, with a TLS handshake, is
//     intercepted as for a secret's host (a certificate of the CA for the
//     host, HTTP/1.1, each request read and sent on over TLS of the
//     proxy's own, verified as for a secret's host), and each request is
//     checked as there, with nothing put in: a placeholder in its headers
//     (a Basic credential decoded), URL or body refuses it (403, a denial
//     of kind secret), the body held back so that nothing of the
//     placeholder reaches the host;
//   - any other tunnel (a protocol that is not TLS, or whose server speaks
//     first) is carried as it is, its program's bytes read for the run's
//     placeholders as they pass, and cut at one, which is refused and
//     reported as above.
//
// What the proxy cannot read it cannot report: a placeholder encoded
// (base64, encrypted, in a WebSocket frame, after a STARTTLS), or sent in
// pieces with pauses between them through a tunnel that is not TLS. It is
// the placeholder, worth nothing outside the run; the value never goes to
// these hosts.

// tlsHandshake is the first byte of a TLS record that carries a
// handshake message, as a ClientHello is.
const tlsHandshake = 0x16

// rawHoldIdle is how long a tunnel that is not TLS holds back what may
// begin a placeholder when its program sends nothing more: then it lets
// it go, so that a protocol whose message ends that way does not stall. A
// variable for tests.
var rawHoldIdle = time.Second

// inspect carries out a CONNECT of a run with secrets to t, a host bound
// to none of them (see above).
func (p *Proxy) inspect(w http.ResponseWriter, r *http.Request, t target) {
	what := "CONNECT " + t.shown
	// Connected first, as a blind tunnel is: a refusal or a failure is
	// the CONNECT's answer, and a server that speaks first is heard.
	up, err := p.connect(r.Context(), t)
	if err != nil {
		p.refuseOrFail(w, what, err)
		return
	}
	defer up.Close()
	client, br, ok := p.takeOver(w)
	if !ok {
		return
	}
	defer p.letGo(client)
	o := firstByte(client, br, up)
	switch {
	case o.err != nil:
		return
	case !o.host && o.b == tlsHandshake:
		cert, err := p.e.cfg.CA.leaf(t.host, t.addr)
		if err != nil {
			p.log.Error("make a certificate for an inspected host", "host", t.shown, "err", err)
			return
		}
		// A transport of this connection's own, as a tunnel has its
		// connection: its first request goes over up; it ends with the
		// connection.
		var spare atomic.Pointer[net.Conn]
		spare.Store(&up)
		rt := p.secureTransport(func() net.Conn {
			if c := spare.Swap(nil); c != nil {
				return *c
			}
			return nil
		})
		defer rt.CloseIdleConnections()
		p.serveTLS(r.Context(), client, br, t, nil, cert, rt)
	default:
		var fromHost io.Reader = up
		if o.host {
			fromHost = io.MultiReader(bytes.NewReader([]byte{o.b}), up)
		}
		splice(client, p.scanner(client, br, t), up, fromHost)
	}
}

// opening is the first byte of a tunnel: the program's (peeked, still
// to be read) or the host's (read).
type opening struct {
	host bool
	b    byte
	err  error
}

// aLongTimeAgo is a deadline that ends a read at once.
var aLongTimeAgo = time.Unix(1, 0)

// firstByte waits for the first byte of either side of a tunnel. The host
// speaking at all (first, or at the same time) makes it the host's: a TLS
// server never speaks first.
func firstByte(client net.Conn, br *bufio.Reader, up net.Conn) opening {
	fromClient, fromHost := make(chan opening, 1), make(chan opening, 1)
	go func() {
		b, err := br.Peek(1)
		o := opening{err: err}
		if len(b) == 1 {
			o = opening{b: b[0]}
		}
		fromClient <- o
	}()
	go func() {
		var b [1]byte
		n, err := up.Read(b[:])
		o := opening{host: true, err: err}
		if n == 1 {
			o = opening{host: true, b: b[0]}
		}
		fromHost <- o
	}()
	// The other side's read is ended by a deadline, which takes nothing.
	var c, h opening
	select {
	case c = <-fromClient:
		_ = up.SetReadDeadline(aLongTimeAgo)
		h = <-fromHost
	case h = <-fromHost:
		_ = client.SetReadDeadline(aLongTimeAgo)
		c = <-fromClient
	}
	_ = up.SetReadDeadline(time.Time{})
	_ = client.SetReadDeadline(time.Time{})
	switch {
	case h.err == nil:
		return h
	case c.err == nil:
		return c
	}
	return opening{err: errors.Join(c.err, h.err)}
}

// scanner reads what the program sends through a tunnel to t that is not
// TLS: it passes as it comes, but for what may begin one of the run's
// placeholders, held back until more comes (or the program pauses, see
// rawHoldIdle); a placeholder ends it with errPlaceholder, and is refused
// and reported.
func (p *Proxy) scanner(client net.Conn, br *bufio.Reader, t target) io.Reader {
	var once atomic.Bool
	f := newFilter(placeholderRules(p.pol.secrets), func(ru *rule) error {
		if once.CompareAndSwap(false, true) {
			p.denySecret(hostDenial(t, ru.secret), "CONNECT "+t.shown, http.MethodConnect, "")
		}
		return errPlaceholder
	})
	return &scanReader{conn: client, src: br, f: f, buf: make([]byte, 32<<10)}
}

// scanReader is the reader scanner makes.
type scanReader struct {
	conn net.Conn // whose read deadline is the pause's
	src  *bufio.Reader
	f    *filter
	buf  []byte
	out  []byte // filtered, not yet returned
	err  error
}

func (s *scanReader) Read(b []byte) (int, error) {
	for len(s.out) == 0 && s.err == nil {
		held := len(s.f.pending) > 0
		if held {
			_ = s.conn.SetReadDeadline(time.Now().Add(rawHoldIdle))
		}
		n, err := s.src.Read(s.buf)
		paused := false
		if held {
			_ = s.conn.SetReadDeadline(time.Time{})
			if errors.Is(err, os.ErrDeadlineExceeded) {
				paused, err = n == 0, nil
			}
		}
		s.out, s.err = s.f.feed(s.out[:0], s.buf[:n], err == io.EOF)
		if s.err == nil {
			s.err = err
		}
		if paused && s.err == nil {
			s.out = append(s.out, s.f.pending...)
			s.f.pending = s.f.pending[:0]
		}
	}
	if len(s.out) > 0 {
		n := copy(b, s.out)
		s.out = s.out[n:]
		return n, nil
	}
	return 0, s.err
}
