package integration

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/audit"
	"github.com/cellblock/cellblock/nsjail/layout"
)

// testCA is a CA of the test's and a certificate it signed for localhost
// and 127.0.0.1: the secret's host, whose CA the daemon trusts with
// --egress-trust (the jail never sees it).
func testCA(t *testing.T) (tls.Certificate, string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cellblock test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
		string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}))
}

// secretServer is a loopback server of the test's that records what each
// request brought: the secret's host over HTTPS (with a certificate of
// testCA), or another server, plain or HTTPS. /echo answers with the
// Authorization header and query it got and the value it knows (so that
// the proxy must take the value out of the answer); /simple/ and /files/
// are a package index that wants the value as a Basic password.
type secretServer struct {
	Port  int
	value func() string
	mu    sync.Mutex
	seen  []string // each request's line, headers and body
	auths []string // each request's Authorization header
}

func (s *secretServer) requests() (seen, auths []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...), append([]string(nil), s.auths...)
}

func startSecretServer(t *testing.T, cert *tls.Certificate, value func() string, index map[string][]byte) *secretServer {
	t.Helper()
	s := &secretServer{value: value}
	pages := map[string]string{}
	for name, content := range index {
		project, _, _ := strings.Cut(name, "-")
		sum := sha256.Sum256(content)
		pages[project] += fmt.Sprintf("<a href=\"/files/%s#sha256=%s\">%s</a>\n", name, hex.EncodeToString(sum[:]), name)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.seen = append(s.seen, fmt.Sprintf("%s %s %v %s", r.Method, r.URL, r.Header, b))
		s.auths = append(s.auths, r.Header.Get("Authorization"))
		s.mu.Unlock()
		switch {
		case r.URL.Path == "/echo":
			fmt.Fprintf(w, "auth=%s query=%s value=%s", r.Header.Get("Authorization"), r.URL.RawQuery, value())
		case strings.HasPrefix(r.URL.Path, "/simple/") || strings.HasPrefix(r.URL.Path, "/files/"):
			if _, pw, ok := r.BasicAuth(); !ok || pw != value() {
				w.Header().Set("WWW-Authenticate", `Basic realm="private"`)
				http.Error(w, "a token is needed", http.StatusUnauthorized)
				return
			}
			if name, ok := strings.CutPrefix(r.URL.Path, "/files/"); ok && index[name] != nil {
				w.Write(index[name])
				return
			}
			page, ok := pages[strings.Trim(strings.TrimPrefix(r.URL.Path, "/simple/"), "/")]
			if !ok {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, "<!DOCTYPE html><html><body>\n"+page+"</body></html>\n")
		default:
			io.WriteString(w, "ok")
		}
	})
	var srv *httptest.Server
	if cert != nil {
		srv = httptest.NewUnstartedServer(mux)
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}}
		srv.StartTLS()
	} else {
		srv = httptest.NewServer(mux)
	}
	t.Cleanup(srv.Close)
	s.Port = srv.Listener.Addr().(*net.TCPAddr).Port
	return s
}

// secretSetup is a daemon with two secrets: GH_TOKEN, bound to the
// secure server, and OTHER_TOKEN, bound to other (HTTPS too) and granted
// to uid 65533; plain is a plain HTTP server any run may reach, unbound an
// HTTPS one (with a certificate of the test's CA, which the daemon trusts)
// and raw a TCP server of no protocol, both bound to no secret, which a
// run may reach when it asks.
type secretSetup struct {
	d                             *Daemon
	secure, other, plain, unbound *secretServer
	raw                           *rawEcho
	file                          string
	mu                            sync.Mutex
	value                         string
	otherValue                    string
}

func (s *secretSetup) current() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.value
}

// newValue is a fresh value shaped like a GitHub token.
func newValue(t *testing.T) string {
	b := make([]byte, 18)
	rand.Read(b)
	return "ghp_" + hex.EncodeToString(b)
}

func startSecretDaemon(t *testing.T, args ...string) *secretSetup {
	t.Helper()
	requireRoot(t)
	cert, caPEM := testCA(t)
	dir := t.TempDir()
	s := &secretSetup{value: newValue(t), otherValue: newValue(t)}
	s.file = filepath.Join(dir, "gh-token")
	otherFile := filepath.Join(dir, "other-token")
	trust := filepath.Join(dir, "test-ca.pem")
	for p, c := range map[string]string{s.file: s.value + "\n", otherFile: s.otherValue, trust: caPEM} {
		if err := os.WriteFile(p, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	wd, _ := wheelhouse(t)
	index := map[string][]byte{}
	for _, w := range testWheels[:2] { // cbalpha, which needs cbbeta
		name := w.name + "-" + w.version + "-py3-none-any.whl"
		b, err := os.ReadFile(filepath.Join(wd, name))
		if err != nil {
			t.Fatal(err)
		}
		index[name] = b
	}
	s.secure = startSecretServer(t, &cert, s.current, index)
	s.other = startSecretServer(t, &cert, func() string { return s.otherValue }, nil)
	s.plain = startSecretServer(t, nil, s.current, nil)
	s.unbound = startSecretServer(t, &cert, s.current, nil)
	s.raw = startRawEcho(t)
	flags := []string{
		"--network-allow", fmt.Sprintf("localhost:%d", s.unbound.Port),
		"--network-allow", fmt.Sprintf("localhost:%d", s.raw.Port),
		"--network-allow", fmt.Sprintf("localhost:%d", s.secure.Port),
		"--network-allow", fmt.Sprintf("localhost:%d", s.other.Port),
		"--network-allow", fmt.Sprintf("localhost:%d", s.plain.Port),
		"--network-allow-private",
		"--egress-trust", trust,
		"--secret", "GH_TOKEN=" + s.file, "--secret-host", fmt.Sprintf("GH_TOKEN=localhost:%d", s.secure.Port),
		"--secret", "OTHER_TOKEN=" + otherFile, "--secret-host", fmt.Sprintf("OTHER_TOKEN=localhost:%d", s.other.Port),
		"--secret-allow-uid", "OTHER_TOKEN=65533", "--allow-uid", "65533",
	}
	s.d = startDaemon(t, append(flags, args...)...)
	return s
}

// rawEcho is a TCP server of no protocol that echoes what it reads, and
// keeps it.
type rawEcho struct {
	Port int
	mu   sync.Mutex
	got  bytes.Buffer
}

func startRawEcho(t *testing.T) *rawEcho {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	e := &rawEcho{Port: ln.Addr().(*net.TCPAddr).Port}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					e.mu.Lock()
					e.got.Write(buf[:n])
					e.mu.Unlock()
					c.Write(buf[:n])
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return e
}

func (e *rawEcho) received() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.got.String()
}

// noValue fails the test when any of texts holds the value.
func (s *secretSetup) noValue(t *testing.T, where string, texts ...string) {
	t.Helper()
	for _, v := range []string{s.current(), s.otherValue} {
		for _, x := range texts {
			if strings.Contains(x, v) {
				t.Errorf("%s holds a secret's value: %.300q", where, x)
			}
		}
	}
}

// The first case: urllib, requests, httpx and pip (from a private
// index that wants the token) in a session reach the secret's host with
// the real value, while the program sees only the placeholder, also in
// the answers that echo the value. Then, before the session's jail is torn
// down, its processes' environment and every readable page of their
// memory, and its /work and /tmp, are read from the host: the placeholder
// is there (the reading works), the value is not.
func TestSecretsReachTheirHostAndNeverTheJail(t *testing.T) {
	requireRoot(t)
	wheels := clientWheelhouse(t)
	s := startSecretDaemon(t, "--no-index", "--find-links", wheels)
	ctx := context.Background()
	sess, err := s.d.Client.CreateSession(ctx, &api.SessionRequest{Dependencies: clientPackages, Secrets: []string{"GH_TOKEN"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.d.Client.DeleteSession(ctx, sess.ID)
	marker := "marker-" + hex.EncodeToString([]byte(sess.ID))[:16]
	res := runOK(t, s.d, &api.RunRequest{Session: sess.ID, Code: fmt.Sprintf(`
import base64, ensurepip, glob, json, os, subprocess, sys, urllib.request
ph = os.environ["GH_TOKEN"]
url = "https://localhost:%[1]d/echo"
out = {"env": ph}
req = urllib.request.Request(url + "?via=urllib", headers={"Authorization": "Bearer " + ph})
out["urllib"] = urllib.request.urlopen(req, timeout=30).read().decode()
import requests, httpx
out["requests"] = requests.get(url + "?via=requests", headers={"Authorization": "token " + ph}, timeout=30).text
out["httpx"] = httpx.get(url + "?via=httpx&access_token=" + ph, timeout=30).text
wheel = glob.glob(os.path.join(os.path.dirname(ensurepip.__file__), "_bundled", "pip-*.whl"))[0]
p = subprocess.run([sys.executable, "-m", "pip", "download", "--no-cache-dir", "--disable-pip-version-check",
                    "--index-url", "https://__token__:%%s@localhost:%[1]d/simple/" %% ph, "-d", "/tmp/dl", "cbalpha"],
                   env=dict(os.environ, PYTHONPATH=wheel), capture_output=True, text=True)
out["pip"] = [p.returncode, sorted(os.listdir("/tmp/dl")) if os.path.isdir("/tmp/dl") else p.stderr[-3000:]]
out["bundle"] = "PRIVATE" in open(%[2]q).read()
kept = json.dumps(out)
open("/work/answers.json", "w").write(kept)
open("/tmp/answers.json", "w").write(kept)
open("/tmp/%[3]s", "w").write("here")
print(kept)
`, s.secure.Port, layout.CABundle, marker)})
	var out struct {
		Env, URLLib, Requests, HTTPX string
		Pip                          []any
		Bundle                       bool
	}
	if err := json.Unmarshal([]byte(strings.ReplaceAll(strings.ReplaceAll(res.Stdout, `"urllib"`, `"URLLib"`), `"httpx"`, `"HTTPX"`)), &out); err != nil {
		t.Fatalf("output %q: %v\nstderr %s", res.Stdout, err, res.Stderr)
	}
	ph := out.Env
	if !strings.HasPrefix(ph, "cbph_") || len(ph) < 40 {
		t.Fatalf("the placeholder is %q", ph)
	}
	for client, got := range map[string]string{
		"urllib":   "auth=Bearer " + ph + " query=via=urllib value=" + ph,
		"requests": "auth=token " + ph + " query=via=requests value=" + ph,
		"httpx":    "auth= query=via=httpx&access_token=" + ph + " value=" + ph,
	} {
		if have := map[string]string{"urllib": out.URLLib, "requests": out.Requests, "httpx": out.HTTPX}[client]; have != got {
			t.Errorf("%s got %q, want %q", client, have, got)
		}
	}
	if fmt.Sprint(out.Pip) != "[0 [cbalpha-1.0-py3-none-any.whl cbbeta-1.0-py3-none-any.whl]]" {
		t.Errorf("pip: %v", out.Pip)
	}
	if out.Bundle {
		t.Error("the jail's CA bundle holds a private key")
	}
	s.noValue(t, "the result", res.Stdout, res.Stderr, fmt.Sprint(res))

	// The host got the value: in each client's header, in the query, and
	// as pip's Basic password on the index and its files.
	v := s.current()
	seen, auths := s.secure.requests()
	want := map[string]bool{"Bearer " + v: false, "token " + v: false,
		"Basic " + base64.StdEncoding.EncodeToString([]byte("__token__:"+v)): false}
	for _, a := range auths {
		if _, ok := want[a]; ok {
			want[a] = true
		}
	}
	for a, ok := range want {
		if !ok {
			t.Errorf("the host never got %q; it got %q", a, auths)
		}
	}
	if !strings.Contains(strings.Join(seen, "\n"), "access_token="+v) {
		t.Errorf("the host never got the value in the query:\n%s", strings.Join(seen, "\n"))
	}
	if n := strings.Count(strings.Join(auths, "\n"), "Basic "); n < 4 {
		t.Errorf("pip sent its credential %d times, want the index and its two files", n)
	}

	// The jail, read from the host before its teardown.
	pids := jailWithFile(t, marker)
	if len(pids) < 2 {
		t.Fatalf("found %d processes of the session's jail", len(pids))
	}
	var placeholderSeen bool
	for _, pid := range pids {
		env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		s.noValue(t, fmt.Sprintf("process %d's environment", pid), string(env))
		found, scanned := scanMemory(t, pid, []byte(v), []byte(ph))
		if found[0] > 0 {
			t.Errorf("process %d holds the value in its memory (%d times)", pid, found[0])
		}
		placeholderSeen = placeholderSeen || found[1] > 0
		t.Logf("process %d: %d bytes of memory read, the placeholder %d times", pid, scanned, found[1])
	}
	if !placeholderSeen {
		t.Error("the placeholder is in no process's memory: the scan reads nothing")
	}
	files := 0
	for _, dir := range []string{"work", "tmp"} {
		root := fmt.Sprintf("/proc/%d/root/%s", pids[0], dir)
		filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
			if err != nil || !e.Type().IsRegular() {
				return nil
			}
			b, err := os.ReadFile(p)
			if err == nil {
				files++
				s.noValue(t, p, string(b))
				if bytes.Contains(b, []byte("cbalpha")) && strings.HasSuffix(p, ".whl") {
					return nil
				}
			}
			return nil
		})
	}
	if files < 4 {
		t.Errorf("read %d files in /work and /tmp, want the answers, the marker and pip's downloads", files)
	}
	s.noValue(t, "the daemon's log", s.d.Log())
}

// jailWithFile lists the processes that see /tmp/name, a name of the
// test's own: one jail's, whichever uids it runs as.
func jailWithFile(t *testing.T, name string) []int {
	t.Helper()
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d/root/tmp/%s", pid, name)); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// scanMemory reads every readable mapping of process pid through
// /proc/PID/mem and counts each of needles in it; it returns the counts
// and the bytes read.
func scanMemory(t *testing.T, pid int, needles ...[]byte) ([]int, int64) {
	t.Helper()
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatalf("maps of %d: %v", pid, err)
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Fatalf("mem of %d: %v", pid, err)
	}
	defer mem.Close()
	counts := make([]int, len(needles))
	var total int64
	for _, line := range strings.Split(strings.TrimSpace(string(maps)), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[1][0] != 'r' || strings.HasSuffix(line, "[vvar]") || strings.HasSuffix(line, "[vvar_vclock]") || strings.HasSuffix(line, "[vsyscall]") {
			continue
		}
		lo, hi, _ := strings.Cut(f[0], "-")
		start, _ := strconv.ParseUint(lo, 16, 64)
		end, _ := strconv.ParseUint(hi, 16, 64)
		buf := make([]byte, end-start)
		n, _ := mem.ReadAt(buf, int64(start))
		total += int64(n)
		for i, nd := range needles {
			counts[i] += bytes.Count(buf[:n], nd)
		}
	}
	return counts, total
}

// A placeholder goes nowhere but to its secret's host: over plain HTTP,
// and to the host of another secret, it is refused with a 403, listed in
// the result's denials (kind secret, with the host), in the audit log and
// the metrics; the servers never see it. Base64-encoded or split in two
// it goes out as it is, never as the value; another secret's placeholder
// reaches its own host with its own value.
func TestSecretsRefusedElsewhere(t *testing.T) {
	s := startSecretDaemon(t)
	res := runOK(t, s.d, &api.RunRequest{Secrets: []string{"GH_TOKEN", "OTHER_TOKEN"},
		Network: &api.Network{Allow: []string{fmt.Sprintf("localhost:%d", s.plain.Port)}}, Code: fmt.Sprintf(`
import base64, os, urllib.request, urllib.error
ph, other = os.environ["GH_TOKEN"], os.environ["OTHER_TOKEN"]
def get(url, headers={}, data=None):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers, data=data), timeout=30) as r:
            return "%%d %%s" %% (r.status, r.read().decode())
    except urllib.error.HTTPError as e:
        return "HTTP %%d %%s" %% (e.code, e.headers.get("X-Cellblock-Denial"))
print(get("http://localhost:%[1]d/echo", {"Authorization": "Bearer " + ph}))
print(get("http://localhost:%[1]d/echo?t=" + ph))
print(get("http://localhost:%[1]d/echo", data=b"x" * 100000 + ph.encode()))
print(get("https://localhost:%[2]d/echo", {"Authorization": "Bearer " + ph}))
print(get("https://localhost:%[2]d/echo", {"Authorization": "Bearer " + other}))
half = len(ph) // 2
print(get("https://localhost:%[3]d/echo", {"X-Encoded": base64.b64encode(ph.encode()).decode(), "X-A": ph[:half], "X-B": ph[half:]}))
`, s.plain.Port, s.other.Port, s.secure.Port)})
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	want := []string{"HTTP 403 secret_plain_http", "HTTP 403 secret_plain_http", "HTTP 403 secret_plain_http", "HTTP 403 secret_host"}
	if len(lines) != 6 || strings.Join(lines[:4], "|") != strings.Join(want, "|") ||
		!strings.HasPrefix(lines[4], "200 auth=Bearer cbph_") || !strings.HasPrefix(lines[5], "200 auth= query=") {
		t.Fatalf("output:\n%s\nstderr %s\ndenials %+v", res.Stdout, res.Stderr, res.Denials)
	}
	s.noValue(t, "the output", res.Stdout)
	got := map[string]int{}
	for _, d := range res.Denials {
		if d.Kind != api.DenialSecret || d.Secret != "GH_TOKEN" || d.Host != "localhost" || !strings.Contains(d.Detail, "GH_TOKEN") {
			t.Errorf("denial %+v", d)
		}
		got[d.Reason] += d.Count
	}
	if got[api.DenySecretPlainHTTP] != 3 || got[api.DenySecretHost] != 1 {
		t.Errorf("denials %+v", res.Denials)
	}
	// The servers: nothing of GH_TOKEN's placeholder where it was refused
	// (not even the plain server's cut body), OTHER_TOKEN's value at its
	// host, and the encoded and split placeholder at the secure one.
	plainSeen, _ := s.plain.requests()
	otherSeen, otherAuths := s.other.requests()
	for _, x := range append(plainSeen, otherSeen...) {
		if strings.Contains(x, "cbph_") {
			t.Errorf("a server saw a placeholder where it was refused: %.200q", x)
		}
	}
	if len(otherAuths) != 1 || otherAuths[0] != "Bearer "+s.otherValue {
		t.Errorf("OTHER_TOKEN's host got %q", otherAuths)
	}
	secureSeen, _ := s.secure.requests()
	if len(secureSeen) != 1 || !strings.Contains(secureSeen[0], "X-Encoded:[Y2Jwa") || strings.Contains(secureSeen[0], s.current()) {
		t.Errorf("the secret's host got %q", secureSeen)
	}

	// The audit log and the metrics.
	raw, err := os.ReadFile(filepath.Join(s.d.StateDir, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	s.noValue(t, "the audit log", string(raw))
	var entry audit.Entry
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var e audit.Entry
		if json.Unmarshal([]byte(line), &e) == nil && e.RunID == res.RunID {
			entry = e
		}
	}
	if strings.Join(entry.Secrets, ",") != "GH_TOKEN,OTHER_TOKEN" || len(entry.Denials) != 2 {
		t.Errorf("audit entry %+v", entry)
	}
	uses := map[string]int{}
	for _, u := range entry.SecretUses {
		uses[fmt.Sprintf("%s %s %s %d %s", u.Secret, u.Method, u.Path, u.Status, u.Outcome)] += u.Count
	}
	if uses["GH_TOKEN GET /echo 403 refused"] != 3 || uses["GH_TOKEN POST /echo 403 refused"] != 1 || uses["OTHER_TOKEN GET /echo 200 injected"] != 1 {
		t.Errorf("audit uses %v", uses)
	}
	m := scrapeMetrics(t, s.d.Socket)
	if m[`cellblock_secret_uses_total{outcome="refused",secret="GH_TOKEN"}`] != 4 ||
		m[`cellblock_secret_uses_total{outcome="injected",secret="OTHER_TOKEN"}`] != 1 ||
		m[`cellblock_secret_uses_total{outcome="redacted",secret="OTHER_TOKEN"}`] != 1 {
		t.Errorf("metrics: %v", filterMetrics(m, "cellblock_secret"))
	}
	s.noValue(t, "the daemon's log", s.d.Log())
}

// In a run with secrets every CONNECT is read, also to a host bound to
// none: HTTPS to it works (the jail trusts the daemon's CA, the daemon
// the host's), and a request that carries the placeholder (urllib,
// requests, httpx, http.client: in a header, the URL, a Basic
// credential, a body, a body sent in pieces) is refused with a 403 and
// reported in the result's denials (kind secret, with the host), the
// audit log and the metrics, the host seeing nothing of it; a tunnel that
// is not TLS carries what it carries but is cut at the placeholder, even
// split across writes. A run without secrets keeps a blind tunnel: the
// jail sees the host's own certificate.
func TestSecretsInspectedElsewhere(t *testing.T) {
	requireRoot(t)
	wheels := clientWheelhouse(t)
	s := startSecretDaemon(t, "--no-index", "--find-links", wheels)
	allow := []string{fmt.Sprintf("localhost:%d", s.unbound.Port), fmt.Sprintf("localhost:%d", s.raw.Port)}
	res := runOK(t, s.d, &api.RunRequest{Secrets: []string{"GH_TOKEN"}, Dependencies: clientPackages,
		Network: &api.Network{Allow: allow}, Code: fmt.Sprintf(`
import http.client, os, socket, ssl, urllib.parse, urllib.request, urllib.error, httpx, requests
ph = os.environ["GH_TOKEN"]
base = "https://localhost:%[1]d/echo"
def get(url, headers={}, data=None):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers, data=data), timeout=30) as r:
            return "%%d %%s" %% (r.status, r.read().decode())
    except urllib.error.HTTPError as e:
        return "HTTP %%d %%s" %% (e.code, e.headers.get("X-Cellblock-Denial"))
def rq(r):
    return "%%d %%s" %% (r.status_code, r.headers.get("X-Cellblock-Denial") or r.text)
print(get(base + "?fine=1", {"Authorization": "Bearer not-a-placeholder"}))
print(get(base, {"Authorization": "Bearer " + ph}))
print(get(base + "?key=" + ph))
print(get(base, data=b"x" * 100000 + ph.encode()))
print(rq(requests.get(base, headers={"X-Api-Key": ph}, timeout=30)))
print(rq(requests.get(base, auth=("__token__", ph), timeout=30)))
def pieces():
    yield b"a=" + ph[:9].encode()
    yield ph[9:].encode() + b"&b=2"
print(rq(httpx.post(base, content=pieces(), timeout=30)))
proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
c = http.client.HTTPSConnection(proxy.hostname, proxy.port, context=ssl.create_default_context(), timeout=30)
c.set_tunnel("localhost", %[1]d)
c.putrequest("POST", "/echo")
c.putheader("Content-Length", str(len(ph) + 2))
c.endheaders()
c.send(b"a=" + ph[:9].encode())
c.send(ph[9:].encode())
r = c.getresponse()
print(r.status, r.getheader("X-Cellblock-Denial"))
def tunnel(*writes):
    c = socket.create_connection((proxy.hostname, proxy.port), timeout=30)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c.sendall(b"CONNECT localhost:%[2]d HTTP/1.1\r\nHost: localhost:%[2]d\r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        head += c.recv(1)
    for w in writes:
        c.sendall(w)
    got = b""
    while b"end\n" not in got:
        try:
            b = c.recv(4096)
        except OSError:
            break
        if not b:
            break
        got += b
    c.close()
    return "%%s | %%r" %% (head.split(b"\r\n")[0].decode(), got)
print(tunnel(b"hello\n", b"end\n"))
print(tunnel(b"hello\n", b"AUTH " + ph[:7].encode(), ph[7:].encode() + b"\n", b"end\n"))
`, s.unbound.Port, s.raw.Port)})
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	want := []string{
		"200 auth=Bearer not-a-placeholder query=fine=1 value=cbph_",
		"HTTP 403 secret_host", "HTTP 403 secret_host", "HTTP 403 secret_host",
		"403 secret_host", "403 secret_host", "403 secret_host", "403 secret_host",
		`HTTP/1.1 200 Connection established | b'hello\nend\n'`,
		`HTTP/1.1 200 Connection established | b'`,
	}
	ok := len(lines) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = strings.HasPrefix(lines[i], want[i])
	}
	if !ok || strings.Contains(lines[len(lines)-1], "end") || strings.Contains(lines[len(lines)-1], "cbph_") {
		t.Fatalf("output:\n%s\nstderr %s\ndenials %+v", res.Stdout, res.Stderr, res.Denials)
	}
	s.noValue(t, "the output", res.Stdout)
	seen, _ := s.unbound.requests()
	if len(seen) == 0 || strings.Contains(strings.Join(seen, "\n"), "cbph_") {
		t.Errorf("the unbound host got %q", seen)
	}
	if got := s.raw.received(); strings.Contains(got, "cbph_") || !strings.HasPrefix(got, "hello\nend\nhello\n") || strings.Count(got, "end") != 1 {
		t.Errorf("the TCP server got %q", got)
	}
	got := map[int]int{}
	for _, d := range res.Denials {
		if d.Kind != api.DenialSecret || d.Secret != "GH_TOKEN" || d.Host != "localhost" || d.Reason != api.DenySecretHost {
			t.Errorf("denial %+v", d)
		}
		got[d.Port] += d.Count
	}
	if got[s.unbound.Port] != 7 || got[s.raw.Port] != 1 {
		t.Errorf("denials %+v", res.Denials)
	}
	raw, err := os.ReadFile(filepath.Join(s.d.StateDir, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	var entry audit.Entry
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var e audit.Entry
		if json.Unmarshal([]byte(line), &e) == nil && e.RunID == res.RunID {
			entry = e
		}
	}
	refused := 0
	for _, u := range entry.SecretUses {
		if u.Secret == "GH_TOKEN" && u.Outcome == api.SecretRefused && u.Host == "localhost" {
			refused += u.Count
		}
	}
	if len(entry.Denials) != 2 || refused != 8 {
		t.Errorf("audit entry: denials %+v, uses %+v", entry.Denials, entry.SecretUses)
	}
	if m := scrapeMetrics(t, s.d.Socket); m[`cellblock_secret_uses_total{outcome="refused",secret="GH_TOKEN"}`] != 8 {
		t.Errorf("metrics: %v", filterMetrics(m, "cellblock_secret"))
	}

	// Without secrets, a blind tunnel: the jail sees the host's own
	// certificate, of a CA it does not trust.
	res = runOK(t, s.d, &api.RunRequest{Network: &api.Network{Allow: allow}, Code: fmt.Sprintf(`
import ssl, urllib.error, urllib.request
try:
    urllib.request.urlopen("https://localhost:%d/echo", timeout=30)
    print("trusted")
except urllib.error.URLError as e:
    print("untrusted" if isinstance(e.reason, ssl.SSLCertVerificationError) else repr(e))
`, s.unbound.Port)})
	if strings.TrimSpace(res.Stdout) != "untrusted" {
		t.Errorf("a run without secrets: %q %s", res.Stdout, res.Stderr)
	}
	s.noValue(t, "the daemon's log", s.d.Log())
}

func filterMetrics(m map[string]float64, prefix string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if strings.HasPrefix(k, prefix) {
			out[k] = v
		}
	}
	return out
}

// Who may ask: uid 65533 has OTHER_TOKEN and not GH_TOKEN (forbidden,
// naming the entry), an unknown name is a bad request; root sees the
// secrets in info, 65533 does not; the CLI's --secret; the CA's key stays
// in a 0700 directory, mode 0600.
func TestSecretsGrantsAndInfo(t *testing.T) {
	s := startSecretDaemon(t)
	if err := os.Chmod(filepath.Dir(s.d.Socket), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(s.d.Socket, 0o666); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		secrets string
		status  int
		typ     api.ErrorType
		field   string
	}{
		{`["OTHER_TOKEN", "GH_TOKEN"]`, 403, api.ErrForbidden, "secrets[1]"},
		{`["NOPE"]`, 400, api.ErrBadRequest, "secrets[0]"},
		{`["OTHER_TOKEN"]`, 200, "", ""},
	} {
		code, body := asUID(t, s.d, "POST", api.PathRuns, `{"code": "import os\nprint(os.environ['OTHER_TOKEN'][:5])", "secrets": `+c.secrets+`}`)
		var res api.Result
		json.Unmarshal(body, &res)
		if code != c.status || c.typ != "" && (res.Error == nil || res.Error.Type != c.typ || res.Error.Field != c.field) ||
			c.typ == "" && res.Stdout != "cbph_\n" {
			t.Errorf("%s as uid 65533: %d %s", c.secrets, code, body)
		}
	}
	code, body := asUID(t, s.d, "POST", api.PathSessions, `{"secrets": ["GH_TOKEN"]}`)
	if code != 403 || !strings.Contains(string(body), "secrets[0]") {
		t.Errorf("a session as uid 65533: %d %s", code, body)
	}
	code, body = asUID(t, s.d, "GET", api.PathInfo, "")
	if code != 200 || strings.Contains(string(body), "GH_TOKEN") {
		t.Errorf("info as uid 65533: %d %s", code, body)
	}
	info, err := s.d.Client.Info(context.Background())
	if err != nil || len(info.Secrets) != 2 || info.Secrets[0].Name != "GH_TOKEN" ||
		info.Secrets[0].Hosts[0] != fmt.Sprintf("localhost:%d", s.secure.Port) || fmt.Sprint(info.Secrets[1].AllowUIDs) != "[65533]" {
		t.Errorf("info as root: %+v %v", info.Secrets, err)
	}
	s.noValue(t, "info", fmt.Sprint(info))
	out, errs, exit := cli(t, s.d, "", "run", "--secret", "GH_TOKEN", "-c", fmt.Sprintf(`import os, urllib.request
r = urllib.request.Request("https://localhost:%d/echo", headers={"Authorization": "Bearer " + os.environ["GH_TOKEN"]})
print(urllib.request.urlopen(r, timeout=30).read().decode())`, s.secure.Port))
	if exit != 0 || !strings.HasPrefix(out, "auth=Bearer cbph_") {
		t.Errorf("cellblock run --secret: %d %q %q", exit, out, errs)
	}
	s.noValue(t, "the CLI's output", out, errs)
	out, _, _ = cli(t, s.d, "", "info")
	if !strings.Contains(out, "secret GH_TOKEN") {
		t.Errorf("cellblock info:\n%s", out)
	}
	// The daemon holding the values: no core file, its memory locked.
	pid := s.d.Cmd.Process.Pid
	limits, _ := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	var locked int64
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmLck:" {
			locked, _ = strconv.ParseInt(f[1], 10, 64)
		}
	}
	var core []string // soft and hard
	for _, line := range strings.Split(string(limits), "\n") {
		if rest, ok := strings.CutPrefix(line, "Max core file size"); ok {
			core = strings.Fields(rest)
		}
	}
	if len(core) < 2 || core[0] != "0" || core[1] != "0" || locked == 0 {
		t.Errorf("the daemon: %d kB locked, core file limits %q", locked, core)
	}
	for p, mode := range map[string]os.FileMode{
		filepath.Join(s.d.StateDir, "egress-ca"):               0o700,
		filepath.Join(s.d.StateDir, "egress-ca", "ca-key.pem"): 0o600,
	} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != mode {
			t.Errorf("%s: %v %v, want %v", p, st, err, mode)
		}
	}
}

// SIGHUP rotates the value without a restart: a session made before
// sends the new value in its next run, and so does a fresh run; the old
// value is still taken out of what comes back.
func TestSecretsRotateOnSIGHUP(t *testing.T) {
	s := startSecretDaemon(t)
	ctx := context.Background()
	sess, err := s.d.Client.CreateSession(ctx, &api.SessionRequest{Secrets: []string{"GH_TOKEN"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.d.Client.DeleteSession(ctx, sess.ID)
	code := fmt.Sprintf(`import os, urllib.request
r = urllib.request.Request("https://localhost:%d/echo", headers={"Authorization": "Bearer " + os.environ["GH_TOKEN"]})
print(urllib.request.urlopen(r, timeout=30).read().decode())`, s.secure.Port)
	runOK(t, s.d, &api.RunRequest{Session: sess.ID, Code: code})
	old := s.current()
	rotated := newValue(t)
	if err := os.WriteFile(s.file, []byte(rotated+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pid := s.d.Cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := s.d.WaitLog(wctx, "secrets reloaded"); err != nil {
		t.Fatal(err)
	}
	// The server echoes the old value: the jail must not see it either.
	for _, req := range []*api.RunRequest{{Session: sess.ID, Code: code}, {Code: code, Secrets: []string{"GH_TOKEN"}}} {
		res := runOK(t, s.d, req)
		_, auths := s.secure.requests()
		if last := auths[len(auths)-1]; last != "Bearer "+rotated {
			t.Errorf("after SIGHUP the host got %q", last)
		}
		if strings.Contains(res.Stdout, old) || strings.Contains(res.Stdout, rotated) || !strings.Contains(res.Stdout, "value=cbph_") {
			t.Errorf("the program got %q", res.Stdout)
		}
	}
	if s.d.Cmd.Process.Pid != pid || s.d.Exited() {
		t.Error("the daemon restarted")
	}
	s.mu.Lock()
	s.value = rotated
	s.mu.Unlock()
	s.noValue(t, "the daemon's log", s.d.Log())
	if strings.Contains(s.d.Log(), old) {
		t.Error("the daemon's log holds the old value")
	}
}

// A secret with no host, or a host beyond --network-allow, stops the
// daemon before it starts; so does a file it cannot read, named without
// its content.
func TestSecretWithNoHostRefusesToStart(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	os.WriteFile(file, []byte("short"), 0o600)
	for _, c := range []struct {
		args []string
		exit int
		want string
	}{
		{[]string{"--network-allow", "api.github.com:443", "--secret", "GH_TOKEN=" + file}, 2, "--secret GH_TOKEN has no --secret-host"},
		{[]string{"--network-allow", "api.github.com:443", "--secret", "GH_TOKEN=" + file, "--secret-host", "GH_TOKEN=evil.example:443"}, 2, "beyond --network-allow"},
		{[]string{"--network-allow", "api.github.com:443", "--secret", "GH_TOKEN=" + file, "--secret-host", "GH_TOKEN=api.github.com:443"}, 1, "secret GH_TOKEN: " + file + " holds 5 bytes"},
	} {
		cmd := exec.Command(bin(t, "cellblockd"), append(c.args, "--state-dir", filepath.Join(dir, "state"), "--socket", filepath.Join(dir, "s.sock"),
			"--cgroup-name", cgroupName(t))...)
		out, _ := cmd.CombinedOutput()
		if cmd.ProcessState.ExitCode() != c.exit || !strings.Contains(string(out), c.want) || strings.Contains(string(out), "short") {
			t.Errorf("%q: exit %d\n%s", c.args, cmd.ProcessState.ExitCode(), out)
		}
	}
}

// cellblock-mcp --secret: run_python's description names the variable,
// and the code uses the secret as it is.
func TestSecretsMCP(t *testing.T) {
	s := startSecretDaemon(t)
	c := mcpStdioArgs(t, s.d.Socket, []string{"--secret", "GH_TOKEN"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tools, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		if tool.Name == "run_python" && !strings.Contains(tool.Description, `os.environ["GH_TOKEN"]`) {
			t.Errorf("run_python's description does not name the secret:\n%s", tool.Description)
		}
	}
	res := mcpCall(t, ctx, c, "run_python", map[string]any{"code": fmt.Sprintf(`import os, urllib.request
r = urllib.request.Request("https://localhost:%d/echo", headers={"Authorization": "Bearer " + os.environ["GH_TOKEN"]})
urllib.request.urlopen(r, timeout=30).read().decode()`, s.secure.Port)}, nil)
	text := mcpText(res)
	if res.IsError || !strings.Contains(text, "auth=Bearer cbph_") {
		t.Errorf("run_python: %s", text)
	}
	s.noValue(t, "run_python's result", text)
	if _, auths := s.secure.requests(); len(auths) != 1 || auths[0] != "Bearer "+s.current() {
		t.Errorf("the host got %q", auths)
	}
}
