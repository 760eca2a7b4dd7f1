package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
)

func TestClassify(t *testing.T) {
	for addr, want := range map[string]class{
		"93.184.215.14":        public,
		"2606:2800:21f:cb07::": public,
		"8.8.8.8":              public,
		"127.0.0.1":            private,
		"127.4.5.6":            private,
		"::1":                  private,
		"::ffff:127.0.0.1":     private,
		"10.1.2.3":             private,
		"172.16.0.1":           private,
		"192.168.1.1":          private,
		"169.254.1.1":          private,
		"fe80::1":              private,
		"fc00::1":              private,
		"fd12:3456::1":         private,
		"100.64.0.1":           private,
		"192.0.2.1":            private,
		"198.18.0.1":           private,
		"64:ff9b::808:808":     private,
		"2002:808:808::1":      private,
		"2001:db8::1":          private,
		"::8.8.8.8":            private,
		// The IPv4 address an IPv6 one carries counts too.
		"64:ff9b::a9fe:a9fe":        forbidden, // NAT64 of 169.254.169.254
		"64:ff9b::7f00:1":           private,
		"64:ff9b:1::a9fe:a9fe":      forbidden,
		"64:ff9b:1:a9fe:a9:fe00::":  forbidden, // the /48 format
		"::a9fe:a9fe":               forbidden, // IPv4-compatible
		"2002:a9fe:a9fe::1":         forbidden, // 6to4
		"2002:808:808::a9fe:a9fe":   private,
		"2001:0:a9fe:a9fe::1":       forbidden, // Teredo's server
		"2001:0:808:808::5601:5601": forbidden, // Teredo's client, inverted
		"2001:0:808:808::f7f7:f7f7": private,
		"169.254.169.254":           forbidden,
		"::ffff:169.254.169.254":    forbidden,
		"fd00:ec2::254":             forbidden,
		"168.63.129.16":             forbidden,
		"100.100.100.200":           forbidden,
		"0.0.0.0":                   forbidden,
		"0.1.2.3":                   forbidden,
		"::":                        forbidden,
		"224.0.0.1":                 forbidden,
		"255.255.255.255":           forbidden,
		"240.0.0.1":                 forbidden,
		"ff02::1":                   forbidden,
	} {
		if got := classify(netip.MustParseAddr(addr)); got != want {
			t.Errorf("%s is class %d, want %d", addr, got, want)
		}
	}
}

func TestBuildAllow(t *testing.T) {
	for _, c := range []struct {
		url   string
		want  string
		named bool
	}{
		{"", "pypi.org:443 files.pythonhosted.org:443", false},
		{"https://pypi.example.org/simple", "pypi.example.org:443", false},
		{"http://pypi.example.org/simple", "pypi.example.org:80", false},
		{"https://user:pw@pypi.example.org:8443/simple/", "pypi.example.org:8443", false},
		{"http://127.0.0.1:3141/simple/", "127.0.0.1:3141", true},
		{"http://[::1]:3141/simple/", "[::1]:3141", true},
		{"http://localhost:3141/simple/", "localhost:3141", true},
		{"file:///srv/simple", "", false},
	} {
		allow, named, err := buildAllow(c.url)
		if err != nil {
			t.Errorf("%q: %v", c.url, err)
			continue
		}
		var got []string
		for _, p := range allow {
			got = append(got, p.String())
		}
		if strings.Join(got, " ") != c.want || named != c.named {
			t.Errorf("%q: allow %q named %v, want %q %v", c.url, got, named, c.want, c.named)
		}
	}
}

func patterns(t *testing.T, list ...string) []api.NetPattern {
	t.Helper()
	ps, err := api.ParseNetPatterns("test", list)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func TestForRunBound(t *testing.T) {
	e, err := New(Config{Allow: patterns(t, "*.example.org:443", "api.other.io:443", "localhost:8080")})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := e.ForRun("r1", 0, nil, nil); p != nil || err != nil {
		t.Fatalf("no network: %v %v", p, err)
	}
	if p, err := e.ForRun("r1", 0, &api.Network{Allow: []string{}}, nil); p != nil || err != nil {
		t.Fatalf("empty allowlist: %v %v", p, err)
	}
	p, err := e.ForRun("r1", 0, &api.Network{Allow: []string{"a.example.org:443", "*.b.example.org:443", "localhost:8080"}}, nil)
	if err != nil || p == nil {
		t.Fatalf("within the bound: %v", err)
	}
	p.Close()
	for _, beyond := range []string{"example.org:443", "a.example.org:80", "api.other.io:80", "*:443", "evil.io:443", "127.0.0.1:8080"} {
		_, err := e.ForRun("r1", 0, &api.Network{Allow: []string{"a.example.org:443", beyond}}, nil)
		var aerr *api.Error
		if !errors.As(err, &aerr) || aerr.Type != api.ErrOverLimit || aerr.Field != "network" || !strings.Contains(aerr.Message, beyond) {
			t.Errorf("%s: %v", beyond, err)
		}
	}
	off, _ := New(Config{})
	_, err = off.ForRun("r1", 0, &api.Network{Allow: []string{"a.example.org:443"}}, nil)
	if !errors.Is(err, api.ErrOverLimit) || !strings.Contains(err.Error(), "--network-allow") {
		t.Errorf("network off: %v", err)
	}
}

// fixture is a proxy serving a loopback listener, as a jail's would be,
// and an HTTP client that goes through it.
type fixture struct {
	p      *Proxy
	addr   string
	client *http.Client
}

func newFixture(t *testing.T, cfg Config, allow ...string) *fixture {
	t.Helper()
	if cfg.Allow == nil {
		cfg.Allow = patterns(t, "*:1")
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := e.newProxy("test", policy{allow: patterns(t, allow...), allowPrivate: cfg.AllowPrivate})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	env := p.Serve(ln)
	if env["HTTPS_PROXY"] != "http://"+ln.Addr().String() || env["http_proxy"] == "" || env["PIP_PROXY"] == "" {
		t.Fatalf("environment %v", env)
	}
	proxyURL, _ := url.Parse(env["HTTP_PROXY"])
	f := &fixture{p: p, addr: ln.Addr().String(), client: &http.Client{
		Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL), DisableKeepAlives: true,
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
		Timeout: 30 * time.Second,
	}}
	t.Cleanup(func() { p.Close() })
	return f
}

// server is an HTTP test server on 127.0.0.1 and its port.
func server(t *testing.T, tlsOn bool, h http.HandlerFunc) (*httptest.Server, string) {
	t.Helper()
	var s *httptest.Server
	if tlsOn {
		s = httptest.NewTLSServer(h)
	} else {
		s = httptest.NewServer(h)
	}
	t.Cleanup(s.Close)
	_, port, _ := net.SplitHostPort(s.Listener.Addr().String())
	return s, port
}

func hello(w http.ResponseWriter, r *http.Request) {
	fmt.Fprintf(w, "hello %s %s", r.Method, r.URL.Path)
}

func get(t *testing.T, f *fixture, u string) (int, string, http.Header) {
	t.Helper()
	res, err := f.client.Get(u)
	if err != nil {
		return 0, err.Error(), nil
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b), res.Header
}

func TestProxyReachesAllowedHosts(t *testing.T) {
	_, plain := server(t, false, hello)
	_, secure := server(t, true, hello)
	f := newFixture(t, Config{AllowPrivate: true}, "localhost:"+plain, "localhost:"+secure, "127.0.0.1:"+plain)
	for _, u := range []string{
		"http://localhost:" + plain + "/a",
		"https://localhost:" + secure + "/b",
		"http://127.0.0.1:" + plain + "/c",
	} {
		code, body, _ := get(t, f, u)
		if code != 200 || !strings.HasPrefix(body, "hello GET /") {
			t.Errorf("%s: %d %q", u, code, body)
		}
	}
	if d := f.p.TakeDenials(); len(d) != 0 {
		t.Errorf("denials: %+v", d)
	}
}

func TestProxyRefuses(t *testing.T) {
	_, plain := server(t, false, hello)
	_, secure := server(t, true, hello)
	resolve := func(ctx context.Context, host string) ([]netip.Addr, error) {
		switch host {
		case "metadata.test":
			return []netip.Addr{netip.MustParseAddr("169.254.169.254")}, nil
		case "mixed.test":
			return []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("127.0.0.1")}, nil
		}
		return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	}
	f := newFixture(t, Config{Resolve: resolve}, "localhost:"+plain, "localhost:"+secure, "metadata.test:80", "mixed.test:80")
	for _, c := range []struct {
		url, reason string
	}{
		{"http://forbidden.example:80/", api.DenyNotAllowed},
		{"https://forbidden.example/", api.DenyNotAllowed},
		{"https://localhost:1/", api.DenyNotAllowed},                // another port
		{"http://127.0.0.1:" + plain + "/", api.DenyNotAllowed},     // the address, not the name
		{"http://localhost:" + plain + "/", api.DenyPrivateAddress}, // no --network-allow-private
		{"https://localhost:" + secure + "/", api.DenyPrivateAddress},
		{"http://metadata.test/", api.DenyForbiddenAddress},
		{"http://mixed.test/", api.DenyPrivateAddress},
	} {
		code, body, hdr := get(t, f, c.url)
		if strings.HasPrefix(c.url, "https") {
			// The tunnel's refusal is all a client sees of it.
			if !strings.Contains(body, "cellblock refused CONNECT") {
				t.Errorf("%s: %d %q", c.url, code, body)
			}
			continue
		}
		if code != 403 || hdr.Get("X-Cellblock-Denial") != c.reason || !strings.Contains(body, "refused") {
			t.Errorf("%s: %d %q %v", c.url, code, body, hdr)
		}
	}
	got := map[string]int{}
	for _, d := range f.p.TakeDenials() {
		if d.Kind != api.DenialNetwork || d.Detail == "" || d.Count < 1 || d.Host == "" || d.Port == 0 {
			t.Errorf("denial %+v", d)
		}
		got[d.Reason] += d.Count
	}
	want := map[string]int{api.DenyNotAllowed: 4, api.DenyPrivateAddress: 3, api.DenyForbiddenAddress: 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("denials by reason %v, want %v", got, want)
	}
	if d := f.p.TakeDenials(); len(d) != 0 {
		t.Errorf("taken twice: %+v", d)
	}
}

func TestProxyBadRequests(t *testing.T) {
	f := newFixture(t, Config{AllowPrivate: true}, "localhost:1")
	for _, req := range []string{
		"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n",
		"GET https://localhost/ HTTP/1.1\r\nHost: localhost\r\n\r\n",
		"CONNECT localhost HTTP/1.1\r\nHost: localhost\r\n\r\n",
		"CONNECT bad_host!:443 HTTP/1.1\r\nHost: x\r\n\r\n",
	} {
		c, err := net.Dial("tcp", f.addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, req)
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err != nil || res.StatusCode != 400 {
			t.Errorf("%q: %v %v", req, res, err)
		}
	}
	if d := f.p.TakeDenials(); len(d) != 0 {
		t.Errorf("bad requests are no denials: %+v", d)
	}
}

func TestProxyConnectionCaps(t *testing.T) {
	_, plain := server(t, false, hello)
	f := newFixture(t, Config{AllowPrivate: true, MaxConnections: 3, MaxConnectionsTotal: 5}, "localhost:"+plain)
	// Three connections held open: the fourth is refused at once.
	var held []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", f.addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	waitFor(t, func() bool { f.p.mu.Lock(); defer f.p.mu.Unlock(); return f.p.clients == 3 })
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	c.Close()
	if err != nil || res.StatusCode != 403 || res.Header.Get("X-Cellblock-Denial") != api.DenyConnectionLimit {
		t.Fatalf("fourth connection: %v %v", res, err)
	}
	for _, c := range held {
		c.Close()
	}
	waitFor(t, func() bool { f.p.mu.Lock(); defer f.p.mu.Unlock(); return f.p.clients == 0 })
	// Five connections out in all.
	for i := range 7 {
		code, _, hdr := get(t, f, "http://localhost:"+plain+"/")
		switch {
		case i < 5 && code != 200:
			t.Errorf("request %d: %d", i, code)
		case i >= 5 && (code != 403 || hdr.Get("X-Cellblock-Denial") != api.DenyConnectionLimit):
			t.Errorf("request %d: %d %v", i, code, hdr)
		}
	}
	got := map[string]int{}
	for _, d := range f.p.TakeDenials() {
		got[d.Reason] += d.Count
	}
	if got[api.DenyConnectionLimit] != 3 {
		t.Errorf("denials %v", got)
	}
}

func TestProxyByteCap(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	_, plain := server(t, false, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, big) })
	_, secure := server(t, true, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, big) })
	f := newFixture(t, Config{AllowPrivate: true, MaxBytes: 256 << 10}, "localhost:"+plain, "localhost:"+secure)
	code, body, _ := get(t, f, "https://localhost:"+secure+"/")
	if code == 200 && len(body) == len(big) {
		t.Fatalf("a 1 MiB body came through a 256 KiB cap")
	}
	f.p.mu.Lock()
	moved := f.p.bytes
	f.p.mu.Unlock()
	if moved > 256<<10 {
		t.Errorf("moved %d bytes past the cap", moved)
	}
	// Later connections are refused outright.
	code, _, hdr := get(t, f, "http://localhost:"+plain+"/")
	if code != 403 || hdr.Get("X-Cellblock-Denial") != api.DenyByteLimit {
		t.Errorf("after the cap: %d %v", code, hdr)
	}
	got := map[string]int{}
	for _, d := range f.p.TakeDenials() {
		got[d.Reason] += d.Count
	}
	if got[api.DenyByteLimit] != 2 {
		t.Errorf("denials %v", got)
	}
}

// A client that sends its headers slowly (slowloris) is cut off, and one
// that sends a flood of them is refused; the proxy serves others all the
// while.
func TestProxyHostileClients(t *testing.T) {
	defer func(d time.Duration) { headerTimeout = d }(headerTimeout)
	headerTimeout = 200 * time.Millisecond
	_, plain := server(t, false, hello)
	f := newFixture(t, Config{AllowPrivate: true}, "localhost:"+plain)

	slow, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	io.WriteString(slow, "GET http://localhost:"+plain+"/ HTTP/1.1\r\nX-Slow: ")
	_ = slow.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadAll(slow); err != nil {
		t.Errorf("the slow client was not cut off: %v", err)
	}

	flood, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer flood.Close()
	go func() {
		io.WriteString(flood, "GET http://localhost:"+plain+"/"+strings.Repeat("a", 1<<20)+" HTTP/1.1\r\n")
	}()
	res, err := http.ReadResponse(bufio.NewReader(flood), nil)
	if err != nil || res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("header flood: %v %v", res, err)
	}
	if code, _, _ := get(t, f, "http://localhost:"+plain+"/"); code != 200 {
		t.Errorf("the proxy stopped serving: %d", code)
	}
}

// Close ends tunnels in progress and leaves no goroutine behind.
func TestProxyCloseEndsEverything(t *testing.T) {
	before := runtime.NumGoroutine()
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := echo.Accept()
		if err != nil {
			return
		}
		io.Copy(c, c)
		c.Close()
	}()
	_, port, _ := net.SplitHostPort(echo.Addr().String())
	f := newFixture(t, Config{AllowPrivate: true}, "127.0.0.1:"+port)
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT 127.0.0.1:%s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", port)
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", res, err)
	}
	io.WriteString(c, "ping")
	buf := make([]byte, 4)
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("through the tunnel: %q %v", buf, err)
	}
	f.p.Close()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("the tunnel outlived Close: %v", err)
	}
	wg.Wait()
	waitFor(t, func() bool { return runtime.NumGoroutine() <= before })
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 30 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A plain HTTP request goes to the host in its URL, which was checked, and
// says that host, whatever Host header the program set apart from it.
func TestProxyHostHeaderIsTheURLs(t *testing.T) {
	_, plain := server(t, false, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Host) })
	f := newFixture(t, Config{AllowPrivate: true}, "localhost:"+plain)
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET http://localhost:%s/ HTTP/1.1\r\nHost: internal.example\r\n\r\n", plain)
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	if string(b) != "localhost:"+plain {
		t.Errorf("the server saw Host %q", b)
	}
}

// In a session each run gets the caps afresh.
func TestProxyNextRunRenewsTheTotals(t *testing.T) {
	_, plain := server(t, false, hello)
	f := newFixture(t, Config{AllowPrivate: true, MaxConnectionsTotal: 2}, "localhost:"+plain)
	for run := range 2 {
		for i := range 3 {
			code, _, _ := get(t, f, "http://localhost:"+plain+"/")
			want := 200
			if i == 2 {
				want = 403
			}
			if code != want {
				t.Errorf("run %d, request %d: %d, want %d", run, i, code, want)
			}
		}
		if d := f.p.NextRun(); len(d) != 1 || d[0].Reason != api.DenyConnectionLimit {
			t.Errorf("run %d: denials %+v", run, d)
		}
	}
}

// A name that does not resolve is a failure to reach it (502), told
// without the daemon's resolver, and no denial.
func TestProxyUnresolvableName(t *testing.T) {
	resolve := func(ctx context.Context, host string) ([]netip.Addr, error) {
		return nil, &net.DNSError{Err: "no such host", Name: host, Server: "10.9.8.7:53", IsNotFound: true}
	}
	f := newFixture(t, Config{Resolve: resolve}, "nowhere.example:80")
	code, body, _ := get(t, f, "http://nowhere.example/")
	if code != 502 || !strings.Contains(body, "cannot resolve nowhere.example: no such host") || strings.Contains(body, "10.9.8.7") {
		t.Errorf("%d %q", code, body)
	}
	if d := f.p.TakeDenials(); len(d) != 0 {
		t.Errorf("denials %+v", d)
	}
}
