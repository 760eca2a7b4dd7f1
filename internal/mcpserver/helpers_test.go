package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/client"
)

// protocols are the two eras of MCP that mcp-go speaks: the initialize
// handshake (what most clients use today) and the stateless 2026-07-28
// protocol (mcp-go's default).
var protocols = []struct {
	name string
	opts []mcpclient.ClientOption
}{
	{"legacy", []mcpclient.ClientOption{mcpclient.WithProtocolVersion(mcp.LATEST_LEGACY_PROTOCOL_VERSION)}},
	{"modern", nil},
}

// newServer returns an MCP server backed by fd, built as cellblock-mcp
// builds it when the daemon answered at start-up.
func newServer(t *testing.T, fd *fakeDaemon) *server.MCPServer {
	t.Helper()
	c := client.New(fd.socket)
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatalf("info from the fake daemon: %v", err)
	}
	return New(Config{Client: c, Info: info, Version: "test"})
}

// connect returns an initialised in-process client of srv.
func connect(t *testing.T, srv *server.MCPServer, opts ...mcpclient.ClientOption) *mcpclient.Client {
	t.Helper()
	c, err := mcpclient.NewInProcessClientWithOptions(srv, opts...)
	if err != nil {
		t.Fatal(err)
	}
	initialize(t, c)
	return c
}

// initialize starts and initialises c and closes it when the test ends.
func initialize(t *testing.T, c *mcpclient.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatalf("start client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	var req mcp.InitializeRequest
	req.Params.ClientInfo = mcp.Implementation{Name: "cellblock-test", Version: "1"}
	if _, err := c.Initialize(ctx, req); err != nil {
		t.Fatalf("initialize: %v", err)
	}
}

// callTool calls a tool and fails the test on a protocol error.
func callTool(t *testing.T, ctx context.Context, c *mcpclient.Client, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res, err := c.CallTool(ctx, toolRequest(name, args, nil))
	if err != nil {
		t.Fatalf("%s: protocol error: %v", name, err)
	}
	return res
}

func toolRequest(name string, args map[string]any, progressToken mcp.ProgressToken) mcp.CallToolRequest {
	var req mcp.CallToolRequest
	req.Params.Name = name
	req.Params.Arguments = args
	if progressToken != nil {
		req.Params.Meta = &mcp.Meta{ProgressToken: progressToken}
	}
	return req
}

// structured decodes a result's structured content into v.
func structured(t *testing.T, res *mcp.CallToolResult, v any) {
	t.Helper()
	if res.StructuredContent == nil {
		t.Fatalf("no structured content in %q", resultText(res))
	}
	data, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("structured content %s: %v", data, err)
	}
}

func resultOf(t *testing.T, res *mcp.CallToolResult) api.Result {
	t.Helper()
	var r api.Result
	structured(t, res, &r)
	return r
}

func mustContain(t *testing.T, text string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(text, w) {
			t.Errorf("text does not contain %q:\n%s", w, text)
		}
	}
}

// notes collects the notifications a client receives.
type notes struct {
	mu   sync.Mutex
	list []mcp.JSONRPCNotification
	// changed is closed, and replaced, when a notification arrives.
	changed chan struct{}
}

func collect(c *mcpclient.Client) *notes {
	n := &notes{changed: make(chan struct{})}
	c.OnNotification(func(nt mcp.JSONRPCNotification) {
		n.mu.Lock()
		n.list = append(n.list, nt)
		close(n.changed)
		n.changed = make(chan struct{})
		n.mu.Unlock()
	})
	return n
}

// wait reports whether cond holds, checking it again on every
// notification that arrives until timeout.
func (n *notes) wait(timeout time.Duration, cond func() bool) bool {
	deadline := time.After(timeout)
	for {
		n.mu.Lock()
		changed := n.changed
		n.mu.Unlock()
		if cond() {
			return true
		}
		select {
		case <-changed:
		case <-deadline:
			return cond()
		}
	}
}

// await is wait that fails the test when cond does not come to hold.
func (n *notes) await(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	if !n.wait(timeout, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// progress returns the progress notifications for token: their messages
// and progress values, in order.
func (n *notes) progress(token any) (messages []string, values []float64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, nt := range n.list {
		if nt.Method != string(mcp.MethodNotificationProgress) {
			continue
		}
		f := nt.Params.AdditionalFields
		if tokenString(f["progressToken"]) != tokenString(token) {
			continue
		}
		msg, _ := f["message"].(string)
		messages = append(messages, msg)
		v, _ := f["progress"].(float64)
		values = append(values, v)
	}
	return messages, values
}

// logs returns the data of the logging notifications from logger.
func (n *notes) logs(logger string) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, nt := range n.list {
		if nt.Method != string(mcp.MethodNotificationMessage) {
			continue
		}
		f := nt.Params.AdditionalFields
		if f["logger"] == logger {
			s, _ := f["data"].(string)
			out = append(out, s)
		}
	}
	return out
}

func (n *notes) count(method string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := 0
	for _, nt := range n.list {
		if nt.Method == method {
			c++
		}
	}
	return c
}

func tokenString(v any) string {
	data, _ := json.Marshal(v)
	return string(data)
}

// blockUntilCanceled is a run that writes a line and then runs until its
// request is cancelled; started gets the run's code once it is going.
func blockUntilCanceled(started chan<- string) func(context.Context, *api.RunRequest, func(string, string)) *api.Result {
	return func(ctx context.Context, req *api.RunRequest, emit func(string, string)) *api.Result {
		emit("stdout", "working\n")
		started <- req.Code
		select {
		case <-ctx.Done():
			return &api.Result{Error: &api.Error{Type: api.ErrCanceled, Message: "caller went away"}}
		case <-time.After(30 * time.Second):
			return &api.Result{Stdout: "not cancelled"}
		}
	}
}

// expectCanceled waits for the fake daemon to see the run of code
// cancelled.
func expectCanceled(t *testing.T, fd *fakeDaemon, code string) {
	t.Helper()
	select {
	case got := <-fd.Canceled():
		if got != code {
			t.Fatalf("the daemon saw %q cancelled, want %q", got, code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the daemon never saw the run's request cancelled")
	}
}

func errPermission() error { return syscall.EACCES }

func utf8Valid(s string) bool { return utf8.ValidString(s) }

func isCanceled(err error) bool {
	return err != nil && (errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "context canceled"))
}
