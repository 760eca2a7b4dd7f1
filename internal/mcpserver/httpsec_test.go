package mcpserver

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellblock/cellblock/internal/peercred"
)

const testToken = "s3cret-token-for-the-tests"

// initializeBody is an MCP initialize request.
const initializeBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`

// serveSecured serves a real MCP server on ln with sec until the test ends.
func serveSecured(t *testing.T, ln net.Listener, sec HTTPSecurity) {
	t.Helper()
	srv := newServer(t, startFakeDaemon(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeHTTP(ctx, srv, ln, HTTPOptions{Security: sec}) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("ServeHTTP did not return")
		}
	})
}

// post sends an initialize request with headers and returns the status.
func post(t *testing.T, hc *http.Client, url string, headers map[string]string) int {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(initializeBody))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// Over TCP every request needs the token, and a browser origin must be on
// the allowlist: a page on evil.example cannot open a session even with a
// token it somehow got, and nobody opens one without it.
func TestHTTPTokenAndOrigin(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveSecured(t, ln, HTTPSecurity{Token: testToken, AllowOrigins: []string{"https://app.example.org"}})
	url := "http://" + ln.Addr().String() + HTTPPath
	bearer := "Bearer " + testToken
	for _, c := range []struct {
		name    string
		headers map[string]string
		want    int
	}{
		{"no token", nil, http.StatusUnauthorized},
		{"wrong token", map[string]string{"Authorization": "Bearer " + strings.Repeat("x", len(testToken))}, http.StatusUnauthorized},
		{"token as basic auth", map[string]string{"Authorization": "Basic " + testToken}, http.StatusUnauthorized},
		{"token prefix", map[string]string{"Authorization": bearer[:len(bearer)-1]}, http.StatusUnauthorized},
		{"evil origin", map[string]string{"Authorization": bearer, "Origin": "http://evil.example"}, http.StatusForbidden},
		{"evil origin without token", map[string]string{"Origin": "http://evil.example"}, http.StatusForbidden},
		{"allowed origin", map[string]string{"Authorization": bearer, "Origin": "https://app.example.org"}, http.StatusOK},
		{"no origin", map[string]string{"Authorization": bearer}, http.StatusOK},
	} {
		if got := post(t, http.DefaultClient, url, c.headers); got != c.want {
			t.Errorf("%s: status %d, want %d", c.name, got, c.want)
		}
	}
}

// On a Unix socket the caller's credentials decide, as on the daemon's
// socket.
func TestHTTPUnixSocketPeers(t *testing.T) {
	for _, allow := range []bool{true, false} {
		path := filepath.Join(t.TempDir(), "mcp.sock")
		ln, sec, err := ListenHTTP(HTTPListenConfig{Addr: "unix:" + path}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("socket mode %v, %v; want 0600", fi.Mode(), err)
		}
		if sec.Peers == nil || !sec.Peers(peercred.Peer{UID: uint32(os.Getuid())}) || sec.Peers(peercred.Peer{UID: 65534, GID: 65534}) && os.Getuid() != 65534 {
			t.Errorf("the socket's peer check must admit this uid and refuse 65534")
		}
		sec.Peers = func(peercred.Peer) bool { return allow }
		serveSecured(t, ln, sec)
		hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		}}}
		want := http.StatusForbidden
		if allow {
			want = http.StatusOK
		}
		if got := post(t, hc, "http://localhost"+HTTPPath, nil); got != want {
			t.Errorf("peer allowed=%v: status %d, want %d", allow, got, want)
		}
	}
}

// The uids of --allow-uid reach the Unix socket by its ACL, as on the
// daemon's socket: the file's mode alone (0600) would keep them out.
func TestHTTPUnixSocketACL(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mcp.sock")
	ln, _, err := ListenHTTP(HTTPListenConfig{Addr: "unix:" + path, AllowUIDs: []int{65534}}, slog.New(slog.DiscardHandler))
	if errors.Is(err, peercred.ErrNoACL) {
		t.Skipf("the temporary directory's filesystem has no ACLs: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acl := make([]byte, 256)
	n, err := unix.Getxattr(path, "system.posix_acl_access", acl)
	// version 2, then the owner's entry (tag 1), then uid 65534's (tag 2).
	if err != nil || n < 4+16 || acl[4] != 1 || acl[12] != 2 || binary.LittleEndian.Uint32(acl[16:]) != 65534 {
		t.Errorf("the socket's ACL: %x %v", acl[:max(n, 0)], err)
	}
}

// ListenHTTP refuses the set-ups that would let anyone who reaches the
// port run code.
func TestListenHTTPRefusesOpenSetups(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("abc"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	for _, c := range []struct {
		name string
		cfg  HTTPListenConfig
		want string // a part of the error; "" for success
	}{
		{"TCP without a token", HTTPListenConfig{Addr: "127.0.0.1:0"}, "--token-file"},
		{"a short token", HTTPListenConfig{Addr: "127.0.0.1:0", TokenFile: short}, "at least"},
		{"all interfaces without TLS", HTTPListenConfig{Addr: "0.0.0.0:0", TokenFile: tokenFile}, "not a loopback address"},
		{"half of TLS", HTTPListenConfig{Addr: "127.0.0.1:0", TokenFile: tokenFile, TLSCert: "x"}, "go together"},
		{"a bad origin", HTTPListenConfig{Addr: "127.0.0.1:0", TokenFile: tokenFile, AllowOrigins: []string{"evil.example"}}, "scheme://host"},
		{"loopback with a token", HTTPListenConfig{Addr: "127.0.0.1:0", TokenFile: tokenFile}, ""},
		{"all interfaces, insecure on purpose", HTTPListenConfig{Addr: "0.0.0.0:0", TokenFile: tokenFile, InsecureNonLoopback: true}, ""},
	} {
		ln, sec, err := ListenHTTP(c.cfg, log)
		if c.want != "" {
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: %v, want an error about %q", c.name, err, c.want)
			}
			if ln != nil {
				ln.Close()
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		ln.Close()
		if sec.Token != testToken {
			t.Errorf("%s: token %q", c.name, sec.Token)
		}
	}
	if !strings.Contains(logs.String(), "--insecure-non-loopback") {
		t.Errorf("no warning for --insecure-non-loopback: %s", logs.String())
	}
}
