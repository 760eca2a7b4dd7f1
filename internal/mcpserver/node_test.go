package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/cellblock/cellblock/internal/client"
)

// servedNode is one ServeHTTP with a status listener, as cellblock-mcp
// runs on a node of many.
type servedNode struct {
	mcpURL, statusURL string
	stop              context.CancelFunc
	done              chan error
}

// serveNode serves srv with opts (Security and Status filled in) until the
// test ends or stop is called.
func serveNode(t *testing.T, srv *server.MCPServer, opts HTTPOptions) *servedNode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	status, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts.Security = HTTPSecurity{Token: testToken}
	opts.Status = status
	ctx, cancel := context.WithCancel(context.Background())
	n := &servedNode{
		mcpURL:    "http://" + ln.Addr().String() + HTTPPath,
		statusURL: "http://" + status.Addr().String(),
		stop:      cancel,
		done:      make(chan error, 1),
	}
	go func() { n.done <- ServeHTTP(ctx, srv, ln, opts) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-n.done:
			if err != nil {
				t.Errorf("ServeHTTP: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("ServeHTTP did not return")
		}
	})
	return n
}

// rawMCPBody sends one request to an MCP endpoint with the token and, when not
// empty, a session id; it returns the status and the body.
func rawMCPBody(t *testing.T, method, url, session, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set(server.HeaderKeySessionID, session)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// A GET stream that was opened does not end: read what has come.
	b := make([]byte, 4096)
	n, _ := io.ReadAtLeast(resp.Body, b, 1)
	return resp.StatusCode, string(b[:n])
}

const toolsListBody = `{"jsonrpc":"2.0","id":7,"method":"tools/list"}`

// checkLost fails unless status and body are the lost-session answer.
func checkLost(t *testing.T, what string, status int, body string) {
	t.Helper()
	if len(body) > 300 {
		body = body[:300] + "..."
	}
	if status != http.StatusNotFound {
		t.Errorf("%s: status %d, want 404 (session lost); body %q", what, status, body)
		return
	}
	var msg struct {
		JSONRPC string `json:"jsonrpc"`
		Error   struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &msg); err != nil {
		t.Errorf("%s: the 404's body is not a JSON-RPC error: %v: %q", what, err, body)
		return
	}
	if msg.JSONRPC != "2.0" || msg.Error.Code != lostSessionCode || !strings.HasPrefix(msg.Error.Message, "session lost: ") {
		t.Errorf("%s: body %q, want the lost-session error", what, body)
	}
}

// An MCP session is its node's: another node, or the same one after the
// session ended, answers its id with the lost-session error, and the
// session goes on where it lives.
func TestSessionOfAnotherNodeIsLost(t *testing.T) {
	fd := startFakeDaemon(t)
	a := serveNode(t, newServer(t, fd), HTTPOptions{})
	b := serveNode(t, newServer(t, fd), HTTPOptions{})

	c := dialHTTP(t, a.mcpURL, legacy...)
	id := c.GetSessionId()
	if !strings.HasPrefix(id, "mcp-session-") {
		t.Fatalf("session id %q", id)
	}
	mustRunIn(t, c, "x", "v = 1", nil)

	st, body := rawMCPBody(t, "POST", b.mcpURL, id, toolsListBody)
	checkLost(t, "a tools/list on the other node", st, body)
	st, body = rawMCPBody(t, "GET", b.mcpURL, id, "")
	checkLost(t, "a GET stream on the other node", st, body)
	st, body = rawMCPBody(t, "POST", a.mcpURL, "mcp-session-made-up", toolsListBody)
	checkLost(t, "a made-up id", st, body)

	// mcp-go's client hears the 404 as the end of its session.
	tr, err := transport.NewStreamableHTTP(b.mcpURL, transport.WithHTTPBasicClient(&http.Client{Transport: bearer{testToken}}),
		transport.WithSession(id))
	if err != nil {
		t.Fatal(err)
	}
	_, err = tr.SendRequest(context.Background(), transport.JSONRPCRequest{JSONRPC: "2.0", ID: mcp.NewRequestId(1), Method: "tools/list"})
	if !errors.Is(err, transport.ErrSessionTerminated) {
		t.Errorf("mcp-go's client on the other node: %v, want ErrSessionTerminated", err)
	}

	// Still alive where it was made.
	if st := mustRunIn(t, c, "x", "v", nil); st.ExecutionCount != 2 {
		t.Errorf("execution count %d after the foreign calls, want 2", st.ExecutionCount)
	}
	// An initialize carrying a stale id gets a new session.
	st, _ = rawMCPBody(t, "POST", b.mcpURL, id, initializeBody)
	if st != http.StatusOK {
		t.Errorf("initialize with another node's id: status %d, want 200", st)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	st, body = rawMCPBody(t, "POST", a.mcpURL, id, toolsListBody)
	checkLost(t, "a closed session", st, body)
}

// fakeHealth is a stand-in for the daemon's socket that answers only
// /v1/health, with status, and /metrics.
func fakeHealth(t *testing.T, status *atomic.Value) *client.Client {
	t.Helper()
	dir, err := os.MkdirTemp("", "cbnode")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "d.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"`+status.Load().(string)+`"}`)
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = io.WriteString(w, "cellblock_build_info{version=\"test\"} 1\n")
	})
	hs := &http.Server{Handler: mux}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { hs.Close() })
	return client.New(sock)
}

func getStatus(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// /readyz is 200 only while the daemon is healthy; 404 (take no new
// sessions) otherwise. /metrics relays the daemon's.
func TestReadyAndMetrics(t *testing.T) {
	var status atomic.Value
	status.Store("ok")
	fd := startFakeDaemon(t)
	n := serveNode(t, newServer(t, fd), HTTPOptions{Daemon: fakeHealth(t, &status)})

	if st, body := getStatus(t, n.statusURL+ReadyPath); st != 200 || !strings.HasPrefix(body, "ok") {
		t.Errorf("healthy daemon: readyz %d %q, want 200 ok", st, body)
	}
	status.Store("draining")
	if st, body := getStatus(t, n.statusURL+ReadyPath); st != 404 || !strings.Contains(body, "draining") {
		t.Errorf("draining daemon: readyz %d %q, want 404 naming it", st, body)
	}
	st, body := getStatus(t, n.statusURL+MetricsPath)
	if st != 200 || !strings.Contains(body, "cellblock_build_info") {
		t.Errorf("metrics: %d %q", st, body)
	}
	// No token needed there, and nothing of MCP.
	if st, _ := getStatus(t, n.statusURL+HTTPPath); st != 404 {
		t.Errorf("MCP on the status listener: %d, want 404", st)
	}

	gone := serveNode(t, newServer(t, fd), HTTPOptions{Daemon: client.New(filepath.Join(t.TempDir(), "none.sock"))})
	if st, body := getStatus(t, gone.statusURL+ReadyPath); st != 404 || !strings.Contains(body, "not reachable") {
		t.Errorf("unreachable daemon: readyz %d %q, want 404 saying so", st, body)
	}
	if st, _ := getStatus(t, gone.statusURL+MetricsPath); st != http.StatusBadGateway {
		t.Errorf("unreachable daemon: metrics %d, want 502", st)
	}
}

// Draining: after the signal the node says it is not ready, refuses new
// sessions with 503, serves the open one until its client closes it, and
// then stops without waiting for the drain time.
func TestDrain(t *testing.T) {
	var status atomic.Value
	status.Store("ok")
	fd := startFakeDaemon(t)
	n := serveNode(t, newServer(t, fd), HTTPOptions{Daemon: fakeHealth(t, &status), Drain: time.Hour})
	c := dialHTTP(t, n.mcpURL, legacy...)
	mustRunIn(t, c, "x", "v = 1", nil)

	n.stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, _ := getStatus(t, n.statusURL+ReadyPath)
		if st == 404 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("readyz still %d after the signal", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st, body := rawMCPBody(t, "POST", n.mcpURL, "", initializeBody); st != http.StatusServiceUnavailable {
		t.Errorf("initialize while draining: %d %q, want 503", st, body)
	}
	if st := mustRunIn(t, c, "x", "v", nil); st.ExecutionCount != 2 {
		t.Errorf("the open session while draining: execution count %d, want 2", st.ExecutionCount)
	}
	select {
	case err := <-n.done:
		t.Fatalf("ServeHTTP returned with a session open: %v", err)
	default:
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-n.done:
		if err != nil {
			t.Errorf("ServeHTTP: %v", err)
		}
		n.done <- nil // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("ServeHTTP still draining after the last session closed")
	}
	if got := daemonSessions(t, fd); len(got) != 0 {
		t.Errorf("after the drain: daemon sessions %v", got)
	}
}
