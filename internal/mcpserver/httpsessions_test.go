package mcpserver

import (
	"context"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/cellblock/cellblock/internal/api"
)

// rawMCP sends one request to url as a client without an MCP library
// would, with the bearer token and, unless empty, a session id; it
// returns the status (0 when hc gave up) and the session id the answer
// carries.
func rawMCP(t *testing.T, hc *http.Client, method, url, session, body string) (int, string) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	resp, err := hc.Do(req)
	if err != nil {
		// A stream the server keeps open past the client's timeout.
		t.Logf("%s with session %q: %v", method, session, err)
		return 0, ""
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Mcp-Session-Id")
}

const floodInitialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + mcp.LATEST_LEGACY_PROTOCOL_VERSION + `","capabilities":{},"clientInfo":{"name":"flood","version":"1"}}}`

// heapInUse is the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// Thousands of initialize without DELETE, and requests with session ids
// the server never issued, hold no more than the cap of sessions; the
// abandoned ones end after the idle timeout with their named sessions;
// a live session (a call in progress) is untouched throughout.
func TestHTTPSessionsAreBoundedAndForgotten(t *testing.T) {
	fd := startFakeDaemon(t)
	release := make(chan struct{})
	fd.run = func(ctx context.Context, req *api.RunRequest, emit func(string, string)) *api.Result {
		if req.Code == "block" {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return &api.Result{Stdout: "ran\n", Python: "3.12.7"}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const max = 64
	limits := HTTPSessionLimits{Idle: 2 * time.Second, Max: max}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- ServeHTTP(ctx, newServer(t, fd), ln, HTTPOptions{Security: HTTPSecurity{Token: testToken, Sessions: limits}})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeHTTP: %v", err)
		}
	})
	url := "http://" + ln.Addr().String() + HTTPPath

	// The live session: a named session, and a call in it in progress.
	live := dialHTTP(t, url, legacy...)
	kept := mustRunIn(t, live, "kept", "v = 1", nil)
	blocked := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := live.CallTool(context.Background(), toolRequest(ToolRunPython, map[string]any{"code": "block", "session": "kept"}, nil))
		if err != nil {
			t.Errorf("the live call: %v", err)
		}
		blocked <- res
	}()
	// An abandoned one with a named session.
	gone := dialHTTP(t, url, legacy...)
	goneSession := mustRunIn(t, gone, "data", "v = 2", nil)

	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}, Timeout: 10 * time.Second}
	before := heapInUse()
	issued := 0
	for range 4000 {
		code, id := rawMCP(t, hc, "POST", url, "", floodInitialize)
		switch {
		case code == http.StatusOK && id != "":
			issued++
		case code == http.StatusServiceUnavailable:
		default:
			t.Fatalf("initialize: %d %q", code, id)
		}
	}
	grown := int64(heapInUse()) - int64(before)
	if issued > max-2 {
		t.Errorf("%d of 4000 initializes got a session, past the cap of %d with 2 live", issued, max)
	}
	// Without the cap, 4000 sessions kept some 47 MiB.
	if grown > 8<<20 {
		t.Errorf("4000 initializes without DELETE kept %d MiB", grown>>20)
	}

	// Ids the server never issued: refused, and nothing made for them.
	madeUp := "mcp-session-" + strings.Repeat("ab", 16)
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_python","arguments":{"code":"print(1)"}}}`
	if code, _ := rawMCP(t, hc, "POST", url, madeUp, call); code != http.StatusNotFound {
		t.Errorf("a call with a made-up session id: %d, want 404", code)
	}
	if code, _ := rawMCP(t, hc, "GET", url, madeUp, ""); code != http.StatusNotFound {
		t.Errorf("a GET stream with a made-up session id: %d, want 404", code)
	}
	if code, _ := rawMCP(t, hc, "GET", url, "", ""); code != http.StatusBadRequest {
		t.Errorf("a GET stream without a session id: %d, want 400", code)
	}

	// The idle ones end: new clients get in again, the abandoned one's
	// named session is deleted; the live one keeps its call and session.
	deadline := time.Now().Add(60 * time.Second)
	for {
		if code, _ := rawMCP(t, hc, "POST", url, "", floodInitialize); code == http.StatusOK {
			if !slices.Contains(daemonSessions(t, fd), goneSession.ID) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the idle MCP sessions did not end: daemon sessions %v", daemonSessions(t, fd))
		}
		time.Sleep(200 * time.Millisecond)
	}
	close(release)
	if res := <-blocked; res == nil || res.IsError {
		t.Fatalf("the live call: %+v", res)
	}
	if again := mustRunIn(t, live, "kept", "v", nil); again.ID != kept.ID {
		t.Errorf("the live session's named session is now %q, was %q", again.ID, kept.ID)
	}
	if _, err := gone.CallTool(context.Background(), toolRequest(ToolRunPython, map[string]any{"code": "v", "session": "data"}, nil)); err == nil {
		t.Error("the abandoned MCP session still answers")
	}
}

// A connection the MCP server never registered records no artifacts.
func TestArtifactsOnlyForRegisteredConnections(t *testing.T) {
	var tab artifactTable
	sum := strings.Repeat("a", 64)
	tab.add("mcp-session-made-up", []api.File{{Path: "x", SHA256: sum, Size: 1}})
	if _, ok := tab.lookup("mcp-session-made-up", sum); ok || len(tab.conns) != 0 {
		t.Errorf("an unregistered connection got a table: %v", tab.conns)
	}
	tab.connected(context.Background(), fakeClientSession("mcp-session-issued"))
	tab.add("mcp-session-issued", []api.File{{Path: "x", SHA256: sum, Size: 1}})
	if _, ok := tab.lookup("mcp-session-issued", sum); !ok {
		t.Error("a registered connection's artifact is not there")
	}
}

// fakeClientSession is an mcp-go ClientSession with an id and nothing
// else.
type fakeClientSession string

func (f fakeClientSession) SessionID() string { return string(f) }
func (f fakeClientSession) NotificationChannel() chan<- mcp.JSONRPCNotification {
	return nil
}
func (f fakeClientSession) Initialize()       {}
func (f fakeClientSession) Initialized() bool { return true }

// The session table on a clock of the test's: a session is idle only
// without a request in progress, counted from its last request's end; an
// idle one ends once, and its id is refused from then on.
func TestHTTPSessionsIdle(t *testing.T) {
	now := time.Unix(1000, 0)
	h := newHTTPSessions(HTTPSessionLimits{Idle: time.Minute, Max: 2})
	h.now = func() time.Time { return now }
	a, b := h.Generate(), h.Generate()
	if !h.full() || a == b || !strings.HasPrefix(a, sessionIDPrefix) {
		t.Fatalf("two sessions: %q %q, full %v", a, b, h.full())
	}
	if _, err := h.Validate("mcp-session-never"); err == nil {
		t.Error("an id never issued is valid")
	}
	if !h.begin(a) {
		t.Fatal("begin of a live session")
	}
	now = now.Add(2 * time.Minute)
	if got := h.idle(); !slices.Equal(got, []string{b}) {
		t.Errorf("idle with a's request in progress: %v, want only b", got)
	}
	h.end(a)
	if got := h.idle(); !slices.Equal(got, []string{b}) {
		t.Errorf("idle right after a's request ended: %v, want only b", got)
	}
	now = now.Add(time.Minute + time.Second)
	if !h.endIfIdle(a) || h.endIfIdle(a) {
		t.Error("a idle past the limit ends, once")
	}
	if _, err := h.Validate(a); err == nil || h.full() {
		t.Errorf("an ended session: valid %v, full %v", err == nil, h.full())
	}
}
