package mcpserver

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cellblock/cellblock/internal/peercred"
)

// MinTokenBytes is the shortest bearer token ListenHTTP accepts.
const MinTokenBytes = 16

// HTTPSecurity decides who may use the streamable HTTP endpoint. Anyone
// who gets through runs code in the sandbox with this process's access to
// the daemon, so every request is checked.
type HTTPSecurity struct {
	// Token, when not empty, must come with every request as
	// "Authorization: Bearer TOKEN" (401 otherwise).
	Token string
	// AllowOrigins are the Origin header values a request may carry. A
	// request from a browser page always carries one, and one that is not
	// listed is refused (403): a page must not drive the server through
	// the user's browser (DNS rebinding). A request without Origin (an
	// agent, not a browser) passes this check.
	AllowOrigins []string
	// Peers, when set, is the access check of a Unix socket endpoint: the
	// caller's SO_PEERCRED credentials must pass it (403 otherwise), as on
	// the daemon's own socket. A connection without credentials (not a
	// Unix socket) is refused.
	Peers func(peercred.Peer) bool
	// Sessions bounds the MCP sessions clients may leave behind (see
	// HTTPSessionLimits); the zero value is the defaults.
	Sessions HTTPSessionLimits
}

type httpPeerKey struct{}

// connContext stores a Unix socket connection's peer credentials.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if p, err := peercred.Get(c); err == nil {
		return context.WithValue(ctx, httpPeerKey{}, p)
	}
	return ctx
}

// guard wraps next with sec's checks. Refusals are logged without the
// token.
func (sec HTTPSecurity) guard(next http.Handler, log *slog.Logger) http.Handler {
	want := sha256.Sum256([]byte(sec.Token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sec.Peers != nil {
			p, ok := r.Context().Value(httpPeerKey{}).(peercred.Peer)
			if !ok || !sec.Peers(p) {
				log.Warn("refused MCP caller", "uid", p.UID, "gid", p.GID, "pid", p.PID)
				http.Error(w, "this user may not use cellblock-mcp", http.StatusForbidden)
				return
			}
		}
		if origin := r.Header.Get("Origin"); origin != "" && !slices.Contains(sec.AllowOrigins, origin) {
			log.Warn("refused MCP request from a browser origin that is not allowed (--allow-origin)", "origin", origin, "remote", r.RemoteAddr)
			http.Error(w, "origin not allowed", http.StatusForbidden)
			return
		}
		if sec.Token != "" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			sum := sha256.Sum256([]byte(got))
			if !ok || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
				log.Warn("refused MCP request without the bearer token", "remote", r.RemoteAddr)
				w.Header().Set("WWW-Authenticate", `Bearer realm="cellblock-mcp"`)
				http.Error(w, "a bearer token is required (Authorization: Bearer TOKEN)", http.StatusUnauthorized)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// HTTPListenConfig is how cellblock-mcp --http listens.
type HTTPListenConfig struct {
	// Addr is HOST:PORT for TCP, or unix:PATH for a Unix socket.
	Addr string
	// TokenFile holds the bearer token clients must send. Required on
	// TCP; optional on a Unix socket, whose peers are checked by
	// credentials.
	TokenFile string
	// AllowOrigins are the browser origins allowed (see HTTPSecurity).
	AllowOrigins []string
	// TLSCert and TLSKey serve TLS on TCP; required off loopback unless
	// InsecureNonLoopback.
	TLSCert, TLSKey     string
	InsecureNonLoopback bool
	// AllowUIDs and SocketGroup admit callers of a Unix socket besides
	// root and this process's own uid, as the daemon's --allow-uid and
	// --socket-group do.
	AllowUIDs   []int
	SocketGroup string
	// Sessions bounds the MCP sessions (idle timeout, how many); the
	// zero value is the defaults.
	Sessions HTTPSessionLimits
}

// ListenHTTP opens the endpoint cfg describes and returns it with the
// checks ServeHTTP must make. It refuses set-ups that would let anyone
// who reaches the port run code: TCP without a token, and a non-loopback
// address without TLS unless InsecureNonLoopback (which is logged as a
// warning every time).
func ListenHTTP(cfg HTTPListenConfig, log *slog.Logger) (net.Listener, HTTPSecurity, error) {
	sec := HTTPSecurity{AllowOrigins: cfg.AllowOrigins, Sessions: cfg.Sessions}
	for _, o := range cfg.AllowOrigins {
		if !strings.HasPrefix(o, "http://") && !strings.HasPrefix(o, "https://") || strings.HasSuffix(o, "/") {
			return nil, sec, fmt.Errorf("--allow-origin %q: an origin is scheme://host[:port], such as https://app.example.org", o)
		}
	}
	if cfg.TokenFile != "" {
		tok, err := readToken(cfg.TokenFile, log)
		if err != nil {
			return nil, sec, err
		}
		sec.Token = tok
	}
	if path, ok := strings.CutPrefix(cfg.Addr, "unix:"); ok {
		if cfg.TLSCert != "" || cfg.TLSKey != "" {
			return nil, sec, errors.New("--tls-cert and --tls-key are for TCP; a Unix socket is checked by peer credentials")
		}
		ln, err := listenUnix(path, cfg.SocketGroup, cfg.AllowUIDs)
		if err != nil {
			return nil, sec, err
		}
		sec.Peers = peercred.AllowList(cfg.SocketGroup, append(slices.Clone(cfg.AllowUIDs), os.Getuid()), log)
		return ln, sec, nil
	}
	if sec.Token == "" {
		return nil, sec, errors.New("--http on TCP needs --token-file: without a token any local user (and any page in a browser) could run code through it; use --http unix:PATH for a socket checked by peer credentials")
	}
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		return nil, sec, errors.New("--tls-cert and --tls-key go together")
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, sec, err
	}
	tcp, _ := ln.Addr().(*net.TCPAddr)
	loopback := tcp != nil && tcp.IP.IsLoopback()
	switch {
	case cfg.TLSCert != "":
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			ln.Close()
			return nil, sec, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	case !loopback && !cfg.InsecureNonLoopback:
		ln.Close()
		return nil, sec, fmt.Errorf("--http %s is not a loopback address: serve TLS (--tls-cert, --tls-key) or pass --insecure-non-loopback to send the token in clear text", cfg.Addr)
	case !loopback:
		log.Warn("--insecure-non-loopback: serving MCP without TLS on a non-loopback address; the bearer token and every run's code and output cross the network in clear text", "addr", ln.Addr().String())
	}
	return ln, sec, nil
}

// readToken reads the bearer token from path: its content without the
// surrounding white space.
func readToken(path string, log *slog.Logger) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < MinTokenBytes || strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("--token-file %s: the token must be one word of at least %d bytes (for example: head -c 32 /dev/urandom | base64 > %s)", path, MinTokenBytes, path)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		log.Warn("--token-file can be read by other users; chmod 600 it", "path", path, "mode", fi.Mode().Perm().String())
	}
	return tok, nil
}

// listenUnix listens on a Unix socket at path, replacing a stale socket
// (one nobody answers on) but nothing else. The socket is 0660 and
// group-owned by group when one is given, else 0600, and its ACL lets
// uids in too: the file's permissions are a first gate, the peer check
// the real one.
func listenUnix(path, group string, uids []int) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket; refusing to replace it", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("another server is already listening on %s", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	mode := os.FileMode(0o600)
	if group != "" {
		g, err := user.LookupGroup(group)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("--socket-group: %w", err)
		}
		gid, _ := strconv.Atoi(g.Gid)
		if err := os.Chown(path, -1, gid); err != nil {
			ln.Close()
			return nil, fmt.Errorf("--socket-group: %w", err)
		}
		mode = 0o660
	}
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return nil, err
	}
	if err := peercred.AllowUIDsOnSocket(path, uids); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}
