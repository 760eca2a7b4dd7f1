package egress

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
)

// In a run with secrets, HTTPS to a host bound to none of them is read:
// a request that carries one of the run's placeholders, in a header, the
// URL, a Basic credential or the body (in pieces), is refused with a 403
// and reported (a denial of kind secret with the host, a refused use, the
// metric), and the host sees nothing of it; other requests go through, as
// the program wrote them, over HTTP/1.1 and HTTP/2 upstream.
func TestSecretInspectedHTTPS(t *testing.T) {
	cert, roots := upstreamCA(t)
	for _, h2 := range []bool{false, true} {
		bound := newRecorder(t, cert, false)
		un := newRecorder(t, cert, h2)
		unHost := "localhost:" + un.port
		f := newSecretFixture(t, roots, []string{unHost}, []string{"localhost:" + bound.port}, []string{"localhost:1"})
		ph := f.placeholder
		code, body, _ := f.do(t, "GET", "https://"+unHost+"/fine?q=1", map[string]string{"Authorization": "Bearer not-a-placeholder"}, nil)
		if seen, _ := un.last(); code != 200 || body != "auth=Bearer not-a-placeholder query=q=1" || seen == nil || h2 != (seen.ProtoMajor == 2) {
			t.Fatalf("h2 %v: a request with no placeholder: %d %q %v", h2, code, body, seen)
		}
		// The body in pieces, the placeholder cut across two writes.
		pieces := func() io.Reader {
			pr, pw := io.Pipe()
			go func() {
				pw.Write([]byte(strings.Repeat("x", 70<<10) + ph[:9]))
				time.Sleep(10 * time.Millisecond)
				pw.Write([]byte(ph[9:] + "tail"))
				pw.Close()
			}()
			return pr
		}
		for _, c := range []struct {
			name, method, url string
			hdr               map[string]string
			body              func() io.Reader
		}{
			{"header", "GET", "https://" + unHost + "/", map[string]string{"Authorization": "Bearer " + ph}, nil},
			{"another header", "GET", "https://" + unHost + "/", map[string]string{"X-Api-Key": ph}, nil},
			{"query", "GET", "https://" + unHost + "/?key=" + ph, nil, nil},
			{"path", "GET", "https://" + unHost + "/keys/" + ph, nil, nil},
			{"percent-encoded", "GET", "https://" + unHost + "/keys/%" + fmt.Sprintf("%x", ph[0]) + ph[1:] + "?k=%" + fmt.Sprintf("%x", ph[0]) + ph[1:], nil, nil},
			{"Basic credential", "GET", "https://__token__:" + ph + "@" + unHost + "/simple/", nil, nil},
			{"body", "POST", "https://" + unHost + "/", nil, func() io.Reader { return strings.NewReader("k=" + ph) }},
			{"body in pieces", "PUT", "https://" + unHost + "/", nil, pieces},
			{"another secret's", "GET", "https://" + unHost + "/", map[string]string{"Authorization": "Bearer " + f.other}, nil},
		} {
			var body io.Reader
			if c.body != nil {
				body = c.body()
			}
			code, text, hdr := f.do(t, c.method, c.url, c.hdr, body)
			if code != 403 || hdr.Get("X-Cellblock-Denial") != api.DenySecretHost || !strings.Contains(text, "placeholder") {
				t.Errorf("h2 %v, %s: %d %q", h2, c.name, code, text)
			}
		}
		un.mu.Lock()
		for i, r := range un.seen {
			if strings.Contains(fmt.Sprint(r.URL, r.Header)+un.body[i], "cbph_") {
				t.Errorf("h2 %v: the host saw a placeholder, or its start: %v %v %.100q", h2, r.URL, r.Header, un.body[i])
			}
		}
		un.mu.Unlock()
		refused := map[string]int{}
		for _, d := range f.p.TakeDenials() {
			if d.Kind != api.DenialSecret || d.Host != "localhost" || d.Port != atoi(un.port) || d.Reason != api.DenySecretHost {
				t.Errorf("denial %+v", d)
			}
			refused[d.Secret] += d.Count
		}
		if refused["TOKEN"] != 8 || refused["OTHER"] != 1 {
			t.Errorf("h2 %v: denials by secret %v", h2, refused)
		}
		f.mu.Lock()
		if n := strings.Count(strings.Join(f.uses, ","), "TOKEN refused"); n != 8 {
			t.Errorf("h2 %v: the metrics were told %v", h2, f.uses)
		}
		f.mu.Unlock()
	}
}

// rawServer is a TCP server of a protocol that is not TLS: it greets
// first when told to, echoes what it reads, and keeps it.
type rawServer struct {
	port  string
	greet string
	mu    sync.Mutex
	got   bytes.Buffer
}

func newRawServer(t *testing.T, greet string) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	s := &rawServer{greet: greet}
	_, s.port, _ = net.SplitHostPort(ln.Addr().String())
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.WriteString(c, s.greet)
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					s.mu.Lock()
					s.got.Write(buf[:n])
					s.mu.Unlock()
					c.Write(buf[:n])
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return s
}

func (s *rawServer) received() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got.String()
}

// rawConnect opens a tunnel to target through p.
func rawConnect(t *testing.T, p *Proxy, target string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.listeners[0].Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	if res, err := http.ReadResponse(br, nil); err != nil || res.StatusCode != 200 {
		t.Fatalf("CONNECT %s: %v %v", target, res, err)
	}
	return c, br
}

// In a run with secrets, a tunnel that is not TLS carries what it carries,
// the host's greeting first when it speaks first, but is cut at one of
// the run's placeholders in what the program sends, whole or across
// writes: refused and reported, and the host gets nothing of it. What
// may begin a placeholder is held back while more comes, and let go when
// the program pauses.
func TestSecretInspectedRawTunnels(t *testing.T) {
	old := rawHoldIdle
	rawHoldIdle = 50 * time.Millisecond
	t.Cleanup(func() { rawHoldIdle = old })
	cert, roots := upstreamCA(t)
	bound := newRecorder(t, cert, false)
	quiet, greeter := newRawServer(t, ""), newRawServer(t, "220 ready\r\n")
	quietHost, greeterHost := "localhost:"+quiet.port, "localhost:"+greeter.port
	f := newSecretFixture(t, roots, []string{quietHost, greeterHost}, []string{"localhost:" + bound.port}, []string{"localhost:1"})
	ph := f.placeholder

	// The program speaks first; no placeholder: an echo.
	c, br := rawConnect(t, f.p, quietHost)
	io.WriteString(c, "PING\r\n")
	if line, err := br.ReadString('\n'); err != nil || line != "PING\r\n" {
		t.Errorf("echo: %q %v", line, err)
	}
	// A message that ends with what begins a placeholder ("c") reaches
	// the host when the program pauses for its answer.
	io.WriteString(c, "abc")
	got := make([]byte, 3)
	if _, err := io.ReadFull(br, got); err != nil || string(got) != "abc" {
		t.Errorf("a held message: %q %v", got, err)
	}
	c.Close()

	// The host speaks first.
	c, br = rawConnect(t, f.p, greeterHost)
	if line, err := br.ReadString('\n'); err != nil || line != "220 ready\r\n" {
		t.Errorf("greeting: %q %v", line, err)
	}
	io.WriteString(c, "EHLO x\r\n")
	if line, err := br.ReadString('\n'); err != nil || line != "EHLO x\r\n" {
		t.Errorf("after the greeting: %q %v", line, err)
	}

	// The placeholder, whole and in two writes, to both: cut.
	for _, host := range []string{quietHost, greeterHost} {
		for _, writes := range [][]string{{"AUTH " + ph + "\r\n"}, {"AUTH " + ph[:7], ph[7:] + "\r\n"}} {
			c, br := rawConnect(t, f.p, host)
			for _, w := range writes {
				io.WriteString(c, w)
			}
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			if rest, err := io.ReadAll(br); strings.Contains(string(rest), "cbph_") || err != nil {
				t.Errorf("%s, %d writes: the tunnel stayed open, or echoed %q (%v)", host, len(writes), rest, err)
			}
		}
	}
	for _, s := range []*rawServer{quiet, greeter} {
		if strings.Contains(s.received(), "cbph_") {
			t.Errorf("a host got the placeholder, or its start: %q", s.received())
		}
	}
	n := 0
	for _, d := range f.p.TakeDenials() {
		if d.Kind != api.DenialSecret || d.Secret != "TOKEN" || d.Reason != api.DenySecretHost || !strings.HasPrefix(d.Detail, "CONNECT localhost:") {
			t.Errorf("denial %+v", d)
		}
		n += d.Count
	}
	if n != 4 {
		t.Errorf("%d denials, want 4", n)
	}
}

// A program that waits before its TLS handshake is intercepted all the
// same: there is no time after which a tunnel goes blind.
func TestSecretInspectedLateHandshake(t *testing.T) {
	cert, roots := upstreamCA(t)
	bound := newRecorder(t, cert, false)
	un := newRecorder(t, cert, false)
	unHost := "localhost:" + un.port
	f := newSecretFixture(t, roots, []string{unHost}, []string{"localhost:" + bound.port}, []string{"localhost:1"})
	c, br := rawConnect(t, f.p, unHost)
	time.Sleep(300 * time.Millisecond)
	tc := tls.Client(&bufferedConn{Conn: c, r: br}, &tls.Config{ServerName: "localhost", RootCAs: f.caPool})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("handshake: %v", err)
	}
	fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s\r\nX-Key: %s\r\n\r\n", unHost, f.placeholder)
	res, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil || res.StatusCode != 403 {
		t.Errorf("%v %v", res, err)
	}
	if un.count() != 0 {
		t.Errorf("the host got the request")
	}
}
