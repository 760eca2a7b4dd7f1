package mcpserver

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/cellblock/cellblock/internal/api"
)

// The same scenarios over the two real transports, stdio (here over pipes)
// and streamable HTTP, in both protocol eras: these are the paths on which
// cancellation travels as a message (notifications/cancelled on stdio) or
// as the end of an HTTP request, rather than as a Go context.

// serveStdioPipes serves srv with ServeStdio over pipes and returns a
// client on the other end. mcp-go's stdio session is a package variable, so
// these tests do not run in parallel.
func serveStdioPipes(t *testing.T, srv *server.MCPServer, opts ...mcpclient.ClientOption) *mcpclient.Client {
	t.Helper()
	clientIn, serverOut := io.Pipe()
	serverIn, clientOut := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeStdio(ctx, srv, serverIn, serverOut, nil) }()
	t.Cleanup(func() {
		clientOut.Close() // EOF: the server stops
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("ServeStdio: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("ServeStdio did not return")
		}
		serverOut.Close()
	})
	c := mcpclient.NewClient(transport.NewIO(clientIn, clientOut, io.NopCloser(strings.NewReader(""))), opts...)
	initialize(t, c)
	return c
}

// serveHTTP serves srv with ServeHTTP on a loopback port and returns a
// client of it.
func serveHTTP(t *testing.T, srv *server.MCPServer, opts ...mcpclient.ClientOption) *mcpclient.Client {
	t.Helper()
	return dialHTTP(t, serveHTTPURL(t, srv), opts...)
}

// serveHTTPURL serves srv with ServeHTTP on a loopback port until the test
// ends and returns the endpoint's URL.
func serveHTTPURL(t *testing.T, srv *server.MCPServer) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeHTTP(ctx, srv, ln, HTTPOptions{Security: HTTPSecurity{Token: testToken}}) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("ServeHTTP: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("ServeHTTP did not return")
		}
	})
	return "http://" + ln.Addr().String() + HTTPPath
}

// dialHTTP returns an initialised client of the endpoint at url, closed
// when the test ends.
func dialHTTP(t *testing.T, url string, opts ...mcpclient.ClientOption) *mcpclient.Client {
	t.Helper()
	// The token goes on every request by the HTTP client: mcp-go's
	// WithHTTPHeaders leaves it off the DELETE that ends the session.
	tr, err := transport.NewStreamableHTTP(url,
		transport.WithHTTPBasicClient(&http.Client{Transport: bearer{testToken}}))
	if err != nil {
		t.Fatal(err)
	}
	c := mcpclient.NewClient(tr, opts...)
	initialize(t, c)
	return c
}

// bearer is an HTTP transport that sends a bearer token with every
// request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func TestStdioTransport(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			exerciseTransport(t, func(srv *server.MCPServer) *mcpclient.Client {
				return serveStdioPipes(t, srv, p.opts...)
			})
		})
	}
}

func TestHTTPTransport(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			exerciseTransport(t, func(srv *server.MCPServer) *mcpclient.Client {
				return serveHTTP(t, srv, p.opts...)
			})
		})
	}
}

// codeOf is the code of call i of exerciseTransport: even calls print,
// odd ones raise.
func codeOf(i int) string {
	if i%2 == 1 {
		return fmt.Sprintf("raise RuntimeError(%d)", i)
	}
	return fmt.Sprintf("print(%d)", i)
}

func exerciseTransport(t *testing.T, connect func(*server.MCPServer) *mcpclient.Client) {
	// Eight calls at once below: the daemon takes all of them.
	const n = 8
	info := testInfo()
	info.MaxConcurrent = n
	fd := startFakeDaemonFor(t, info)
	c := connect(newServer(t, fd))
	ns := collect(c)
	ctx := context.Background()

	tools, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(tools.Tools) != 4 {
		t.Errorf("%d tools listed", len(tools.Tools))
	}

	// Eight calls at once, each with its own output and progress token;
	// every run waits for all of them to be in flight.
	var arrived sync.WaitGroup
	arrived.Add(n)
	allIn := make(chan struct{})
	go func() { arrived.Wait(); close(allIn) }()
	tokens := map[string]string{} // code -> progress token
	for i := range n {
		tokens[codeOf(i)] = fmt.Sprintf("t%d", i)
	}
	fd.run = func(ctx context.Context, req *api.RunRequest, emit func(string, string)) *api.Result {
		emit("stdout", "progress of "+req.Code+"\n")
		arrived.Done()
		select {
		case <-allIn:
		case <-time.After(10 * time.Second):
			return &api.Result{ExitCode: 99, Stderr: "not concurrent"}
		}
		// The run goes on until its output has reached its caller.
		if !ns.wait(5*time.Second, func() bool { msgs, _ := ns.progress(tokens[req.Code]); return len(msgs) > 0 }) {
			return &api.Result{ExitCode: 98, Stderr: "no progress notification during the run"}
		}
		if strings.Contains(req.Code, "raise") {
			return &api.Result{ExitCode: 1, Stderr: "Traceback (most recent call last):\n  File \"main.py\", line 1\nRuntimeError: " + req.Code + "\n"}
		}
		return &api.Result{Stdout: "result of " + req.Code + "\n"}
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code := codeOf(i)
			res, err := c.CallTool(ctx, toolRequest(ToolRunPython, map[string]any{"code": code}, fmt.Sprintf("t%d", i)))
			switch {
			case err != nil:
				errs <- fmt.Errorf("call %d: %v", i, err)
			case i%2 == 0 && (res.IsError || !strings.Contains(resultText(res), "result of "+code)):
				errs <- fmt.Errorf("call %d: isError %v: %s", i, res.IsError, resultText(res))
			case i%2 == 1 && (!res.IsError || !strings.Contains(resultText(res), "RuntimeError: "+code)):
				errs <- fmt.Errorf("call %d: isError %v: %s", i, res.IsError, resultText(res))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range n {
		code := codeOf(i)
		var msgs []string
		ns.await(t, fmt.Sprintf("progress of call %d", i), 5*time.Second, func() bool {
			msgs, _ = ns.progress(fmt.Sprintf("t%d", i))
			return len(msgs) > 0
		})
		if got, want := strings.Join(msgs, ""), "progress of "+code+"\n"; got != want {
			t.Errorf("progress of call %d = %q, want %q", i, got, want)
		}
	}

	// Cancelling a call makes the daemon see its request end.
	started := make(chan string, 1)
	fd.run = blockUntilCanceled(started)
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := c.CallTool(cctx, toolRequest(ToolRunPython, map[string]any{"code": "import time; time.sleep(60)"}, nil))
		errc <- err
	}()
	<-started
	cancel()
	expectCanceled(t, fd, "import time; time.sleep(60)")
	if err := <-errc; !isCanceled(err) {
		t.Errorf("CallTool after cancel = %v, want a cancellation error", err)
	}

	// The session still works after a cancellation.
	fd.run = func(context.Context, *api.RunRequest, func(string, string)) *api.Result {
		return &api.Result{Stdout: "still here\n"}
	}
	res := callTool(t, ctx, c, ToolRunPython, map[string]any{"code": "print('still here')"})
	mustContain(t, resultText(res), "still here")
}

// TestTailOutputDelivered checks that output written just before a run
// ends still reaches the caller as a notification, also over streamable
// HTTP, where mcp-go drops notifications that are still queued when the
// call returns.
func TestTailOutputDelivered(t *testing.T) {
	for _, p := range protocols {
		t.Run("http-"+p.name, func(t *testing.T) {
			fd := startFakeDaemon(t)
			fd.run = func(_ context.Context, req *api.RunRequest, emit func(string, string)) *api.Result {
				emit("stdout", "last words of "+req.Code+"\n")
				return &api.Result{Stdout: "last words of " + req.Code + "\n"}
			}
			c := serveHTTP(t, newServer(t, fd), p.opts...)
			ns := collect(c)
			for i := range 20 {
				token := fmt.Sprintf("tail-%d", i)
				code := fmt.Sprintf("print(%d)", i)
				res, err := c.CallTool(context.Background(), toolRequest(ToolRunPython, map[string]any{"code": code}, token))
				if err != nil || res.IsError {
					t.Fatalf("call %d: %v %v", i, err, res)
				}
				ns.await(t, "the last output as a notification", 2*time.Second, func() bool {
					msgs, _ := ns.progress(token)
					return strings.Join(msgs, "") == "last words of "+code+"\n"
				})
			}
		})
	}
}
