package mcpserver

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/mark3labs/mcp-go/server"

	"github.com/cellblock/cellblock/internal/client"
)

// stdioWorkers is how many tools/call requests the stdio transport serves
// at once (mcp-go's default is 5). Calls beyond it wait in mcp-go's queue;
// the daemon has its own queue and limit behind that.
const stdioWorkers = 64

// HTTPPath is where ServeHTTP serves the streamable HTTP endpoint.
const HTTPPath = "/mcp"

// httpShutdownGrace is how long ServeHTTP lets calls in flight finish after
// ctx ends before it closes their connections, which cancels them (and so
// makes the daemon kill their runs).
const httpShutdownGrace = 5 * time.Second

// ServeStdio serves s over newline-delimited JSON-RPC on in and out until in
// reaches EOF or ctx ends. Calls still in flight then are cancelled, which
// makes the daemon kill their runs.
//
// mcp-go keeps the state of the stdio session in a package variable, so
// only one ServeStdio may run in a process at a time.
func ServeStdio(ctx context.Context, s *server.MCPServer, in io.Reader, out io.Writer, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ss := server.NewStdioServer(s)
	ss.SetErrorLogger(slog.NewLogLogger(log.Handler(), slog.LevelError))
	server.WithWorkerPoolSize(stdioWorkers)(ss)
	err := ss.Listen(ctx, in, out)
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil
	}
	return err
}

// HTTPOptions are how ServeHTTP serves.
type HTTPOptions struct {
	// Security is checked on every request to the MCP endpoint
	// (ListenHTTP says which checks a listener needs).
	Security HTTPSecurity
	// Status, if set, serves ReadyPath and MetricsPath without a token
	// (see node.go): for a router's health checks, the kubelet's probes
	// and Prometheus. ServeHTTP closes it when it returns.
	Status net.Listener
	// Daemon is asked for its health (ReadyPath) and metrics
	// (MetricsPath); nil leaves both out of the daemon's hands: ready
	// unless draining, and no metrics.
	Daemon *client.Client
	// Drain, when positive, is how long ServeHTTP waits after ctx ends for
	// the open MCP sessions to be closed by their clients, while it takes
	// no new ones, before it stops and ends them. Zero stops at once.
	Drain time.Duration
	// Log receives the server's log; nil discards it.
	Log *slog.Logger
}

// ServeHTTP serves s as a streamable HTTP endpoint at HTTPPath on ln until
// ctx ends (then, with a drain time, until its sessions are closed or the
// time is up), making opts.Security's checks on every request. A call is
// cancelled when its client goes away (over HTTP that is how MCP cancels:
// the client ends the request's stream).
//
// MCP sessions (protocol 2025-11-25 and before) are this process's own:
// a request naming one it did not issue, or that has ended, is answered
// 404 with a lost-session error (node.go). MCP sessions a client leaves
// behind end after opts.Security.Sessions.Idle, and at most
// opts.Security.Sessions.Max are live (httpsessions.go).
//
// Besides the Origin check, requests that come in over loopback with a
// Host header other than localhost are refused (mcp-go's DNS-rebinding
// protection).
func ServeHTTP(ctx context.Context, s *server.MCPServer, ln net.Listener, opts HTTPOptions) error {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	n := &node{ids: newHTTPSessions(opts.Security.Sessions), daemon: opts.Daemon, log: log}
	streamable := server.NewStreamableHTTPServer(s, server.WithStreamableHTTPLogger(log),
		server.WithSessionIdManager(n.ids))
	mux := http.NewServeMux()
	mux.Handle(HTTPPath, n.guard(streamable))
	sweepCtx, stopSweep := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSweep()
	go n.ids.sweep(sweepCtx, streamable, log)
	hs := &http.Server{
		Handler:           opts.Security.guard(mux, log),
		ConnContext:       connContext,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}

	errc := make(chan error, 2)
	go func() { errc <- hs.Serve(ln) }()
	var status *http.Server
	if opts.Status != nil {
		status = &http.Server{
			Handler:           n.statusHandler(),
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		}
		go func() { errc <- status.Serve(opts.Status) }()
	}
	var serveErr error
	select {
	case serveErr = <-errc:
	case <-ctx.Done():
		if opts.Drain > 0 {
			n.drain(opts.Drain)
		}
	}

	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), httpShutdownGrace)
	defer cancel()
	_ = streamable.Shutdown(sctx)
	if err := hs.Shutdown(sctx); err != nil {
		// Calls still running past the grace: closing their connections
		// cancels them.
		_ = hs.Close()
	}
	if status != nil {
		_ = status.Close()
	}
	if serveErr == nil {
		if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
			serveErr = err
		}
	}
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	return serveErr
}
