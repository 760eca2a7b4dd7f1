package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/cellblock/cellblock/internal/api"
)

// These tests drive bin/cellblock-mcp as a subprocess, over stdio and over
// streamable HTTP, with mcp-go's own client, against the real daemon.

// mcpTransports are the ways a test connects to bin/cellblock-mcp. Stdio
// uses the initialize handshake most MCP clients use today; HTTP uses
// mcp-go's default, the stateless 2026-07-28 protocol.
var mcpTransports = []struct {
	name    string
	connect func(t *testing.T, socket string) *mcpclient.Client
}{
	{"stdio", func(t *testing.T, socket string) *mcpclient.Client {
		return mcpStdio(t, socket, mcpclient.WithProtocolVersion(mcp.LATEST_LEGACY_PROTOCOL_VERSION))
	}},
	{"http", func(t *testing.T, socket string) *mcpclient.Client { return mcpHTTP(t, socket) }},
	{"http-legacy", func(t *testing.T, socket string) *mcpclient.Client {
		return mcpHTTP(t, socket, mcpclient.WithProtocolVersion(mcp.LATEST_LEGACY_PROTOCOL_VERSION))
	}},
}

// mcpLogBuffer is a bytes.Buffer safe for a writer and a reader.
type mcpLogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *mcpLogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *mcpLogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// mcpStdio starts bin/cellblock-mcp on socket with stdio and connects to it.
// Closing the client (at the end of the test) closes the server's stdin;
// the server must then exit 0.
func mcpStdio(t *testing.T, socket string, opts ...mcpclient.ClientOption) *mcpclient.Client {
	t.Helper()
	return mcpStdioArgs(t, socket, nil, opts...)
}

// mcpStdioArgs is mcpStdio with more arguments for cellblock-mcp.
func mcpStdioArgs(t *testing.T, socket string, args []string, opts ...mcpclient.ClientOption) *mcpclient.Client {
	t.Helper()
	stderr := &mcpLogBuffer{}
	tr := transport.NewStdioWithOptions(bin(t, "cellblock-mcp"), nil, append([]string{"--socket", socket}, args...),
		transport.WithCommandStderrWriter(stderr))
	c := mcpclient.NewClient(tr, opts...)
	// The transport's process lives as long as the context given to Start.
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("start cellblock-mcp: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("cellblock-mcp (stdio) did not exit cleanly when its stdin closed: %v\n%s", err, stderr)
		}
	})
	mcpInitialize(t, c, stderr.String)
	return c
}

var mcpServingURL = regexp.MustCompile(`url=(http://\S+)`)

// mcpHTTP starts bin/cellblock-mcp on socket with --http on a free loopback
// port and a bearer token, and connects to it. The server is stopped with
// SIGTERM at the end of the test and must exit 0.
func mcpHTTP(t *testing.T, socket string, opts ...mcpclient.ClientOption) *mcpclient.Client {
	t.Helper()
	url, token, logs := startMCPHTTP(t, socket)
	// The token on every request, also on the DELETE that ends the
	// connection, which mcp-go's client sends without WithHTTPHeaders'.
	tr, err := transport.NewStreamableHTTP(url, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}),
		transport.WithHTTPBasicClient(&http.Client{Transport: bearerTransport{token: token, rt: http.DefaultTransport}}))
	if err != nil {
		t.Fatal(err)
	}
	c := mcpclient.NewClient(tr, opts...)
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("start client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	mcpInitialize(t, c, logs)
	return c
}

// bearerTransport adds the bearer token to every request.
type bearerTransport struct {
	token string
	rt    http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.rt.RoundTrip(r)
}

// startMCPHTTP starts bin/cellblock-mcp on socket with --http on a free
// loopback port and a fresh bearer token (and extra flags), and returns
// the URL it serves, the token and what it logged. It is stopped with
// SIGTERM at the end of the test and must exit 0.
func startMCPHTTP(t *testing.T, socket string, extra ...string) (url, token string, logs func() string) {
	t.Helper()
	token = fmt.Sprintf("tok-%d-%d", time.Now().UnixNano(), os.Getpid())
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	line, logs := startMCPServing(t, append([]string{"--socket", socket, "--http", "127.0.0.1:0", "--token-file", tokenFile}, extra...)...)
	m := mcpServingURL.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("no URL in %q", line)
	}
	return m[1], token, logs
}

// startMCPServing starts bin/cellblock-mcp with args and waits for its log
// line saying where it serves HTTP; it returns that line and what the
// server logged. It is stopped with SIGTERM at the end of the test and
// must exit 0.
func startMCPServing(t *testing.T, args ...string) (line string, logs func() string) {
	t.Helper()
	cmd := exec.Command(bin(t, "cellblock-mcp"), args...)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start cellblock-mcp: %v", err)
	}
	stderr := &mcpLogBuffer{}
	serving := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			fmt.Fprintln(stderr, sc.Text())
			if strings.Contains(sc.Text(), "serving MCP over streamable HTTP") {
				select {
				case serving <- sc.Text():
				default:
				}
			}
		}
		_, _ = io.Copy(stderr, pipe)
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("cellblock-mcp (http) did not exit cleanly on SIGTERM: %v\n%s", err, stderr)
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("cellblock-mcp (http) did not exit within 30s of SIGTERM\n%s", stderr)
		}
	})
	select {
	case line = <-serving:
	case err := <-done:
		t.Fatalf("cellblock-mcp exited: %v\n%s", err, stderr)
	case <-time.After(30 * time.Second):
		t.Fatalf("cellblock-mcp did not say where it serves\n%s", stderr)
	}
	return line, stderr.String
}

func mcpInitialize(t *testing.T, c *mcpclient.Client, stderr func() string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var req mcp.InitializeRequest
	req.Params.ClientInfo = mcp.Implementation{Name: "cellblock-integration", Version: "1"}
	if _, err := c.Initialize(ctx, req); err != nil {
		t.Fatalf("initialize: %v\n%s", err, stderr())
	}
}

func mcpCall(t *testing.T, ctx context.Context, c *mcpclient.Client, name string, args map[string]any, token any) *mcp.CallToolResult {
	t.Helper()
	var req mcp.CallToolRequest
	req.Params.Name = name
	req.Params.Arguments = args
	if token != nil {
		req.Params.Meta = &mcp.Meta{ProgressToken: token}
	}
	res, err := c.CallTool(ctx, req)
	if err != nil {
		t.Fatalf("%s: protocol error: %v", name, err)
	}
	return res
}

func mcpText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func mcpStructured(t *testing.T, res *mcp.CallToolResult, v any) {
	t.Helper()
	if res.StructuredContent == nil {
		t.Fatalf("no structured content: %s", mcpText(res))
	}
	data, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("structured content %s: %v", data, err)
	}
}

// mcpProgressLog collects progress notifications by token.
type mcpProgressLog struct {
	mu    sync.Mutex
	byTok map[string][]string
	// changed is closed, and replaced, when a notification arrives.
	changed chan struct{}
}

func mcpWatchProgress(c *mcpclient.Client) *mcpProgressLog {
	p := &mcpProgressLog{byTok: map[string][]string{}, changed: make(chan struct{})}
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method != string(mcp.MethodNotificationProgress) {
			return
		}
		tok := fmt.Sprint(n.Params.AdditionalFields["progressToken"])
		msg, _ := n.Params.AdditionalFields["message"].(string)
		p.mu.Lock()
		p.byTok[tok] = append(p.byTok[tok], msg)
		close(p.changed)
		p.changed = make(chan struct{})
		p.mu.Unlock()
	})
	return p
}

func (p *mcpProgressLog) text(tok string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.byTok[tok], "")
}

// await waits until the progress of tok holds substr and returns when it
// saw it; it fails the test after timeout.
func (p *mcpProgressLog) await(t *testing.T, tok, substr string, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.After(timeout)
	for {
		p.mu.Lock()
		changed := p.changed
		p.mu.Unlock()
		if strings.Contains(p.text(tok), substr) {
			return time.Now()
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("no %q in the progress of %s within %v; got %q", substr, tok, timeout, p.text(tok))
		}
	}
}

func TestMCP(t *testing.T) {
	d := daemon(t)
	info, err := d.Client.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range mcpTransports {
		t.Run(tr.name, func(t *testing.T) {
			c := tr.connect(t, d.Socket)
			progress := mcpWatchProgress(c)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()

			t.Run("list tools", func(t *testing.T) {
				res, err := c.ListTools(ctx, mcp.ListToolsRequest{})
				if err != nil {
					t.Fatal(err)
				}
				names := map[string]mcp.Tool{}
				for _, tool := range res.Tools {
					names[tool.Name] = tool
				}
				run, ok := names["run_python"]
				if !ok || len(names) != 4 {
					t.Fatalf("tools = %v", res.Tools)
				}
				for _, n := range []string{"check_environment", "validate_python", "reset_session"} {
					if _, ok := names[n]; !ok {
						t.Errorf("no %s tool", n)
					}
				}
				timeout, _ := run.InputSchema.Properties["timeout_seconds"].(map[string]any)
				if got, want := timeout["maximum"], float64(info.Maxima.TimeoutMs)/1000; got != want {
					t.Errorf("timeout_seconds maximum = %v, want the daemon's %v", got, want)
				}
				for _, p := range info.Pythons {
					if !strings.Contains(run.Description, p.Version) {
						t.Errorf("run_python's description does not name Python %s", p.Version)
					}
				}
				if run.OutputSchema.Type != "object" {
					t.Error("run_python has no output schema")
				}
			})

			t.Run("good code", func(t *testing.T) {
				res := mcpCall(t, ctx, c, "run_python", map[string]any{
					"code": "import sys\nprint(6 * 7)\nprint('to stderr', file=sys.stderr)\n",
				}, nil)
				if res.IsError {
					t.Fatalf("isError: %s", mcpText(res))
				}
				var r api.Result
				mcpStructured(t, res, &r)
				if r.ExitCode != 0 || r.Stdout != "42\n" || r.Stderr != "to stderr\n" || r.Error != nil {
					t.Errorf("result = %+v", r)
				}
				if !strings.Contains(mcpText(res), "42") {
					t.Errorf("text: %s", mcpText(res))
				}
			})

			t.Run("code that raises", func(t *testing.T) {
				res := mcpCall(t, ctx, c, "run_python", map[string]any{
					"code": "def f():\n    raise ValueError('boom')\n\nf()\n",
				}, nil)
				if !res.IsError {
					t.Errorf("isError is false: %s", mcpText(res))
				}
				text := mcpText(res)
				for _, want := range []string{"Traceback (most recent call last)", "ValueError: boom", "uncaught exception"} {
					if !strings.Contains(text, want) {
						t.Errorf("text lacks %q:\n%s", want, text)
					}
				}
				var r api.Result
				mcpStructured(t, res, &r)
				if r.ExitCode != 1 {
					t.Errorf("exit code %d", r.ExitCode)
				}
			})

			t.Run("timeout", func(t *testing.T) {
				start := time.Now()
				res := mcpCall(t, ctx, c, "run_python", map[string]any{"code": "while True:\n    pass\n", "timeout_seconds": 1}, nil)
				if !res.IsError {
					t.Errorf("isError is false: %s", mcpText(res))
				}
				var r api.Result
				mcpStructured(t, res, &r)
				if !r.TimedOut {
					t.Errorf("timed_out is false: %+v", r)
				}
				if !strings.Contains(mcpText(res), "timeout") {
					t.Errorf("text: %s", mcpText(res))
				}
				if el := time.Since(start); el > 30*time.Second {
					t.Errorf("a 1 s timeout took %v", el)
				}
			})

			t.Run("8 calls at once", func(t *testing.T) {
				var wg sync.WaitGroup
				errs := make(chan error, 8)
				for i := range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						var req mcp.CallToolRequest
						req.Params.Name = "run_python"
						req.Params.Arguments = map[string]any{"code": fmt.Sprintf("import time\ntime.sleep(0.5)\nprint('call', %d)\n", i)}
						res, err := c.CallTool(ctx, req)
						if err != nil {
							errs <- fmt.Errorf("call %d: %v", i, err)
							return
						}
						var r api.Result
						data, _ := json.Marshal(res.StructuredContent)
						_ = json.Unmarshal(data, &r)
						if res.IsError || r.Stdout != fmt.Sprintf("call %d\n", i) {
							errs <- fmt.Errorf("call %d got isError %v, stdout %q: %s", i, res.IsError, r.Stdout, mcpText(res))
						}
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Error(err)
				}
			})

			t.Run("output while it runs", func(t *testing.T) {
				tok := "progress-" + tr.name
				type answer struct {
					at  time.Time
					res *mcp.CallToolResult
					err error
				}
				answers := make(chan answer, 1)
				go func() {
					var req mcp.CallToolRequest
					req.Params.Name = "run_python"
					req.Params.Arguments = map[string]any{"code": "import time\nprint('first', flush=True)\ntime.sleep(2)\nprint('second')\n"}
					req.Params.Meta = &mcp.Meta{ProgressToken: tok}
					res, err := c.CallTool(ctx, req)
					answers <- answer{time.Now(), res, err}
				}()
				firstAt := progress.await(t, tok, "first", 60*time.Second)
				a := <-answers
				if a.err != nil || a.res.IsError {
					t.Fatalf("call: %v %s", a.err, mcpText(a.res))
				}
				if firstAt.IsZero() || !firstAt.Before(a.at) {
					t.Errorf("the first line arrived at %v, the result at %v: not while the run went on", firstAt, a.at)
				}
			})

			t.Run("validate_python", func(t *testing.T) {
				res := mcpCall(t, ctx, c, "validate_python", map[string]any{
					"code": "# /// script\n# dependencies = [\"rich\"]\n# ///\nimport os\nos.system('exit 3')\n",
				}, nil)
				var v struct {
					Valid  bool `json:"valid"`
					Syntax struct {
						Checked bool `json:"checked"`
						OK      bool `json:"ok"`
						Error   *struct {
							Line int `json:"line"`
						} `json:"error"`
					} `json:"syntax"`
					Metadata struct {
						Dependencies []string `json:"dependencies"`
					} `json:"metadata"`
				}
				mcpStructured(t, res, &v)
				if res.IsError || !v.Valid || !v.Syntax.Checked || len(v.Metadata.Dependencies) != 1 {
					t.Errorf("valid code: isError %v, %+v: %s", res.IsError, v, mcpText(res))
				}
				res = mcpCall(t, ctx, c, "validate_python", map[string]any{"code": "x = 1\ndef f(:\n    pass\n"}, nil)
				v.Syntax.Error = nil
				mcpStructured(t, res, &v)
				if res.IsError || v.Valid || !v.Syntax.Checked || v.Syntax.OK || v.Syntax.Error == nil || v.Syntax.Error.Line != 2 {
					t.Errorf("invalid code: isError %v, %+v: %s", res.IsError, v, mcpText(res))
				}
			})

			t.Run("check_environment", func(t *testing.T) {
				res := mcpCall(t, ctx, c, "check_environment", nil, nil)
				if res.IsError {
					t.Fatalf("isError: %s", mcpText(res))
				}
				var got api.Info
				mcpStructured(t, res, &got)
				if got.Version != info.Version || len(got.Pythons) != len(info.Pythons) || got.Maxima != info.Maxima {
					t.Errorf("info = %+v, want %+v", got, info)
				}
			})
		})
	}
}

// TestMCPCancel cancels a call and checks that the daemon kills its run.
// It uses a daemon of its own, so that the running count is only its own.
func TestMCPCancel(t *testing.T) {
	d := startDaemon(t)
	for _, tr := range mcpTransports {
		t.Run(tr.name, func(t *testing.T) {
			c := tr.connect(t, d.Socket)
			progress := mcpWatchProgress(c)
			tok := "cancel-" + tr.name

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errc := make(chan error, 1)
			go func() {
				var req mcp.CallToolRequest
				req.Params.Name = "run_python"
				req.Params.Arguments = map[string]any{"code": "import time\nprint('started', flush=True)\ntime.sleep(300)\n", "timeout_seconds": 290}
				req.Params.Meta = &mcp.Meta{ProgressToken: tok}
				_, err := c.CallTool(ctx, req)
				errc <- err
			}()
			progress.await(t, tok, "started", 60*time.Second)
			if n := mcpRunning(t, d); n != 1 {
				t.Fatalf("%d runs going on, want 1", n)
			}
			cancel()
			select {
			case err := <-errc:
				if err == nil {
					t.Error("the cancelled call returned no error")
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the cancelled call did not return")
			}
			mcpWaitUntil(t, "the daemon to end the run", 30*time.Second, func() bool { return mcpRunning(t, d) == 0 })

			// The connection is still good.
			res := mcpCall(t, context.Background(), c, "run_python", map[string]any{"code": "print('after')"}, nil)
			if res.IsError || !strings.Contains(mcpText(res), "after") {
				t.Errorf("call after cancel: %s", mcpText(res))
			}
		})
	}
}

// TestMCPNoDaemon starts cellblock-mcp on a socket nobody serves: it must
// start anyway, list its tools and say plainly that the daemon is missing.
func TestMCPNoDaemon(t *testing.T) {
	requireRoot(t)
	socket := filepath.Join(t.TempDir(), "nobody.sock")
	for _, tr := range mcpTransports {
		t.Run(tr.name, func(t *testing.T) {
			c := tr.connect(t, socket)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			tools, err := c.ListTools(ctx, mcp.ListToolsRequest{})
			if err != nil || len(tools.Tools) != 4 {
				t.Fatalf("list tools: %v %v", tools, err)
			}
			res := mcpCall(t, ctx, c, "run_python", map[string]any{"code": "print(1)"}, nil)
			if !res.IsError {
				t.Error("isError is false")
			}
			text := mcpText(res)
			for _, want := range []string{"not reachable", socket, "does not exist", "Is cellblockd running?"} {
				if !strings.Contains(text, want) {
					t.Errorf("text lacks %q:\n%s", want, text)
				}
			}
			res = mcpCall(t, ctx, c, "check_environment", nil, nil)
			if !res.IsError || !strings.Contains(mcpText(res), "not reachable") {
				t.Errorf("check_environment: isError %v: %s", res.IsError, mcpText(res))
			}
		})
	}
	if _, err := os.Stat(socket); err == nil {
		t.Error("cellblock-mcp created the daemon's socket")
	}
}

func mcpRunning(t *testing.T, d *Daemon) int {
	t.Helper()
	info, err := d.Client.Info(context.Background())
	if err != nil {
		t.Fatalf("info: %v", err)
	}
	return info.Running
}

// mcpWaitUntil polls cond until it holds, failing the test after timeout;
// for conditions that offer no event, such as the daemon's load.
func mcpWaitUntil(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// run_python's sessions against the real daemon: state persists across
// calls with one name, reset_session starts afresh, and two connections
// using the same name get sessions of their own.
func TestMCPSessions(t *testing.T) {
	d := daemon(t)
	for _, tr := range mcpTransports {
		t.Run(tr.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			c := tr.connect(t, d.Socket)
			if tr.name == "http" {
				// The stateless protocol has no connection to keep a
				// session private to: refused, with the way out.
				res := mcpCall(t, ctx, c, "run_python", map[string]any{"code": "1", "session": "work"}, nil)
				if !res.IsError || !strings.Contains(mcpText(res), "without \"session\"") {
					t.Errorf("a named session over stateless HTTP: %s", mcpText(res))
				}
				return
			}
			call := func(c *mcpclient.Client, code string) api.Result {
				t.Helper()
				res := mcpCall(t, ctx, c, "run_python", map[string]any{"code": code, "session": "work"}, nil)
				var r api.Result
				mcpStructured(t, res, &r)
				return r
			}
			call(c, "import json\ndata = json.loads('[1, 2, 3]')")
			r := call(c, "sum(data) + 36")
			if r.Value == nil || r.Value.Repr != "42" || r.Session == nil || r.Session.ExecutionCount != 2 || r.Session.State != api.SessionAlive {
				t.Fatalf("the second call did not see the first's state: value %+v session %+v stderr %q", r.Value, r.Session, r.Stderr)
			}
			other := tr.connect(t, d.Socket)
			if o := call(other, "'data' in globals()"); o.Value == nil || o.Value.Repr != "False" || o.Session.ID == r.Session.ID {
				t.Errorf("another connection's session of the same name saw this one's: %+v %+v", o.Value, o.Session)
			}
			res := mcpCall(t, ctx, c, "reset_session", map[string]any{"session": "work"}, nil)
			if res.IsError {
				t.Fatalf("reset_session: %s", mcpText(res))
			}
			if _, err := d.Client.Session(ctx, r.Session.ID); errorType(err) != api.ErrSessionNotFound {
				t.Errorf("the daemon still has the reset session: %v", err)
			}
			fresh := call(c, "'data' in globals()")
			if fresh.Value == nil || fresh.Value.Repr != "False" || fresh.Session.ExecutionCount != 1 {
				t.Errorf("after reset_session: %+v %+v", fresh.Value, fresh.Session)
			}
			// The connection's end ends its sessions.
			c.Close()
			if !waitFor(30*time.Second, func() bool {
				_, err := d.Client.Session(ctx, fresh.Session.ID)
				return errorType(err) == api.ErrSessionNotFound
			}) {
				t.Errorf("session %s outlived its MCP connection", fresh.Session.ID)
			}
		})
	}
}

// TestMCPCell drives run_python against the real daemon for what a cell
// gives besides output: inputs bound as globals, the last expression's
// value, an exception as data, and an HTML display item sent as an
// embedded text/html resource.
func TestMCPCell(t *testing.T) {
	d := daemon(t)
	for _, tr := range mcpTransports {
		t.Run(tr.name, func(t *testing.T) {
			c := tr.connect(t, d.Socket)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()

			const html = "<table><tr><td>5</td><td>a</td></tr></table>"
			res := mcpCall(t, ctx, c, "run_python", map[string]any{
				"code": `
import cellblock
class Table:
    def _repr_html_(self):
        return "<table><tr><td>%d</td><td>%s</td></tr></table>" % (n, names[0])
    def __repr__(self):
        return "<Table of %d>" % n
cellblock.display(Table())
print("rows", len(names))
{"n": n, "names": names, "sum": n + 37}
`,
				"inputs": map[string]any{"n": 5, "names": []string{"a", "b"}},
			}, nil)
			text := mcpText(res)
			if res.IsError {
				t.Fatalf("isError: %s", text)
			}
			var r api.Result
			mcpStructured(t, res, &r)
			if r.ExitCode != 0 || r.Stdout != "rows 2\n" || r.Value == nil || r.Value.Type != "dict" {
				t.Fatalf("result = %+v", r)
			}
			var value any
			if err := json.Unmarshal(r.Value.JSON, &value); err != nil || fmt.Sprint(value) != "map[n:5 names:[a b] sum:42]" {
				t.Errorf("value.json = %s (%v)", r.Value.JSON, err)
			}
			if !strings.Contains(text, "--- value of the last expression (dict) ---\n{'n': 5, 'names': ['a', 'b'], 'sum': 42}") {
				t.Errorf("the text lacks the value:\n%s", text)
			}
			if len(r.Display) != 1 || dataText(r.Display[0], "text/html") != html || dataText(r.Display[0], "text/plain") != "<Table of 5>" {
				t.Fatalf("structured display = %+v", r.Display)
			}
			var resources []mcp.TextResourceContents
			for _, ct := range res.Content {
				if er, ok := ct.(mcp.EmbeddedResource); ok {
					if tc, ok := er.Resource.(mcp.TextResourceContents); ok {
						resources = append(resources, tc)
					} else {
						t.Errorf("an embedded resource that is not text: %+v", er.Resource)
					}
				}
			}
			wantURI := "cellblock://runs/" + r.RunID + "/display/0.html"
			if len(resources) != 1 || resources[0].MIMEType != "text/html" || resources[0].Text != html || resources[0].URI != wantURI {
				t.Errorf("embedded resources = %+v, want the table as text/html at %s", resources, wantURI)
			}
			if !strings.Contains(text, "[0] text/html, ") || !strings.Contains(text, wantURI) || !strings.Contains(text, "text/plain: <Table of 5>") {
				t.Errorf("the text does not describe the display item:\n%s", text)
			}

			res = mcpCall(t, ctx, c, "run_python", map[string]any{"code": "d = {}\nx = 1\nd['missing']\n"}, nil)
			text = mcpText(res)
			if !res.IsError {
				t.Errorf("isError is false for a cell that raised: %s", text)
			}
			r = api.Result{}
			mcpStructured(t, res, &r)
			if x := r.Exception; r.ExitCode != 1 || x == nil || x.Type != "KeyError" || x.Message != "'missing'" || x.Line == nil || *x.Line != 3 ||
				!strings.Contains(x.Traceback, "KeyError: 'missing'") {
				t.Errorf("exit %d exception %+v", r.ExitCode, r.Exception)
			}
			if !strings.Contains(text, "exited with status 1: KeyError: 'missing' (line 3") {
				t.Errorf("the text does not name the exception:\n%s", text)
			}
		})
	}
}
