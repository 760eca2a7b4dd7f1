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

// ServeHTTP serves s as a streamable HTTP endpoint at HTTPPath on ln until
// ctx ends, making sec's checks on every request (ListenHTTP opens ln and
// says which). A call is cancelled when its client goes away (over HTTP
// that is how MCP cancels: the client ends the request's stream).
//
// Besides sec's Origin check, requests that come in over loopback with a
// Host header other than localhost are refused (mcp-go's DNS-rebinding
// protection). MCP sessions a client leaves behind end after
// sec.Sessions.Idle, and at most sec.Sessions.Max are live (see
// httpsessions.go).
func ServeHTTP(ctx context.Context, s *server.MCPServer, ln net.Listener, sec HTTPSecurity, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	sessions := newHTTPSessions(sec.Sessions)
	streamable := server.NewStreamableHTTPServer(s, server.WithStreamableHTTPLogger(log), server.WithSessionIdManager(sessions))
	mux := http.NewServeMux()
	mux.Handle(HTTPPath, sessions.guard(streamable, log))
	sweepCtx, stopSweep := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSweep()
	go sessions.sweep(sweepCtx, streamable, log)
	hs := &http.Server{
		Handler:           sec.guard(mux, log),
		ConnContext:       connContext,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}

	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}

	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), httpShutdownGrace)
	defer cancel()
	_ = streamable.Shutdown(sctx)
	if err := hs.Shutdown(sctx); err != nil {
		// Calls still running past the grace: closing their connections
		// cancels them.
		_ = hs.Close()
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
