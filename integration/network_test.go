package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/audit"
)

// netServers are the servers network tests reach: plain HTTP and HTTPS
// on the host's 127.0.0.1 (never any other address), the HTTPS one with a
// certificate of its own for localhost, which runs trust through
// SSL_CERT_FILE.
type netServers struct {
	Plain, Secure int
	CAPEM         string
	hits          atomic.Int64
	held          chan struct{} // a request waits in /hold
	release       chan struct{} // closed to let /hold answer
	releaseOnce   sync.Once
}

// Release lets the requests waiting in /hold answer.
func (s *netServers) Release() { s.releaseOnce.Do(func() { close(s.release) }) }

// selfSigned makes a certificate for localhost and 127.0.0.1, its own CA.
func selfSigned(t *testing.T) (tls.Certificate, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "cellblock test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		t.Fatal(err)
	}
	return cert, string(certPEM)
}

// startNetServers starts the plain and the TLS server. Paths: /hello
// answers "hello <scheme>", /big 1 MiB, /hold waits for Release.
func startNetServers(t *testing.T) *netServers {
	t.Helper()
	s := &netServers{held: make(chan struct{}, 16), release: make(chan struct{})}
	t.Cleanup(s.Release)
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		fmt.Fprintf(w, "hello %s", scheme)
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		w.Write(make([]byte, 1<<20))
	})
	mux.HandleFunc("/hold", func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		s.held <- struct{}{}
		select {
		case <-s.release:
			fmt.Fprint(w, "released")
		case <-r.Context().Done():
		}
	})
	plain := httptest.NewServer(mux)
	t.Cleanup(plain.Close)
	cert, caPEM := selfSigned(t)
	secure := httptest.NewUnstartedServer(mux)
	secure.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	secure.StartTLS()
	t.Cleanup(secure.Close)
	s.Plain = plain.Listener.Addr().(*net.TCPAddr).Port
	s.Secure = secure.Listener.Addr().(*net.TCPAddr).Port
	s.CAPEM = caPEM
	return s
}

// netDaemon starts the servers and a daemon whose operator allows runs to
// reach them by the name localhost (and, besides, what extra allows), with
// --network-allow-private unless told otherwise in args.
func netDaemon(t *testing.T, private bool, args ...string) (*Daemon, *netServers) {
	t.Helper()
	requireRoot(t)
	s := startNetServers(t)
	flags := []string{
		"--network-allow", fmt.Sprintf("localhost:%d", s.Plain),
		"--network-allow", fmt.Sprintf("localhost:%d", s.Secure),
		"--network-allow", "*.example.org:443",
		"--network-allow", "169.254.169.254:80",
	}
	if private {
		flags = append(flags, "--network-allow-private")
	}
	return startDaemon(t, append(flags, args...)...), s
}

// netPrelude trusts the servers' certificate (given as the input ca_pem)
// and defines fetch(url), which returns "STATUS BODY" or the error.
const netPrelude = `
import os, sys, json, socket, ssl, urllib.request, urllib.error, http.client, urllib.parse
with open("/tmp/ca.pem", "w") as f:
    f.write(ca_pem)
os.environ["SSL_CERT_FILE"] = "/tmp/ca.pem"
os.environ["REQUESTS_CA_BUNDLE"] = "/tmp/ca.pem"

def fetch(url, timeout=30):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return "%d %s" % (r.status, r.read().decode()[:100])
    except urllib.error.HTTPError as e:
        return "HTTP %d %s" % (e.code, e.read().decode().strip())
    except Exception as e:
        return "%s: %s" % (type(e).__name__, e)
`

// netRun runs code after netPrelude with the allowlist allow (none when
// nil) and returns the result, failing on a daemon error.
func netRun(t *testing.T, d *Daemon, s *netServers, code string, allow ...string) *api.Result {
	t.Helper()
	req := &api.RunRequest{Code: netPrelude + code, Inputs: map[string]json.RawMessage{"ca_pem": mustMarshal(t, s.CAPEM)}}
	if allow != nil {
		req.Network = &api.Network{Allow: allow}
	}
	res := run(t, d, req)
	if res.Error != nil || res.ExitCode != 0 {
		t.Fatalf("run: exit %d, error %+v\nstdout:\n%s\nstderr:\n%s", res.ExitCode, res.Error, res.Stdout, res.Stderr)
	}
	return res
}

func mustMarshal(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// lines splits a program's output into lines.
func lines(s string) []string { return strings.Split(strings.TrimRight(s, "\n"), "\n") }

// denialsBy sums a result's denials by reason.
func denialsBy(res *api.Result) map[string]int {
	out := map[string]int{}
	for _, d := range res.Denials {
		out[d.Reason] += d.Count
	}
	return out
}

// An allowed name is reached through the proxy by urllib, over HTTP and
// HTTPS (a tunnel, with the server's certificate checked end to end), and
// by plain http.client talking to the proxy itself.
func TestNetworkURLLibAndHTTPClient(t *testing.T) {
	d, s := netDaemon(t, true)
	allow := []string{fmt.Sprintf("localhost:%d", s.Plain), fmt.Sprintf("localhost:%d", s.Secure)}
	// In a prestarted jail: the proxy's socket is opened at the hand-over.
	waitFor(30*time.Second, func() bool {
		info, err := d.Client.Info(context.Background())
		return err == nil && info.PrestartReady > 0
	})
	res := netRun(t, d, s, fmt.Sprintf(`
print(fetch("http://localhost:%[1]d/hello"))
print(fetch("https://localhost:%[2]d/hello"))
proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
print(proxy.hostname, proxy.port, os.environ["http_proxy"] == os.environ["ALL_PROXY"] == os.environ["PIP_PROXY"])
c = http.client.HTTPSConnection(proxy.hostname, proxy.port, timeout=30, context=ssl.create_default_context(cafile="/tmp/ca.pem"))
c.set_tunnel("localhost", %[2]d)
c.request("GET", "/hello")
r = c.getresponse()
print(r.status, r.read().decode())
c = http.client.HTTPConnection(proxy.hostname, proxy.port, timeout=30)
c.request("GET", "http://localhost:%[1]d/hello")
r = c.getresponse()
print(r.status, r.read().decode())
`, s.Plain, s.Secure), allow...)
	want := []string{"200 hello http", "200 hello https", "127.0.0.1 3128 True", "200 hello https", "200 hello http"}
	if got := lines(res.Stdout); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("output %q, want %q", got, want)
	}
	if len(res.Denials) != 0 {
		t.Errorf("denials: %+v", res.Denials)
	}
	if s.hits.Load() != 4 {
		t.Errorf("the servers saw %d requests, want 4", s.hits.Load())
	}
	if res.Phases == nil || !res.Phases.Prestarted {
		t.Errorf("not in a prestarted jail: %+v", res.Phases)
	}
}

// A jail built for its run (no prestarted one: --prestart 0) gets its
// proxy the same way, after it is built and before the program starts.
func TestNetworkInAFreshJail(t *testing.T) {
	d, s := netDaemon(t, true, "--prestart", "0")
	res := netRun(t, d, s, fmt.Sprintf(`print(fetch("https://localhost:%d/hello"))`, s.Secure), fmt.Sprintf("localhost:%d", s.Secure))
	if res.Stdout != "200 hello https\n" || res.Phases == nil || res.Phases.Prestarted {
		t.Errorf("stdout %q, phases %+v", res.Stdout, res.Phases)
	}
}

// A name outside the allowlist gets a 403 saying why, and the denial is in
// the result, the audit log and the metrics. So does a cloud metadata
// address, even allowed by name.
func TestNetworkNameOutsideAllowlist(t *testing.T) {
	d, s := netDaemon(t, true)
	res := netRun(t, d, s, `
print(fetch("http://outside.example.org/"))
print(fetch("https://outside.example.net/"))
print(fetch("http://169.254.169.254/latest/meta-data/"))
`, fmt.Sprintf("localhost:%d", s.Plain), "*.example.org:443", "169.254.169.254:80")
	out := lines(res.Stdout)
	if len(out) != 3 ||
		!strings.HasPrefix(out[0], "HTTP 403 cellblock: GET outside.example.org:80 refused: not in the network allowlist (localhost:") ||
		!strings.Contains(out[1], "Tunnel connection failed: 403 cellblock refused CONNECT outside.example.net:443: not in the network allowlist") ||
		!strings.HasPrefix(out[2], "HTTP 403") || !strings.Contains(out[2], "cloud metadata") {
		t.Errorf("output:\n%s", res.Stdout)
	}
	want := map[string]int{api.DenyNotAllowed: 2, api.DenyForbiddenAddress: 1}
	if got := denialsBy(res); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("denials %+v, want by reason %v", res.Denials, want)
	}
	for _, dn := range res.Denials {
		if dn.Kind != api.DenialNetwork || dn.Detail == "" || dn.Host == "" || dn.Port == 0 {
			t.Errorf("denial %+v", dn)
		}
	}
	if s.hits.Load() != 0 {
		t.Errorf("the servers saw %d requests", s.hits.Load())
	}
	var entry *audit.Entry
	for _, e := range auditLines(t, filepath.Join(d.StateDir, "audit.log")) {
		if e.RunID == res.RunID {
			entry = &e
		}
	}
	if entry == nil || len(entry.Denials) != len(res.Denials) || len(entry.Network) != 3 {
		t.Errorf("audit entry %+v", entry)
	}
	m := scrapeMetrics(t, d.Socket)
	if m[`cellblock_network_denials_total{reason="not_allowed"}`] != 2 || m[`cellblock_network_denials_total{reason="forbidden_address"}`] != 1 {
		t.Errorf("denial metrics: not_allowed %v, forbidden_address %v", m[`cellblock_network_denials_total{reason="not_allowed"}`], m[`cellblock_network_denials_total{reason="forbidden_address"}`])
	}
}

// An allowed name that resolves to a private address (localhost) is
// refused without --network-allow-private.
func TestNetworkPrivateAddressRefused(t *testing.T) {
	d, s := netDaemon(t, false)
	res := netRun(t, d, s, fmt.Sprintf(`
print(fetch("http://localhost:%d/hello"))
print(fetch("https://localhost:%d/hello"))
`, s.Plain, s.Secure), fmt.Sprintf("localhost:%d", s.Plain), fmt.Sprintf("localhost:%d", s.Secure))
	out := lines(res.Stdout)
	if len(out) != 2 || !strings.HasPrefix(out[0], "HTTP 403") || !strings.Contains(out[0], "--network-allow-private") ||
		!strings.Contains(out[1], "403 cellblock refused CONNECT") {
		t.Errorf("output:\n%s", res.Stdout)
	}
	if got := denialsBy(res); got[api.DenyPrivateAddress] != 2 || len(got) != 1 {
		t.Errorf("denials %+v", res.Denials)
	}
	if s.hits.Load() != 0 {
		t.Errorf("the servers saw %d requests", s.hits.Load())
	}
}

// CONNECT to a port the allowlist does not name is refused, though the
// host is allowed on another.
func TestNetworkConnectPortNotAllowed(t *testing.T) {
	d, s := netDaemon(t, true)
	res := netRun(t, d, s, fmt.Sprintf(`
proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
c = http.client.HTTPConnection(proxy.hostname, proxy.port, timeout=30)
c.set_tunnel("localhost", %d)
try:
    c.request("GET", "/hello")
    print("through:", c.getresponse().status)
except OSError as e:
    print("refused:", e)
`, s.Plain), fmt.Sprintf("localhost:%d", s.Secure))
	if !strings.HasPrefix(res.Stdout, "refused: Tunnel connection failed: 403 cellblock refused CONNECT localhost:") {
		t.Errorf("output %q", res.Stdout)
	}
	if len(res.Denials) != 1 || res.Denials[0].Port != s.Plain || res.Denials[0].Reason != api.DenyNotAllowed {
		t.Errorf("denials %+v", res.Denials)
	}
	if s.hits.Load() != 0 {
		t.Errorf("the servers saw %d requests", s.hits.Load())
	}
}

// A run asking for more than the operator allows is refused before it
// runs, as over_limit naming network; so is any network where the operator
// allows none.
func TestNetworkBeyondTheOperatorsBound(t *testing.T) {
	d, s := netDaemon(t, true)
	for _, allow := range [][]string{
		{fmt.Sprintf("localhost:%d", s.Plain), "localhost:1"},
		{"*.org:443"},
		{"example.org:443"}, // the bound's wildcard is for the names below it
		{"*:443"},
	} {
		res := run(t, d, &api.RunRequest{Code: "print('ran')", Network: &api.Network{Allow: allow}})
		if e := res.Error; e == nil || e.Type != api.ErrOverLimit || e.Field != "network" || res.Stdout != "" {
			t.Errorf("%v: %+v", allow, res)
		}
	}
	res := run(t, daemon(t), &api.RunRequest{Code: "print('ran')", Network: &api.Network{Allow: []string{"example.org:443"}}})
	if e := res.Error; e == nil || e.Type != api.ErrOverLimit || !strings.Contains(e.Message, "--network-allow") {
		t.Errorf("a daemon that allows no network: %+v", res.Error)
	}
	_, errs, code := cli(t, d, "", "run", "--allow-net", "localhost:1", "-c", "print('ran')")
	if code != 125 || !strings.Contains(errs, "over_limit") || !strings.Contains(errs, "localhost:1") {
		t.Errorf("CLI: exit %d stderr %q", code, errs)
	}
}

// The caps: bytes, connections in all, connections at once (a program
// that opens many at once gets the rest refused at once, and the daemon
// serves the next run as ever).
func TestNetworkCaps(t *testing.T) {
	d, s := netDaemon(t, true, "--network-max-connections", "4", "--network-max-connections-total", "6", "--network-max-bytes", "256K")
	allow := []string{fmt.Sprintf("localhost:%d", s.Plain), fmt.Sprintf("localhost:%d", s.Secure)}
	res := netRun(t, d, s, fmt.Sprintf(`
print(fetch("https://localhost:%d/big")[:60])
print(fetch("http://localhost:%d/hello"))
`, s.Secure, s.Plain), allow...)
	out := lines(res.Stdout)
	if len(out) != 2 || strings.HasPrefix(out[0], "200") || !strings.HasPrefix(out[1], "HTTP 403") {
		t.Errorf("byte cap: output:\n%s", res.Stdout)
	}
	if got := denialsBy(res); got[api.DenyByteLimit] != 2 {
		t.Errorf("byte cap: denials %+v", res.Denials)
	}

	res = netRun(t, d, s, fmt.Sprintf(`
for i in range(8):
    print(fetch("http://localhost:%d/hello"))
`, s.Plain), allow...)
	out = lines(res.Stdout)
	if len(out) != 8 || out[5] != "200 hello http" || !strings.Contains(out[6], "HTTP 403") || !strings.Contains(out[7], "--network-max-connections-total") {
		t.Errorf("connections in all: output:\n%s", res.Stdout)
	}
	if got := denialsBy(res); got[api.DenyConnectionLimit] != 2 {
		t.Errorf("connections in all: denials %+v", res.Denials)
	}

	// 200 connections at once: 4 are admitted, the other 196 answered
	// 403 and closed at once, which the program waits for; then the 4
	// carry requests, and once they are closed a new one does too.
	res = netRun(t, d, s, fmt.Sprintf(`
import select, time
socks = [socket.create_connection(("127.0.0.1", 3128), timeout=30) for i in range(200)]
refused, other = set(), []
deadline = time.time() + 60
while len(refused) + len(other) < 196 and time.time() < deadline:
    ready, _, _ = select.select([c for c in socks if c not in refused and c not in other], [], [], 1)
    for c in ready:
        (refused.add(c) if c.recv(200).startswith(b"HTTP/1.1 403") else other.append(c))
admitted = [c for c in socks if c not in refused and c not in other]
served = 0
for c in admitted:
    c.sendall(b"GET http://localhost:%[1]d/hello HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    served += c.recv(100).startswith(b"HTTP/1.1 200")
print(len(refused), len(other), len(admitted), served)
for c in socks:
    c.close()
deadline = time.time() + 30
while True:
    r = fetch("http://localhost:%[1]d/hello")
    if r.startswith("200") or time.time() > deadline:
        break
    time.sleep(0.1)
print(r)
`, s.Plain), allow...)
	out = lines(res.Stdout)
	if len(out) != 2 || out[0] != "196 0 4 4" || out[1] != "200 hello http" {
		t.Errorf("connections at once: output:\n%s", res.Stdout)
	}
	if got := denialsBy(res); got[api.DenyConnectionLimit] < 196 {
		t.Errorf("connections at once: denials %+v", res.Denials)
	}
	if len(res.Denials) > 32 {
		t.Errorf("%d denials in a result", len(res.Denials))
	}
	runOK(t, d, &api.RunRequest{Code: "print(1)"})
}

// A jail without network still has no way out: no proxy in its namespace,
// no proxy variables, no route. One with network has no route either: the
// proxy is the only way.
func TestNetworkNoWayOutButTheProxy(t *testing.T) {
	d, s := netDaemon(t, true)
	probe := fmt.Sprintf(`
def connect(addr):
    try:
        socket.create_connection(addr, timeout=5).close()
        return "connected"
    except OSError as e:
        return os.strerror(e.errno) if e.errno else str(e)
print(connect(("127.0.0.1", 3128)))
print(connect(("127.0.0.1", %d)))
print(connect(("192.0.2.1", 80)))
print(sorted(k for k in os.environ if "proxy" in k.lower()))
os.environ["NO_PROXY"] = "*"
print(fetch("http://localhost:%d/hello"))
`, s.Plain, s.Plain)
	res := netRun(t, d, s, probe)
	want := []string{"Connection refused", "Connection refused", "Network is unreachable", "[]"}
	if got := lines(res.Stdout); len(got) != 5 || strings.Join(got[:4], "|") != strings.Join(want, "|") || !strings.Contains(got[4], "refused") {
		t.Errorf("without network: %q", got)
	}
	res = netRun(t, d, s, probe, fmt.Sprintf("localhost:%d", s.Plain))
	want = []string{"connected", "Connection refused", "Network is unreachable",
		"['ALL_PROXY', 'HTTPS_PROXY', 'HTTP_PROXY', 'PIP_PROXY', 'all_proxy', 'http_proxy', 'https_proxy']"}
	if got := lines(res.Stdout); len(got) != 5 || strings.Join(got[:4], "|") != strings.Join(want, "|") || !strings.Contains(got[4], "refused") {
		t.Errorf("with network, bypassing the proxy: %q", got)
	}
	if s.hits.Load() != 0 {
		t.Errorf("the servers saw %d requests", s.hits.Load())
	}
}

// A run cannot reach another run's proxy: each lives in its own jail's
// namespace, where 127.0.0.1:3128 is the run's own (or nothing).
func TestNetworkOtherRunsProxyIsOutOfReach(t *testing.T) {
	d, s := netDaemon(t, true)
	type outcome struct {
		res *api.Result
		err error
	}
	first := make(chan outcome, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		req := &api.RunRequest{Code: netPrelude + fmt.Sprintf(`print(fetch("http://localhost:%d/hold"))`, s.Plain),
			Inputs: map[string]json.RawMessage{"ca_pem": mustMarshal(t, s.CAPEM)}, Network: &api.Network{Allow: []string{fmt.Sprintf("localhost:%d", s.Plain)}}}
		res, err := d.Client.Run(ctx, req)
		first <- outcome{res, err}
	}()
	select {
	case <-s.held:
	case o := <-first:
		t.Fatalf("the first run ended early: %+v %v", o.res, o.err)
	}
	// The first run's proxy is up and allows localhost:Plain. The second
	// run's proxy refuses it; a run without network finds no proxy.
	res := netRun(t, d, s, fmt.Sprintf(`print(fetch("http://localhost:%d/hello"))`, s.Plain), fmt.Sprintf("localhost:%d", s.Secure))
	if !strings.HasPrefix(res.Stdout, "HTTP 403") {
		t.Errorf("another run with network: %q", res.Stdout)
	}
	res = netRun(t, d, s, `
try:
    socket.create_connection(("127.0.0.1", 3128), timeout=5)
    print("connected")
except OSError as e:
    print(os.strerror(e.errno))
`)
	if res.Stdout != "Connection refused\n" {
		t.Errorf("a run without network: %q", res.Stdout)
	}
	s.Release()
	o := <-first
	if o.err != nil || o.res.Error != nil || o.res.Stdout != "200 released\n" {
		t.Errorf("the first run: %+v %v", o.res, o.err)
	}
}

// A session's network is fixed when it is created and serves all its runs;
// each run reports its own denials; a run in it cannot ask for network.
func TestNetworkSession(t *testing.T) {
	d, s := netDaemon(t, true)
	ctx := context.Background()
	sess, err := d.Client.CreateSession(ctx, &api.SessionRequest{Network: &api.Network{Allow: []string{fmt.Sprintf("localhost:%d", s.Plain)}}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Client.DeleteSession(ctx, sess.ID)
	runIn := func(code string) *api.Result {
		t.Helper()
		return runOK(t, d, &api.RunRequest{Session: sess.ID, Code: code, Inputs: map[string]json.RawMessage{"ca_pem": mustMarshal(t, s.CAPEM)}})
	}
	runIn(netPrelude)
	if res := runIn(fmt.Sprintf(`fetch("http://localhost:%d/hello")`, s.Plain)); res.Value == nil || res.Value.Repr != "'200 hello http'" || len(res.Denials) != 0 {
		t.Errorf("first run: %+v %+v", res.Value, res.Denials)
	}
	if res := runIn(`fetch("http://outside.example.org/")`); res.Value == nil || !strings.HasPrefix(res.Value.Repr, "'HTTP 403") || len(res.Denials) != 1 {
		t.Errorf("second run: %+v %+v", res.Value, res.Denials)
	}
	if res := runIn(`1`); len(res.Denials) != 0 {
		t.Errorf("third run has the second's denials: %+v", res.Denials)
	}
	res := run(t, d, &api.RunRequest{Session: sess.ID, Code: "1", Network: &api.Network{Allow: []string{"localhost:1"}}})
	if res.Error == nil || res.Error.Type != api.ErrBadRequest || res.Error.Field != "network" {
		t.Errorf("network in a session's run: %+v", res.Error)
	}
	got, err := d.Client.Session(ctx, sess.ID)
	if err != nil || got.Network == nil || len(got.Network.Allow) != 1 {
		t.Errorf("session: %+v %v", got, err)
	}
	out, errs, code := cli(t, d, "", "session", "show", sess.ID)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("localhost:%d", s.Plain)) {
		t.Errorf("session show: %d %q %q", code, out, errs)
	}
	_, errs, code = cli(t, d, "", "run", "--session", sess.ID, "--allow-net", "localhost:1", "-c", "1")
	if code != 2 || !strings.Contains(errs, "--allow-net cannot be used with --session") {
		t.Errorf("cellblock run --session --allow-net: %d %q", code, errs)
	}
}

// Programs that attack the proxy: a flood of request headers is refused,
// a client that sends its headers too slowly is cut off, and the proxy
// serves the run's other requests all the while.
func TestNetworkHostileClients(t *testing.T) {
	d, s := netDaemon(t, true)
	res := netRun(t, d, s, fmt.Sprintf(`
flood = socket.create_connection(("127.0.0.1", 3128), timeout=30)
try:
    flood.sendall(b"GET http://localhost:%[1]d/" + b"a" * (1 << 20) + b" HTTP/1.1\r\n")
except OSError:
    pass
print(flood.recv(100).split(b"\r\n")[0].decode())
slow = socket.create_connection(("127.0.0.1", 3128), timeout=60)
slow.sendall(b"GET http://localhost:%[1]d/hello HTTP/1.1\r\nX-Slow: ")
print(fetch("http://localhost:%[1]d/hello"))
print(repr(slow.recv(100)))
print(fetch("http://localhost:%[1]d/hello"))
`, s.Plain), fmt.Sprintf("localhost:%d", s.Plain))
	want := []string{"HTTP/1.1 431 Request Header Fields Too Large", "200 hello http", "b''", "200 hello http"}
	if got := lines(res.Stdout); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("output %q, want %q", got, want)
	}
}

// pip downloads from an index of the test's own through the proxy, with
// no configuration but what the jail's environment says.
func TestNetworkPipFromLocalIndex(t *testing.T) {
	requireRoot(t)
	dir, _ := wheelhouse(t)
	files := map[string][]byte{}
	for _, w := range testWheels[:2] { // cbalpha, which needs cbbeta
		name := w.name + "-" + w.version + "-py3-none-any.whl"
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		files[name] = b
	}
	ix := serveIndex(t, files)
	index := fmt.Sprintf("localhost:%d", ix.Port)
	d := startDaemon(t, "--network-allow", index, "--network-allow-private")
	res := runOK(t, d, &api.RunRequest{Code: fmt.Sprintf(`
import ensurepip, glob, os, subprocess, sys
wheel = glob.glob(os.path.join(os.path.dirname(ensurepip.__file__), "_bundled", "pip-*.whl"))[0]
p = subprocess.run([sys.executable, "-m", "pip", "download", "--no-cache-dir", "--disable-pip-version-check",
                    "--index-url", "http://%s/simple/", "-d", "/tmp/dl", "cbalpha"],
                   env=dict(os.environ, PYTHONPATH=wheel), capture_output=True, text=True)
print(p.returncode, sorted(os.listdir("/tmp/dl")) if os.path.isdir("/tmp/dl") else p.stderr[-2000:])
`, index), Network: &api.Network{Allow: []string{index}}})
	if res.Stdout != "0 ['cbalpha-1.0-py3-none-any.whl', 'cbbeta-1.0-py3-none-any.whl']\n" {
		t.Errorf("pip download: %q\nstderr %s", res.Stdout, res.Stderr)
	}
	if ix.hits.Load() < 4 {
		t.Errorf("the index saw %d requests", ix.hits.Load())
	}
}

// cellblock run --allow-net, and the denials it prints after the output.
func TestNetworkCLI(t *testing.T) {
	d, s := netDaemon(t, true)
	code := fmt.Sprintf(`
import urllib.request
print(urllib.request.urlopen("http://localhost:%d/hello", timeout=30).read().decode())
try:
    urllib.request.urlopen("http://outside.example.org/", timeout=30)
except Exception as e:
    print(e)
`, s.Plain)
	out, errs, exit := cli(t, d, "", "run", "--allow-net", fmt.Sprintf("localhost:%d", s.Plain), "-c", code)
	if exit != 0 || out != "hello http\nHTTP Error 403: cellblock refused GET outside.example.org:80: not in the network allowlist\n" ||
		!strings.Contains(errs, "cellblock: network denied: GET outside.example.org:80 refused") {
		t.Errorf("exit %d stdout %q stderr %q", exit, out, errs)
	}
	out, errs, exit = cli(t, d, "", "session", "new", "--allow-net", fmt.Sprintf("localhost:%d", s.Plain))
	id := strings.TrimSpace(out)
	if exit != 0 || id == "" {
		t.Fatalf("session new: %d %q %q", exit, out, errs)
	}
	defer cli(t, d, "", "session", "rm", id)
	out, errs, exit = cli(t, d, "", "run", "--session", id, "-c", fmt.Sprintf(`import urllib.request
print(urllib.request.urlopen("http://localhost:%d/hello", timeout=30).read().decode())`, s.Plain))
	if exit != 0 || out != "hello http\n" {
		t.Errorf("in the session: %d %q %q", exit, out, errs)
	}
	out, _, _ = cli(t, d, "", "info")
	if !strings.Contains(out, "--allow-net within: localhost:") {
		t.Errorf("info:\n%s", out)
	}
}

// A run's network goes with it: proxies, tunnels held open, connections a
// program left, a session's proxy when the session is deleted in the
// middle of a request. The daemon ends with the descriptors and
// goroutines it had.
func TestNetworkLeavesNothing(t *testing.T) {
	d, s := netDaemon(t, true)
	pid := d.Cmd.Process.Pid
	allow := []string{fmt.Sprintf("localhost:%d", s.Plain), fmt.Sprintf("localhost:%d", s.Secure)}
	netRun(t, d, s, fmt.Sprintf(`print(fetch("https://localhost:%d/hello"))`, s.Secure), allow...)
	lastFDs := -1
	quiet := func() bool {
		n := openFDs(t, pid)
		info, err := d.Client.Info(context.Background())
		d.Client.CloseIdleConnections()
		steady := err == nil && n == lastFDs && info.PrestartReady == 2 && len(idleInits(t, d)) == 2
		lastFDs = n
		return steady
	}
	if !waitFor(30*time.Second, quiet) {
		t.Fatalf("the daemon did not settle: %d fds", openFDs(t, pid))
	}
	// The daemon's side of the client's connections goes on its own time.
	waitFor(5*time.Second, func() bool { n := openFDs(t, pid); defer func() { lastFDs = n }(); return n == lastFDs })
	fdsBefore := openFDs(t, pid)
	goroutinesBefore := scrapeMetrics(t, d.Socket)["go_goroutines"]

	// Tunnels and requests in flight when the run times out.
	req := &api.RunRequest{Code: netPrelude + fmt.Sprintf(`
import threading, time
c = http.client.HTTPSConnection("127.0.0.1", 3128, timeout=60, context=ssl.create_default_context(cafile="/tmp/ca.pem"))
c.set_tunnel("localhost", %d)
c.connect()
for i in range(3):
    threading.Thread(target=fetch, args=("http://localhost:%d/hold",), daemon=True).start()
left = [socket.create_connection(("127.0.0.1", 3128)) for i in range(20)]
print("holding", flush=True)
time.sleep(60)
`, s.Secure, s.Plain), Inputs: map[string]json.RawMessage{"ca_pem": mustMarshal(t, s.CAPEM)},
		Network: &api.Network{Allow: allow}, TimeoutMs: 5000}
	res := run(t, d, req)
	if !res.TimedOut || res.Stdout != "holding\n" {
		t.Errorf("the holding run: %+v", res)
	}
	// A session deleted while a request of its run waits.
	ctx := context.Background()
	sess, err := d.Client.CreateSession(ctx, &api.SessionRequest{Network: &api.Network{Allow: allow}})
	if err != nil {
		t.Fatal(err)
	}
	runOK(t, d, &api.RunRequest{Session: sess.ID, Code: netPrelude, Inputs: map[string]json.RawMessage{"ca_pem": mustMarshal(t, s.CAPEM)}})
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		d.Client.Run(ctx, &api.RunRequest{Session: sess.ID, Code: fmt.Sprintf(`fetch("http://localhost:%d/hold")`, s.Plain)})
	}()
	for range 4 { // three from the run that timed out, one from the session
		<-s.held
	}
	if err := d.Client.DeleteSession(ctx, sess.ID); err != nil {
		t.Fatal(err)
	}
	<-done

	var fdsAfter int
	var goroutinesAfter float64
	d.Client.CloseIdleConnections()
	if !waitFor(30*time.Second, func() bool {
		fdsAfter = openFDs(t, pid)
		goroutinesAfter = scrapeMetrics(t, d.Socket)["go_goroutines"]
		return fdsAfter == fdsBefore && goroutinesAfter == goroutinesBefore
	}) {
		t.Errorf("the daemon leaked: fds %d before, %d after; goroutines %v before, %v after", fdsBefore, fdsAfter, goroutinesBefore, goroutinesAfter)
		if entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
			for _, e := range entries {
				target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name()))
				t.Logf("fd %s -> %s", e.Name(), target)
			}
		}
	}
}

// run_python with network_allow, through cellblock-mcp started with
// --network-allow: the code reaches the allowed host, and what it was
// refused comes back in the text and as denials.
func TestNetworkMCP(t *testing.T) {
	d, s := netDaemon(t, true)
	allowed := fmt.Sprintf("localhost:%d", s.Plain)
	c := mcpStdioArgs(t, d.Socket, []string{"--network-allow", allowed})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res := mcpCall(t, ctx, c, "run_python", map[string]any{
		"code": fmt.Sprintf(`import urllib.request
print(urllib.request.urlopen("http://%s/hello", timeout=30).read().decode())
try:
    urllib.request.urlopen("http://outside.example.org/", timeout=30)
except Exception as e:
    print(e)`, allowed),
		"network_allow": []string{allowed},
	}, nil)
	text := mcpText(res)
	if res.IsError || !strings.Contains(text, "hello http") || !strings.Contains(text, "- GET outside.example.org:80 refused: not in the network allowlist") {
		t.Errorf("run_python: %s", text)
	}
	var r api.Result
	mcpStructured(t, res, &r)
	if len(r.Denials) != 1 || r.Denials[0].Reason != api.DenyNotAllowed {
		t.Errorf("denials %+v", r.Denials)
	}
	res = mcpCall(t, ctx, c, "run_python", map[string]any{"code": "1", "network_allow": []string{fmt.Sprintf("localhost:%d", s.Secure)}}, nil)
	if !res.IsError || !strings.Contains(mcpText(res), "beyond what this server allows") {
		t.Errorf("beyond cellblock-mcp's bound: %s", mcpText(res))
	}
}

// clientPackages are Debian's requests and httpx with what they import,
// packed into pure-Python wheels for the jail (Debian's metadata drops
// some of their requirements, so all are listed).
var clientPackages = []string{"requests", "urllib3", "six", "idna", "chardet", "certifi", "httpx", "httpcore", "h11", "anyio", "sniffio", "rfc3986"}

// clientWheelhouse packs clientPackages from Debian's python3-requests and
// python3-httpx (installed by scripts/install-deps.sh when missing) into a
// wheelhouse the build jail can read.
func clientWheelhouse(t *testing.T) string {
	t.Helper()
	var missing []string
	for _, p := range []string{"python3-requests", "python3-httpx"} {
		out, _ := exec.Command("dpkg-query", "-W", "-f=${Status}", p).Output()
		if !strings.Contains(string(out), "install ok installed") {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		if _, err := exec.LookPath("apt-get"); err != nil {
			t.Skipf("needs the Debian packages %v, and this host has no apt-get", missing)
		}
		if out, err := exec.Command(filepath.Join(repoRoot, "scripts", "install-deps.sh")).CombinedOutput(); err != nil {
			t.Fatalf("install %v: %v\n%s", missing, err, out)
		}
	}
	dir := searchableDir(t, "cellblock-it-clients-")
	have := filepath.Join(dir, "have")
	if err := os.WriteFile(have, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wheels := filepath.Join(dir, "wheels")
	args := append([]string{filepath.Join(repoRoot, "integration", "testdata", "debwheels.py"), "--out", wheels, "--have", have}, clientPackages...)
	if out, err := exec.Command(debianPython, args...).CombinedOutput(); err != nil {
		t.Fatalf("debwheels.py: %v\n%s", err, out)
	}
	return wheels
}

// The example of docs/network.md: requests (and httpx) through the allowlist, with
// nothing configured in the code but the certificate it trusts.
func TestNetworkRequestsAndHTTPX(t *testing.T) {
	requireRoot(t)
	wheels := clientWheelhouse(t)
	s := startNetServers(t)
	allowed := fmt.Sprintf("localhost:%d", s.Secure)
	d := startDaemon(t, "--no-index", "--find-links", wheels, "--network-allow", allowed, "--network-allow-private")
	res := runOK(t, d, &api.RunRequest{Code: netPrelude + fmt.Sprintf(`
import requests, httpx
print(requests.get("https://%[1]s/hello", timeout=30).text)
print(httpx.get("https://%[1]s/hello", timeout=30).text)
try:
    requests.get("https://outside.example.org/", timeout=30)
except requests.exceptions.ProxyError as e:
    print("requests refused:", "403 cellblock refused CONNECT outside.example.org:443" in str(e))
try:
    httpx.get("https://outside.example.org/", timeout=30)
except httpx.ProxyError as e:
    print("httpx refused:", e)
`, allowed), Dependencies: clientPackages, Inputs: map[string]json.RawMessage{"ca_pem": mustMarshal(t, s.CAPEM)},
		Network: &api.Network{Allow: []string{allowed}}})
	want := []string{"hello https", "hello https", "requests refused: True", "httpx refused: 403 cellblock refused CONNECT outside.example.org:443: not in the network allowlist"}
	if got := lines(res.Stdout); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("output %q, want %q\nstderr %s", got, want, res.Stderr)
	}
	if got := denialsBy(res); got[api.DenyNotAllowed] != 2 {
		t.Errorf("denials %+v", res.Denials)
	}
}
