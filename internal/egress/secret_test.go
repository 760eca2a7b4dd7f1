package egress

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"html"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/secrets"
)

// testValue is the secret's value in these tests.
const testValue = "ghp_TESTVALUEa1b2c3d4e5f6g7h8i9j0klmnop"

// upstreamCA makes a CA and a certificate for localhost and 127.0.0.1
// signed by it: the hosts the proxy puts secrets in, trusted through
// Config.UpstreamRoots as --egress-trust does.
func upstreamCA(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test upstream CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

// recorder is an upstream HTTPS server that keeps what each request
// brought, and answers what the test tells it to.
type recorder struct {
	port string
	mu   sync.Mutex
	seen []*http.Request
	body []string
	// answer, if set, writes the response.
	answer func(w http.ResponseWriter, r *http.Request)
}

func (rc *recorder) last() (*http.Request, string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.seen) == 0 {
		return nil, ""
	}
	return rc.seen[len(rc.seen)-1], rc.body[len(rc.body)-1]
}

func (rc *recorder) count() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.seen)
}

func newRecorder(t *testing.T, cert tls.Certificate, h2 bool) *recorder {
	t.Helper()
	rc := &recorder{}
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.seen = append(rc.seen, r)
		rc.body = append(rc.body, string(b))
		rc.mu.Unlock()
		if rc.answer != nil {
			rc.answer(w, r)
			return
		}
		fmt.Fprintf(w, "auth=%s query=%s", r.Header.Get("Authorization"), r.URL.RawQuery)
	}))
	s.EnableHTTP2 = h2
	s.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	s.StartTLS()
	t.Cleanup(s.Close)
	_, rc.port, _ = net.SplitHostPort(s.Listener.Addr().String())
	return rc
}

// secretFixture is a proxy for a run that asked for the secret TOKEN,
// bound to bound (host:port patterns), and for OTHER, bound to other.
type secretFixture struct {
	p           *Proxy
	store       *secrets.Store
	file        string
	placeholder string
	other       string // OTHER's placeholder
	client      *http.Client
	caPool      *x509.CertPool
	uses        []string
	mu          sync.Mutex
}

func newSecretFixture(t *testing.T, roots *x509.CertPool, network []string, bound, other []string) *secretFixture {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte(testValue+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	otherFile := filepath.Join(dir, "other")
	if err := os.WriteFile(otherFile, []byte("other-secret-value-0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	store, err := secrets.Open([]secrets.Decl{
		{Name: "TOKEN", File: file, Hosts: patterns(t, bound...), UIDs: []uint32{1000}},
		{Name: "OTHER", File: otherFile, Hosts: patterns(t, other...)},
	})
	if err != nil {
		t.Fatal(err)
	}
	ca, made, err := EnsureCA(filepath.Join(dir, "ca"))
	if err != nil || !made {
		t.Fatalf("EnsureCA: %v %v", made, err)
	}
	f := &secretFixture{store: store, file: file}
	e, err := New(Config{Allow: patterns(t, "localhost:1"), AllowPrivate: true, Secrets: store, CA: ca,
		CABundle: "/bundle.pem", UpstreamRoots: roots, OnSecret: func(name, outcome string) {
			f.mu.Lock()
			f.uses = append(f.uses, name+" "+outcome)
			f.mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	// The operator's bound: everything the test servers are.
	e.cfg.Allow = patterns(t, append(append(append([]string{}, network...), bound...), other...)...)
	p, err := e.ForRun("r1", 0, &api.Network{Allow: network}, []string{"TOKEN", "OTHER"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	env := p.Serve(ln)
	t.Cleanup(func() { p.Close() })
	f.p, f.placeholder, f.other = p, env["TOKEN"], env["OTHER"]
	if !strings.HasPrefix(f.placeholder, placeholderPrefix) || env["SSL_CERT_FILE"] != "/bundle.pem" || env["REQUESTS_CA_BUNDLE"] != "/bundle.pem" {
		t.Fatalf("environment %v", env)
	}
	f.caPool = x509.NewCertPool()
	f.caPool.AppendCertsFromPEM(ca.PEM())
	proxyURL, _ := url.Parse(env["HTTPS_PROXY"])
	f.client = &http.Client{
		Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL), TLSClientConfig: &tls.Config{RootCAs: f.caPool}},
		Timeout:   30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	return f
}

func (f *secretFixture) do(t *testing.T, method, u string, hdr map[string]string, body io.Reader) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := f.client.Do(req)
	if err != nil {
		return 0, err.Error(), nil
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b), res.Header
}

// The value goes in the Authorization header and the query of requests
// to the secret's host, over HTTP/1.1 and HTTP/2 upstream, while the
// program sees the placeholder only: in what it sent and in what came
// back, which echoes the value.
func TestSecretInjected(t *testing.T) {
	cert, roots := upstreamCA(t)
	for _, h2 := range []bool{false, true} {
		up := newRecorder(t, cert, h2)
		host := "localhost:" + up.port
		f := newSecretFixture(t, roots, nil, []string{host}, []string{"localhost:1"})
		code, body, hdr := f.do(t, "GET", "https://"+host+"/user?token="+f.placeholder+"&x=1",
			map[string]string{"Authorization": "Bearer " + f.placeholder}, nil)
		seen, _ := up.last()
		if code != 200 || seen == nil {
			t.Fatalf("h2 %v: %d %q", h2, code, body)
		}
		if got := seen.Header.Get("Authorization"); got != "Bearer "+testValue {
			t.Errorf("h2 %v: the host got Authorization %q", h2, got)
		}
		if got := seen.URL.Query().Get("token"); got != testValue {
			t.Errorf("h2 %v: the host got token=%q", h2, got)
		}
		if h2 != (seen.ProtoMajor == 2) {
			t.Errorf("upstream protocol %s, want HTTP/2 %v", seen.Proto, h2)
		}
		want := "auth=Bearer " + f.placeholder + " query=token=" + f.placeholder + "&x=1"
		if body != want || strings.Contains(fmt.Sprint(hdr), testValue) {
			t.Errorf("h2 %v: the program got %q, want %q", h2, body, want)
		}
		uses := f.p.TakeSecretUses()
		if len(uses) != 1 || uses[0] != (api.SecretUse{Secret: "TOKEN", Host: "localhost", Port: atoi(up.port), Method: "GET",
			Path: "/user", Status: 200, Outcome: api.SecretInjected, Count: 1}) {
			t.Errorf("uses %+v", uses)
		}
		if d := f.p.TakeDenials(); len(d) != 0 {
			t.Errorf("denials %+v", d)
		}
		f.mu.Lock()
		if strings.Join(f.uses, ",") != "TOKEN injected,TOKEN redacted" {
			t.Errorf("metrics told %v", f.uses)
		}
		f.mu.Unlock()
	}
}

func atoi(s string) int {
	var n int
	fmt.Sscan(s, &n)
	return n
}

// Only the placeholder as it is, in a header's value or the query: a
// placeholder base64-encoded, split in two, in the path or in the body
// goes out as the program wrote it; a Basic credential is decoded and its
// placeholder replaced (pip's and git's way of sending a token).
func TestSecretOnlyWhereItIsReplaced(t *testing.T) {
	cert, roots := upstreamCA(t)
	up := newRecorder(t, cert, false)
	up.answer = func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }
	host := "localhost:" + up.port
	f := newSecretFixture(t, roots, nil, []string{host}, []string{"localhost:1"})
	ph := f.placeholder
	b64 := base64.StdEncoding.EncodeToString([]byte(ph))
	half := len(ph) / 2
	code, _, _ := f.do(t, "POST", "https://"+host+"/p/"+ph+"?q="+b64, map[string]string{
		"X-Encoded": b64, "X-Half-1": ph[:half], "X-Half-2": ph[half:], "Authorization": "Bearer " + b64,
	}, strings.NewReader("body "+ph))
	seen, body := up.last()
	if code != 200 || seen == nil {
		t.Fatalf("%d", code)
	}
	for _, h := range []string{"X-Encoded", "Authorization"} {
		if got := seen.Header.Get(h); !strings.Contains(got, b64) {
			t.Errorf("%s: %q", h, got)
		}
	}
	if seen.Header.Get("X-Half-1")+seen.Header.Get("X-Half-2") != ph || seen.URL.Path != "/p/"+ph || body != "body "+ph {
		t.Errorf("path %q body %q halves %q %q", seen.URL.Path, body, seen.Header.Get("X-Half-1"), seen.Header.Get("X-Half-2"))
	}
	for k, vs := range seen.Header {
		if strings.Contains(k+strings.Join(vs, ""), testValue) {
			t.Errorf("the value went out in %s", k)
		}
	}
	if strings.Contains(seen.URL.String()+body, testValue) {
		t.Errorf("the value went out in %s %q", seen.URL, body)
	}

	// Basic: user:placeholder.
	up.answer = func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "echo %s", r.Header.Get("Authorization"))
	}
	code, got, _ := f.do(t, "GET", "https://__token__:"+ph+"@"+host+"/simple/", nil, nil)
	seen, _ = up.last()
	user, pass, ok := seen.BasicAuth()
	if code != 200 || !ok || user != "__token__" || pass != testValue {
		t.Errorf("Basic: %d %q %q %v", code, user, pass, ok)
	}
	if want := "echo Basic " + base64.StdEncoding.EncodeToString([]byte("__token__:"+ph)); got != want {
		t.Errorf("the echo of the credential came back as %q, want %q", got, want)
	}
}

// A response that carries the value, in any form the proxy knows, in a
// header or a body, plain or gzip, in one piece or cut across writes,
// reaches the program without it.
func TestSecretTakenOutOfResponses(t *testing.T) {
	cert, roots := upstreamCA(t)
	up := newRecorder(t, cert, false)
	host := "localhost:" + up.port
	f := newSecretFixture(t, roots, nil, []string{host}, []string{"localhost:1"})
	v := testValue
	forms := []string{
		v, url.QueryEscape("/" + v)[3:], jsonEscape(v, true),
		base64.StdEncoding.EncodeToString([]byte(v)),
		base64.StdEncoding.EncodeToString([]byte("x" + v + "y")),
		base64.URLEncoding.EncodeToString([]byte("xy" + v)),
		fmt.Sprintf("%x", v), strings.ToUpper(fmt.Sprintf("%x", v)),
	}
	for _, gz := range []bool{false, true} {
		up.answer = func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Echo", "token "+v)
			w.Header().Set("Location", "https://evil.example/?t="+url.QueryEscape(v))
			w.Header().Set("X-"+v, "a value in a header's name")
			var out io.Writer = w
			if gz {
				w.Header().Set("Content-Encoding", "gzip")
				zw := gzip.NewWriter(w)
				defer zw.Close()
				out = zw
			}
			fl := http.NewResponseController(w)
			for _, form := range forms {
				// Each form cut in two writes, flushed apart.
				io.WriteString(out, "["+form[:len(form)/2])
				if zw, ok := out.(*gzip.Writer); ok {
					zw.Flush()
				}
				fl.Flush()
				io.WriteString(out, form[len(form)/2:]+"]\n")
			}
		}
		code, body, hdr := f.do(t, "GET", "https://"+host+"/", nil, nil)
		if code != 200 {
			t.Fatalf("gzip %v: %d %s", gz, code, body)
		}
		all := body + fmt.Sprint(hdr)
		for _, form := range forms {
			if strings.Contains(all, form) {
				t.Errorf("gzip %v: %q came back", gz, form)
			}
		}
		if strings.Contains(strings.ToLower(all), strings.ToLower(v)) || strings.Contains(all, "a value in a header's name") {
			t.Errorf("gzip %v: the value came back:\n%s", gz, all)
		}
		if !strings.HasPrefix(body, "["+f.placeholder+"]\n") || hdr.Get("X-Echo") != "token "+f.placeholder {
			t.Errorf("gzip %v: the value's place holds %q, %q", gz, body, hdr.Get("X-Echo"))
		}
	}
	// An encoding the proxy cannot read is refused.
	up.answer = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "br")
		io.WriteString(w, v)
	}
	if code, body, _ := f.do(t, "GET", "https://"+host+"/", nil, nil); code != 502 || strings.Contains(body, v) {
		t.Errorf("br: %d %q", code, body)
	}
}

// A placeholder goes nowhere but to its secret's hosts over TLS: over
// plain HTTP (headers, URL or body) and to a host bound to another secret
// it is refused, reported as a denial of kind secret, and the server
// never sees it. A blind tunnel to a host bound to none stays blind.
func TestSecretRefusedElsewhere(t *testing.T) {
	cert, roots := upstreamCA(t)
	up := newRecorder(t, cert, false)
	otherUp := newRecorder(t, cert, false)
	// What the plain server got: a request whose body carried the
	// placeholder was cut before it.
	var plainSeen []string
	var mu sync.Mutex
	_, plainPort := server(t, false, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		plainSeen = append(plainSeen, fmt.Sprint(r.URL, r.Header, string(b)))
		mu.Unlock()
		io.WriteString(w, "plain")
	})
	host, otherHost, plainHost := "localhost:"+up.port, "localhost:"+otherUp.port, "localhost:"+plainPort
	f := newSecretFixture(t, roots, []string{plainHost}, []string{host}, []string{otherHost})
	ph := f.placeholder
	for _, c := range []struct {
		name, method, url string
		hdr               map[string]string
		body              string
		reason            string
	}{
		{"plain header", "GET", "http://" + plainHost + "/", map[string]string{"Authorization": "token " + ph}, "", api.DenySecretPlainHTTP},
		{"plain query", "GET", "http://" + plainHost + "/?t=" + ph, nil, "", api.DenySecretPlainHTTP},
		{"plain body", "POST", "http://" + plainHost + "/", nil, strings.Repeat("x", 100<<10) + ph, api.DenySecretPlainHTTP},
		{"plain to the secret's own host", "GET", "http://" + host + "/", map[string]string{"X-T": ph}, "", api.DenySecretPlainHTTP},
		{"plain, in a Basic credential", "GET", "http://__token__:" + ph + "@" + plainHost + "/", nil, "", api.DenySecretPlainHTTP},
		{"another secret's host, header", "GET", "https://" + otherHost + "/", map[string]string{"Authorization": "Bearer " + ph}, "", api.DenySecretHost},
		{"another secret's host, body", "PUT", "https://" + otherHost + "/", nil, "a=" + ph, api.DenySecretHost},
	} {
		var body io.Reader
		if c.body != "" {
			body = strings.NewReader(c.body)
		}
		code, text, hdr := f.do(t, c.method, c.url, c.hdr, body)
		if code != 403 || hdr.Get("X-Cellblock-Denial") != c.reason || !strings.Contains(text, "secret TOKEN") {
			t.Errorf("%s: %d %q %v", c.name, code, text, hdr)
		}
	}
	mu.Lock()
	for _, seen := range plainSeen {
		if strings.Contains(seen, ph[:8]) {
			t.Errorf("the plain server saw the placeholder, or its start: %.200q", seen)
		}
	}
	mu.Unlock()
	if n := otherUp.count(); n != 0 {
		if r, b := otherUp.last(); r.Header.Get("Authorization") != "" || strings.Contains(b, ph) {
			t.Errorf("the other secret's host saw the placeholder: %v %q", r.Header, b)
		}
	}
	// OTHER's own placeholder goes to its host.
	code, text, _ := f.do(t, "GET", "https://"+otherHost+"/", map[string]string{"Authorization": "Bearer " + f.other}, nil)
	if code != 200 || !strings.Contains(text, "auth=Bearer "+f.other) {
		t.Errorf("OTHER to its host: %d %q", code, text)
	}
	if r, _ := otherUp.last(); r.Header.Get("Authorization") != "Bearer other-secret-value-0123456789" {
		t.Errorf("OTHER's host got %q", r.Header.Get("Authorization"))
	}
	got := map[string]int{}
	for _, d := range f.p.TakeDenials() {
		if d.Kind != api.DenialSecret || d.Secret != "TOKEN" || d.Host != "localhost" || !strings.Contains(d.Detail, "refused") {
			t.Errorf("denial %+v", d)
		}
		got[d.Reason] += d.Count
	}
	if got[api.DenySecretPlainHTTP] != 5 || got[api.DenySecretHost] != 2 {
		t.Errorf("denials by reason %v", got)
	}
	refused := 0
	for _, u := range f.p.TakeSecretUses() {
		if u.Outcome == api.SecretRefused {
			refused += u.Count
		}
	}
	if refused != 7 {
		t.Errorf("%d refused uses, want 7", refused)
	}
}

// One connection is to one host: a request on an intercepted connection
// for another Host (the SNI names one host, the Host header another), in
// absolute form, or after a first request on a kept-alive connection, is
// refused and closes the connection; so is a TLS server name that is not
// the CONNECT's; a protocol upgrade is refused. Pipelined requests are
// each handled.
func TestSecretOneHostPerConnection(t *testing.T) {
	cert, roots := upstreamCA(t)
	up := newRecorder(t, cert, false)
	host := "localhost:" + up.port
	f := newSecretFixture(t, roots, nil, []string{host}, []string{"localhost:1"})
	ph := f.placeholder
	dial := func(serverName string) (*tls.Conn, *bufio.Reader) {
		t.Helper()
		c, err := net.Dial("tcp", f.p.listeners[0].Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", host, host)
		br := bufio.NewReader(c)
		res, err := http.ReadResponse(br, nil)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", res, err)
		}
		tc := tls.Client(&bufferedConn{Conn: c, r: br}, &tls.Config{ServerName: serverName, RootCAs: f.caPool, InsecureSkipVerify: serverName != "localhost"})
		return tc, bufio.NewReader(tc)
	}
	send := func(tc *tls.Conn, br *bufio.Reader, raw string) (*http.Response, string) {
		t.Helper()
		if _, err := io.WriteString(tc, raw); err != nil {
			return nil, err.Error()
		}
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			return nil, err.Error()
		}
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	// Kept alive: the first request is the host's, the second names
	// another and carries the placeholder.
	tc, br := dial("localhost")
	res, body := send(tc, br, "GET /1 HTTP/1.1\r\nHost: "+host+"\r\nAuthorization: Bearer "+ph+"\r\n\r\n")
	if res == nil || res.StatusCode != 200 || body != "auth=Bearer "+ph+" query=" {
		t.Fatalf("first request: %v %q", res, body)
	}
	before := up.count()
	res, body = send(tc, br, "GET /2 HTTP/1.1\r\nHost: evil.example\r\nAuthorization: Bearer "+ph+"\r\n\r\n")
	if res == nil || res.StatusCode != 403 || !strings.Contains(body, "secret TOKEN") {
		t.Errorf("another Host: %v %q", res, body)
	}
	if _, err := br.ReadByte(); err == nil {
		t.Errorf("the connection is still open after a request for another host")
	}
	for _, raw := range []string{
		"GET https://evil.example/ HTTP/1.1\r\nHost: " + host + "\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: localhost:1\r\n\r\n",
	} {
		tc, br = dial("localhost")
		if res, body = send(tc, br, raw); res == nil || res.StatusCode != http.StatusMisdirectedRequest {
			t.Errorf("%q: %v %q", raw, res, body)
		}
	}
	tc, br = dial("localhost")
	if res, body = send(tc, br, "GET / HTTP/1.1\r\nHost: "+host+"\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"); res == nil || res.StatusCode != http.StatusNotImplemented {
		t.Errorf("upgrade: %v %q", res, body)
	}
	// Another TLS server name: no certificate, no handshake.
	tc, _ = dial("evil.example")
	if err := tc.Handshake(); err == nil {
		t.Errorf("a handshake for another server name went through")
	}
	// Pipelined: two requests written at once, each answered, the value
	// in each.
	tc, br = dial("localhost")
	req := "GET /a HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Bearer " + ph + "\r\n\r\n"
	io.WriteString(tc, req+strings.Replace(req, "/a", "/b", 1))
	for _, p := range []string{"/a", "/b"} {
		res, err := http.ReadResponse(br, nil)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("pipelined %s: %v %v", p, res, err)
		}
		io.Copy(io.Discard, res.Body)
	}
	if up.count() != before+2 {
		t.Errorf("the host saw %d requests, want %d", up.count(), before+2)
	}
	if seen, _ := up.last(); seen.URL.Path != "/b" || seen.Header.Get("Authorization") != "Bearer "+testValue {
		t.Errorf("pipelined: %s %v", seen.URL.Path, seen.Header)
	}
}

// A rotated value (Reload, as on SIGHUP) is used from the next request on,
// and the old one is still taken out of responses.
func TestSecretRotation(t *testing.T) {
	cert, roots := upstreamCA(t)
	up := newRecorder(t, cert, false)
	host := "localhost:" + up.port
	f := newSecretFixture(t, roots, nil, []string{host}, []string{"localhost:1"})
	hdr := map[string]string{"Authorization": "Bearer " + f.placeholder}
	f.do(t, "GET", "https://"+host+"/", hdr, nil)
	const rotated = "ghp_ROTATEDzzzzzzzzzzzzzzzzzzzzzzzzzz"
	if err := os.WriteFile(f.file, []byte(rotated), 0o600); err != nil {
		t.Fatal(err)
	}
	changed, err := f.store.Reload()
	if err != nil || strings.Join(changed, ",") != "TOKEN" {
		t.Fatalf("Reload: %v %v", changed, err)
	}
	up.answer = func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s", testValue, r.Header.Get("Authorization"))
	}
	_, body, _ := f.do(t, "GET", "https://"+host+"/", hdr, nil)
	if seen, _ := up.last(); seen.Header.Get("Authorization") != "Bearer "+rotated {
		t.Errorf("after the rotation the host got %q", seen.Header.Get("Authorization"))
	}
	if body != f.placeholder+" Bearer "+f.placeholder {
		t.Errorf("the program got %q", body)
	}
	// A file that goes bad keeps the value.
	os.WriteFile(f.file, []byte("short"), 0o600)
	if _, err := f.store.Reload(); err == nil || strings.Contains(err.Error(), "short") {
		t.Errorf("Reload of a bad file: %v", err)
	}
	if f.store.Value("TOKEN") != rotated {
		t.Errorf("the value did not stay")
	}
}

// Asking: an unknown secret is a bad request, another uid's a forbidden
// one, each naming its entry; the secret's hosts are allowed for the run.
func TestSecretAsking(t *testing.T) {
	f := newSecretFixture(t, nil, nil, []string{"api.example.org:443"}, []string{"localhost:1"})
	e := f.p.e
	var aerr *api.Error
	_, err := e.ForRun("r2", 1000, nil, []string{"TOKEN", "NOPE"})
	if !errors.As(err, &aerr) || aerr.Type != api.ErrBadRequest || aerr.Field != "secrets[1]" || !strings.Contains(aerr.Message, "TOKEN") {
		t.Errorf("unknown: %v", err)
	}
	// The names listed are those the caller may use: which secrets
	// exist is for root (info), as which it may use is for each uid.
	for uid, want := range map[uint32]string{0: "declares OTHER, TOKEN", 1000: "TOKEN", 1001: "none you may use"} {
		_, err := e.ForRun("r2", uid, nil, []string{"NOPE"})
		if !errors.As(err, &aerr) || aerr.Type != api.ErrBadRequest || !strings.Contains(aerr.Message, want) ||
			uid != 0 && strings.Contains(aerr.Message, "OTHER") || uid == 1001 && strings.Contains(aerr.Message, "TOKEN") {
			t.Errorf("uid %d, unknown: %v", uid, err)
		}
	}
	_, err = e.ForRun("r2", 1001, nil, []string{"TOKEN"})
	if !errors.As(err, &aerr) || aerr.Type != api.ErrForbidden || aerr.Field != "secrets[0]" || !strings.Contains(aerr.Message, "TOKEN") {
		t.Errorf("not granted: %v", err)
	}
	_, err = e.ForRun("r2", 1000, nil, []string{"OTHER"})
	if !errors.Is(err, api.ErrForbidden) {
		t.Errorf("OTHER has no grant: %v", err)
	}
	for _, uid := range []uint32{0, 1000} {
		p, err := e.ForRun("r2", uid, nil, []string{"TOKEN"})
		if err != nil || p == nil {
			t.Fatalf("uid %d: %v", uid, err)
		}
		if d := p.allowed(target{host: "api.example.org", port: 443}); d != nil {
			t.Errorf("the secret's host is not allowed: %v", d)
		}
		if d := p.allowed(target{host: "other.example.org", port: 443}); d == nil {
			t.Errorf("another host is allowed")
		}
		p.Close()
	}
	for _, s := range e.Secrets() {
		if strings.Contains(fmt.Sprint(s), testValue) {
			t.Errorf("info shows the value: %+v", s)
		}
	}
}

// The filter never lets through a string it looks for, however the stream
// is cut, and holds back only what may begin one.
func TestFilter(t *testing.T) {
	rules := []rule{{find: []byte("secret"), repl: []byte("S")}, {find: []byte("secretive"), repl: []byte("V")}, {find: []byte("cre"), repl: []byte("C")}}
	in := "a secret, secretive, secre, cret, ssecrett, the end secr"
	want := "a S, V, seC, Ct, sSt, the end secr"
	for cut := 1; cut <= len(in); cut++ {
		for _, mk := range []func([]rule, func(*rule) error) *filter{newFilter, newSecretFilter} {
			f := mk(rules, nil)
			var out []byte
			for i := 0; i < len(in); i += cut {
				j := min(i+cut, len(in))
				out, _ = f.feed(out, []byte(in[i:j]), j == len(in))
			}
			if string(out) != want {
				t.Errorf("cut %d, secret %v: %q, want %q", cut, f.secret, out, want)
			}
		}
	}
	f := newFilter(rules, nil)
	out, _ := f.feed(nil, []byte("data: event\n\n"), false)
	if string(out) != "data: event\n\n" {
		t.Errorf("held back %q", out)
	}
	out, _ = f.feed(nil, []byte("x sec"), false)
	if string(out) != "x " {
		t.Errorf("held back %q", out)
	}
	stop := errors.New("stop")
	f = newFilter(rules[:1], func(*rule) error { return stop })
	out, err := f.feed(nil, []byte("abc sec"), false)
	if err != nil || string(out) != "abc " {
		t.Fatalf("%q %v", out, err)
	}
	out, err = f.feed(out, []byte("ret def"), false)
	if err != stop || string(out) != "abc " {
		t.Errorf("%q %v", out, err)
	}
	r := newFilterReader(io.NopCloser(bytes.NewReader([]byte("abcsecretdef"))), newFilter(rules[:1], nil))
	b, _ := io.ReadAll(r)
	if string(b) != "abcSdef" {
		t.Errorf("reader: %q", b)
	}
}

// The CA: made once, 0600 key in a 0700 directory, reused; leaves signed
// by it for exactly the host asked.
func TestEnsureCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	ca, made, err := EnsureCA(dir)
	if err != nil || !made {
		t.Fatal(made, err)
	}
	for p, mode := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, CAKeyFile): 0o600, filepath.Join(dir, CACertFile): 0o644} {
		st, err := os.Stat(p)
		if err != nil || st.Mode().Perm() != mode {
			t.Errorf("%s: %v %v, want %v", p, st.Mode(), err, mode)
		}
	}
	again, made, err := EnsureCA(dir)
	if err != nil || made || !bytes.Equal(again.PEM(), ca.PEM()) {
		t.Errorf("second EnsureCA: %v %v", made, err)
	}
	leaf, err := ca.leaf("api.example.org", netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM())
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "api.example.org", Roots: pool}); err != nil {
		t.Errorf("leaf: %v", err)
	}
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "other.example.org", Roots: pool}); err == nil {
		t.Errorf("the leaf is good for another host")
	}
	bundle, _ := Bundle(ca)
	if !bytes.HasSuffix(bundle, ca.PEM()) {
		t.Errorf("the bundle does not end with the CA")
	}
	// The operator's: a key readable by others is refused.
	keyPEM, _ := os.ReadFile(filepath.Join(dir, CAKeyFile))
	loose := filepath.Join(t.TempDir(), "key.pem")
	os.WriteFile(loose, keyPEM, 0o644)
	if _, err := LoadCA(filepath.Join(dir, CACertFile), loose); err == nil || strings.Contains(err.Error(), "PRIVATE") {
		t.Errorf("a loose key: %v", err)
	}
	os.Chmod(loose, 0o600)
	if _, err := LoadCA(filepath.Join(dir, CACertFile), loose); err != nil {
		t.Errorf("the operator's CA: %v", err)
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		t.Fatal("no key")
	}
}

// No secret may be named as a variable the proxy sets: the jail would
// lose the proxy, or its trust in the CA.
func TestSecretNamesAreNotTheProxysVariables(t *testing.T) {
	for k := range Environ("127.0.0.1:3128") {
		if !api.ReservedSecretName(k) {
			t.Errorf("%s may name a secret", k)
		}
	}
	for k := range CAEnv("/bundle.pem") {
		if !api.ReservedSecretName(k) {
			t.Errorf("%s may name a secret", k)
		}
	}
}

// A small compressed answer that decompresses into a huge one counts what
// it becomes against the run's bytes: the proxy stops it at the cap.
func TestSecretDecompressionCounts(t *testing.T) {
	cert, roots := upstreamCA(t)
	up := newRecorder(t, cert, false)
	host := "localhost:" + up.port
	f := newSecretFixture(t, roots, nil, []string{host}, []string{"localhost:1"})
	f.p.e.cfg.MaxBytes = 4 << 20
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(make([]byte, 64<<20))
	zw.Close()
	up.answer = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		w.Write(gz.Bytes())
	}
	_, body, _ := f.do(t, "GET", "https://"+host+"/", nil, nil)
	if len(body) > 8<<20 {
		t.Errorf("the program got %d bytes past a cap of 4 MiB", len(body))
	}
	var capped bool
	for _, d := range f.p.TakeDenials() {
		capped = capped || d.Reason == api.DenyByteLimit
	}
	if !capped {
		t.Error("no byte_limit denial")
	}
}

// The jail is offered HTTP/1.1 alone; in a run with secrets a host bound
// to none of them is intercepted too (the program sees a certificate of
// the CA), while a run without secrets keeps a blind tunnel to it: the
// program sees the host's own certificate and speaks HTTP/2 with it.
func TestSecretALPNAndBlindTunnels(t *testing.T) {
	cert, roots := upstreamCA(t)
	up := newRecorder(t, cert, true)
	unbound := newRecorder(t, cert, true)
	host, unboundHost := "localhost:"+up.port, "localhost:"+unbound.port
	f := newSecretFixture(t, roots, []string{unboundHost}, []string{host}, []string{"localhost:1"})
	noSecrets, err := f.p.e.ForRun("r3", 0, &api.Network{Allow: []string{unboundHost}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	noSecrets.Serve(ln)
	t.Cleanup(func() { noSecrets.Close() })
	connect := func(p *Proxy, target string, protos []string) (*tls.Conn, error) {
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
		tc := tls.Client(&bufferedConn{Conn: c, r: br}, &tls.Config{ServerName: "localhost", RootCAs: f.caPool, InsecureSkipVerify: true, NextProtos: protos})
		return tc, tc.Handshake()
	}
	for _, target := range []string{host, unboundHost} {
		tc, err := connect(f.p, target, []string{"h2", "http/1.1"})
		if err != nil || tc.ConnectionState().NegotiatedProtocol != "http/1.1" {
			t.Errorf("%s: ALPN h2, http/1.1: %v %q", target, err, tc.ConnectionState().NegotiatedProtocol)
		}
		if issuer := tc.ConnectionState().PeerCertificates[0].Issuer.CommonName; !strings.HasPrefix(issuer, "cellblock egress CA") {
			t.Errorf("%s is presented by %q", target, issuer)
		}
		if _, err := connect(f.p, target, []string{"h2"}); err == nil {
			t.Errorf("%s: a client that speaks h2 alone got a connection", target)
		}
	}
	tc, err := connect(noSecrets, unboundHost, []string{"h2", "http/1.1"})
	if err != nil {
		t.Fatal(err)
	}
	st := tc.ConnectionState()
	if st.NegotiatedProtocol != "h2" || st.PeerCertificates[0].Issuer.CommonName != "test upstream CA" {
		t.Errorf("the blind tunnel: %q, certificate by %q", st.NegotiatedProtocol, st.PeerCertificates[0].Issuer.CommonName)
	}
}

// Close ends an intercepted connection whatever it is doing: here, a
// program that sent its CONNECT and never its TLS handshake, with the
// handshake's deadline far away.
func TestSecretCloseEndsInterception(t *testing.T) {
	old := headerTimeout
	headerTimeout = time.Hour
	t.Cleanup(func() { headerTimeout = old })
	cert, roots := upstreamCA(t)
	up := newRecorder(t, cert, false)
	host := "localhost:" + up.port
	f := newSecretFixture(t, roots, nil, []string{host}, []string{"localhost:1"})
	c, err := net.Dial("tcp", f.p.listeners[0].Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", host, host)
	if res, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || res.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", res, err)
	}
	done := make(chan struct{})
	go func() { f.p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Close waits for the handshake")
	}
}

// A response cut short (the host's connection ends, or the run's byte cap
// stops it) in the middle of a value gives the program nothing of what
// the filter held back: all but the value's last byte would otherwise
// reach it, and the byte cap lets a program choose where the cut falls.
func TestSecretCutResponseKeepsWhatWasHeld(t *testing.T) {
	cert, roots := upstreamCA(t)
	for _, h2 := range []bool{false, true} {
		up := newRecorder(t, cert, h2)
		host := "localhost:" + up.port
		f := newSecretFixture(t, roots, nil, []string{host}, []string{"localhost:1"})
		up.answer = func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "start\n"+testValue[:len(testValue)-1])
			http.NewResponseController(w).Flush()
			panic(http.ErrAbortHandler) // cut, not ended
		}
		_, body, _ := f.do(t, "GET", "https://"+host+"/", nil, nil)
		if strings.Contains(body, testValue[:8]) {
			t.Errorf("h2 %v: the program got the start of the value from a cut response: %q", h2, body)
		}
	}
}

// A request body that breaks off (the program's connection ends) after
// the start of a placeholder gives the host nothing of that start.
func TestFilterReaderKeepsWhatWasHeldOnError(t *testing.T) {
	ph := "cbph_" + strings.Repeat("Q", 40)
	src := io.MultiReader(strings.NewReader("hello "+ph[:20]), iotest.ErrReader(io.ErrUnexpectedEOF))
	r := newFilterReader(io.NopCloser(src), newFilter([]rule{{find: []byte(ph)}}, func(*rule) error { return errPlaceholder }))
	got, err := io.ReadAll(r)
	if err == nil || strings.Contains(string(got), ph[:5]) {
		t.Errorf("read %q, %v: the start of the placeholder passed", got, err)
	}
}

// What the filter of a response holds back does not depend on the value:
// otherwise a program that makes the host echo a guess (a streaming API
// that repeats what it is sent) sees the guess held back exactly when it
// begins the value, and learns the value a character at a time. Here the
// host echoes a guess and waits: the program has the same then, whether
// the guess begins the value or not. A line, or an event of a stream,
// passes at once.
func TestSecretFilterHoldsBackAlikeForAnyGuess(t *testing.T) {
	cert, roots := upstreamCA(t)
	up := newRecorder(t, cert, false)
	host := "localhost:" + up.port
	f := newSecretFixture(t, roots, nil, []string{host}, []string{"localhost:1"})
	release := make(chan struct{})
	up.answer = func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "event: x\n"+r.URL.Query().Get("echo"))
		http.NewResponseController(w).Flush()
		select {
		case <-release:
		case <-time.After(30 * time.Second):
		}
		io.WriteString(w, "\n")
	}
	// firstSeen is what the program has when the event's line arrives.
	firstSeen := func(guess string) string {
		t.Helper()
		res, err := f.client.Get("https://" + host + "/?echo=" + url.QueryEscape(guess))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var got []byte
		buf := make([]byte, 4096)
		for !bytes.Contains(got, []byte("event: x\n")) {
			n, err := res.Body.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil {
				t.Fatalf("%q: %v", got, err)
			}
		}
		release <- struct{}{}
		io.Copy(io.Discard, res.Body)
		return string(got)
	}
	other := strings.Map(func(r rune) rune { return 'z' - (r % 7) }, testValue)
	for _, k := range []int{4, 12, len(testValue) - 1} {
		a, b := firstSeen("data: "+testValue[:k]), firstSeen("data: "+other[:k])
		if a != b {
			t.Errorf("a guess of %d bytes: the program has %q when it is the value's start, %q when not", k, a, b)
		}
	}
	up.answer = func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "event: x\ndata: {}\n\n")
		http.NewResponseController(w).Flush()
		<-release
	}
	if got := firstSeen(""); got != "event: x\ndata: {}\n\n" {
		t.Errorf("an event was held back: %q", got)
	}
}

// The proxy asks a secret's host for no compression: a compressed answer
// that carries a value beside what the program chose (a guess, echoed) is
// shorter the more of the value the guess repeats (a BREACH oracle, which
// the run's byte cap, counted on the compressed bytes, lets the program
// read); an answer compressed anyway is still decoded and filtered.
func TestSecretAsksForNoCompression(t *testing.T) {
	cert, roots := upstreamCA(t)
	up := newRecorder(t, cert, true)
	host := "localhost:" + up.port
	f := newSecretFixture(t, roots, nil, []string{host}, []string{"localhost:1"})
	up.answer = func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%q", r.Header.Values("Accept-Encoding"))
	}
	for _, ae := range []string{"", "gzip, br", "gzip;q=1, identity;q=0"} {
		hdr := map[string]string{}
		if ae != "" {
			hdr["Accept-Encoding"] = ae
		}
		if code, body, _ := f.do(t, "GET", "https://"+host+"/", hdr, nil); code != 200 || body != `["identity"]` {
			t.Errorf("the program asked %q: the host was asked %s (%d)", ae, body, code)
		}
	}
}

// A response whose Content-Encoding comes in two lines is read by all of
// them: "identity" then "gzip" is a gzip body, decoded and filtered, not
// one passed on as it is for the program to decode itself.
func TestSecretEveryContentEncodingLine(t *testing.T) {
	cert, roots := upstreamCA(t)
	up := newRecorder(t, cert, false)
	host := "localhost:" + up.port
	f := newSecretFixture(t, roots, nil, []string{host}, []string{"localhost:1"})
	for _, lines := range [][]string{{"identity", "gzip"}, {"gzip", "identity"}, {"", "gzip"}} {
		up.answer = func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Content-Encoding"] = lines
			zw := gzip.NewWriter(w)
			io.WriteString(zw, "token "+testValue)
			zw.Close()
		}
		code, body, _ := f.do(t, "GET", "https://"+host+"/", map[string]string{"Accept-Encoding": "identity"}, nil)
		got := body
		if zr, err := gzip.NewReader(strings.NewReader(body)); err == nil {
			b, _ := io.ReadAll(zr)
			got = string(b)
		}
		if strings.Contains(got, testValue) || code == 200 && got != "token "+f.placeholder {
			t.Errorf("Content-Encoding %q: %d, the program got %q", lines, code, got)
		}
	}
	// Two codings the proxy cannot undo in order are refused.
	up.answer = func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Encoding"] = []string{"gzip", "gzip"}
		io.WriteString(w, testValue)
	}
	if code, body, _ := f.do(t, "GET", "https://"+host+"/", nil, nil); code != 502 || strings.Contains(body, testValue) {
		t.Errorf("gzip twice: %d %q", code, body)
	}
}

// A range of a resource that holds a value (one the host stored from a
// request's header or query) would give the program the value in pieces,
// each too short for the filter to know: requests to a secret's host go
// without Range, and the whole answer is filtered.
func TestSecretNoRangeOfAValue(t *testing.T) {
	cert, roots := upstreamCA(t)
	up := newRecorder(t, cert, false)
	host := "localhost:" + up.port
	f := newSecretFixture(t, roots, nil, []string{host}, []string{"localhost:1"})
	const prefix = "id: 7\ntoken: "
	up.answer = func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "stored.txt", time.Unix(1e9, 0), strings.NewReader(prefix+testValue+"\n"))
	}
	for _, hdr := range []map[string]string{
		{"Range": fmt.Sprintf("bytes=%d-%d", len(prefix), len(prefix)+17)},
		{"Range": fmt.Sprintf("bytes=%d-", len(prefix)+5)},
		{"Range": "bytes=0-3", "If-Range": `"x"`},
	} {
		code, body, _ := f.do(t, "GET", "https://"+host+"/stored.txt", hdr, nil)
		if code != 200 || body != prefix+f.placeholder+"\n" {
			t.Errorf("%v: %d %q", hdr, code, body)
		}
		if seen, _ := up.last(); seen.Header.Get("Range") != "" || seen.Header.Get("If-Range") != "" {
			t.Errorf("the host was asked %v", seen.Header)
		}
	}
}

// A value with punctuation (an AWS secret key, a base64 token) comes back
// in the escapings servers commonly use, each taken out: JSON with "\/"
// (PHP's json_encode), percent-encoding in lower case, HTML escaping.
func TestSecretValueFormsOfPunctuation(t *testing.T) {
	const v = "wJalrXUtnFEMI/K7MDENG+bPxRfiCY=&<x>'\"EXAMPLEKEY"
	lower := regexp.MustCompile(`%[0-9A-F]{2}`)
	lowerPct := func(s string) string { return lower.ReplaceAllStringFunc(s, strings.ToLower) }
	owasp := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&#x27;", "/", "&#x2F;")
	ph := "cbph_" + strings.Repeat("P", 40)
	for _, form := range []string{
		strings.ReplaceAll(jsonEscape(v, false), "/", `\/`),
		strings.ReplaceAll(jsonEscape(v, true), "/", `\/`),
		lowerPct(url.QueryEscape(v)), lowerPct(url.PathEscape(v)),
		html.EscapeString(v), owasp.Replace(v),
	} {
		out, _ := newSecretFilter(valueForms(v, ph, nil), nil).string("[" + form + "]")
		if out != "["+ph+"]" {
			t.Errorf("%q came back as %q", form, out)
		}
	}
}
