package mcpserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/cellblock/cellblock/internal/client"
)

// One node of many.
//
// Behind a router (deploy/kubernetes: HAProxy learning each MCP session's
// node from the Mcp-Session-Id this server answers initialize with), an MCP
// session lives in exactly one cellblock-mcp process: its run_python
// session names, and the daemon sessions behind them, are that process's
// and that node's. So:
//
//   - An Mcp-Session-Id this process did not issue, or that has ended, is
//     answered 404 with a JSON-RPC error saying the session is lost (what
//     the MCP specification asks of a server that does not know a session,
//     and what makes a client start a new one). mcp-go's own default
//     accepts any well-formed id, so a request sent to the wrong node, or
//     to a node that restarted, would run without its session's names.
//   - GET /readyz on the status listener says whether this node should be
//     given new MCP sessions: 200 when the daemon is healthy and this
//     process is not draining; 404 otherwise, which HAProxy's
//     `http-check disable-on-404` reads as "keep sending this server its
//     existing sessions, but no new ones". A node whose listener does not
//     answer at all is down, and its sessions are lost.
//   - With a drain time, SIGTERM does not end the sessions at once: the
//     process stops taking new ones (readyz answers 404, a new initialize
//     gets 503, which the router retries on another node) and waits until
//     its clients have closed theirs, or the time is up, before it stops.
//   - The status listener also relays the daemon's GET /metrics, so that
//     Prometheus can scrape a daemon that serves only a Unix socket.

// lostSessionCode is the JSON-RPC error code of a lost session: the one
// the MCP reference SDKs answer "Session not found" with.
const lostSessionCode = -32001

// lostSessionMessage is what a client is told about an MCP session this
// process does not hold.
const lostSessionMessage = "session lost: this MCP session is not open on this cellblock node " +
	"(it was closed, it expired, the node that held it is gone, or its server restarted); " +
	"its run_python sessions and their variables are gone: initialize a new MCP session"

// lostSessionBody is the 404 answer's body.
var lostSessionBody = fmt.Sprintf(`{"jsonrpc":"2.0","id":null,"error":{"code":%d,"message":%q}}`+"\n",
	lostSessionCode, lostSessionMessage)

// readyTimeout bounds the daemon health check behind GET /readyz.
const readyTimeout = 2 * time.Second

// drainPoll is how often a draining server looks whether its sessions
// are all closed.
const drainPoll = 250 * time.Millisecond

// Status paths, served by the status listener without a token.
const (
	ReadyPath   = "/readyz"
	MetricsPath = "/metrics"
)

// node is the state ServeHTTP keeps for the checks above.
type node struct {
	ids      *httpSessions
	daemon   *client.Client // nil: readiness does not ask the daemon
	draining atomic.Bool
	log      *slog.Logger
}

// guard answers what mcp-go must not see: requests for sessions this
// process does not hold (404, session lost), a GET without a session,
// and, while draining or past the cap of live sessions, requests that
// would open a new session (503). Every request of a live session counts
// as in progress until it ends (httpSessions.begin).
func (n *node) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if mcp.IsModernProtocol(r.Header.Get(mcp.HeaderProtocolVersion)) {
			// 2026-07-28 has no MCP sessions: any node can serve it,
			// and there is nothing to keep.
			next.ServeHTTP(w, r)
			return
		}
		id := r.Header.Get(server.HeaderKeySessionID)
		switch {
		case id == "" && r.Method == http.MethodPost && n.draining.Load():
			// An initialize (a legacy request without a session is
			// nothing else): this node is going away.
			w.Header().Set("Retry-After", "1")
			http.Error(w, "this cellblock node is draining and takes no new MCP sessions; try another", http.StatusServiceUnavailable)
			return
		case id == "" && r.Method == http.MethodGet:
			http.Error(w, "a GET stream belongs to an MCP session: send initialize first, then GET with its Mcp-Session-Id", http.StatusBadRequest)
			return
		case id == "" && r.Method == http.MethodPost && n.ids.full() && isInitialize(r):
			n.log.Warn("refused an MCP initialize: the most MCP sessions are live", "max", n.ids.limits.Max)
			http.Error(w, "cellblock-mcp holds the most MCP sessions it keeps; retry later (idle sessions end after "+
				fmtDuration(n.ids.limits.Idle)+")", http.StatusServiceUnavailable)
			return
		case id == "":
			next.ServeHTTP(w, r)
			return
		case r.Method != http.MethodPost && !n.ids.known(id):
			// mcp-go checks a POST's session itself (an initialize may
			// carry a stale one and must get a new session), but would
			// open a stream on any id a GET names.
			writeLostSession(w)
			return
		}
		if n.ids.begin(id) {
			defer n.ids.end(id)
		}
		next.ServeHTTP(&lostSessionWriter{ResponseWriter: w}, r)
	})
}

// writeLostSession answers 404 with the lost-session error.
func writeLostSession(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Del("Content-Length")
	w.WriteHeader(http.StatusNotFound)
	_, _ = w.Write([]byte(lostSessionBody))
}

// lostSessionWriter replaces mcp-go's plain-text 404 for a session it does
// not know ("Invalid session ID") with the lost-session error. mcp-go
// answers 404 on its endpoint for nothing else.
type lostSessionWriter struct {
	http.ResponseWriter
	replaced bool
}

func (w *lostSessionWriter) WriteHeader(code int) {
	if code == http.StatusNotFound {
		w.replaced = true
		writeLostSession(w.ResponseWriter)
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *lostSessionWriter) Write(b []byte) (int, error) {
	if w.replaced {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

// Flush lets mcp-go stream server-sent events through the wrapper.
func (w *lostSessionWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the real writer.
func (w *lostSessionWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// ready says why this node should not get new MCP sessions, or nil.
func (n *node) ready(ctx context.Context) error {
	if n.draining.Load() {
		return errors.New("draining: cellblock-mcp is stopping and takes no new MCP sessions")
	}
	if n.daemon == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	status, err := n.daemon.HealthStatus(ctx)
	if err != nil {
		return err
	}
	if status != "ok" {
		return fmt.Errorf("cellblockd is %s", status)
	}
	return nil
}

// statusHandler serves ReadyPath and, with a daemon, MetricsPath.
func (n *node) statusHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+ReadyPath, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := n.ready(r.Context()); err != nil {
			// 404, not 503: see the comment at the top of this file.
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, "not ready: %v\n", err)
			return
		}
		fmt.Fprintf(w, "ok: %d MCP sessions open\n", n.ids.count())
	})
	if n.daemon != nil {
		mux.HandleFunc("GET "+MetricsPath, func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
			defer cancel()
			var buf bytes.Buffer
			ctype, err := n.daemon.Metrics(ctx, &buf)
			if err != nil {
				n.log.Warn("relay the daemon's metrics", "err", err)
				http.Error(w, "cellblockd's metrics: "+err.Error(), http.StatusBadGateway)
				return
			}
			if ctype != "" {
				w.Header().Set("Content-Type", ctype)
			}
			_, _ = w.Write(buf.Bytes())
		})
	}
	return mux
}

// drain stops taking new sessions and waits until the open ones are
// closed, or for d at most.
func (n *node) drain(d time.Duration) {
	n.draining.Store(true)
	open := n.ids.count()
	if open == 0 {
		return
	}
	n.log.Info("draining: waiting for the open MCP sessions to close", "sessions", open, "at_most", d)
	deadline := time.Now().Add(d)
	t := time.NewTicker(drainPoll)
	defer t.Stop()
	for range t.C {
		if open = n.ids.count(); open == 0 {
			n.log.Info("drained: every MCP session is closed")
			return
		}
		if time.Now().After(deadline) {
			n.log.Warn("drain time is up: ending the MCP sessions still open", "sessions", open)
			return
		}
	}
}
