package mcpserver

import (
	"context"
	"fmt"
	"io"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/client"
)

// legacy is the protocol era in which streamable HTTP has MCP sessions.
var legacy = protocols[0].opts

// countingRuns makes fd's runs report how many runs each session has had,
// as a stand-in for state kept between them.
func countingRuns(fd *fakeDaemon) {
	var mu sync.Mutex
	seen := map[string]int{}
	fd.run = func(_ context.Context, req *api.RunRequest, _ func(string, string)) *api.Result {
		mu.Lock()
		defer mu.Unlock()
		seen[req.Session]++
		return &api.Result{Stdout: fmt.Sprintf("run %d in %q\n", seen[req.Session], req.Session)}
	}
}

// daemonSessions lists the ids of the fake daemon's sessions.
func daemonSessions(t *testing.T, fd *fakeDaemon) []string {
	t.Helper()
	list, err := client.New(fd.socket).Sessions(context.Background())
	if err != nil {
		t.Fatalf("list sessions: %v", err)
	}
	var ids []string
	for _, s := range list.Sessions {
		ids = append(ids, s.ID)
	}
	return ids
}

// runIn calls run_python with code in session name and returns the result
// and the session it reported.
func runIn(t *testing.T, c *mcpclient.Client, name, code string, extra map[string]any) (*mcp.CallToolResult, *api.SessionState) {
	t.Helper()
	args := map[string]any{"code": code, "session": name}
	for k, v := range extra {
		args[k] = v
	}
	res := callTool(t, context.Background(), c, ToolRunPython, args)
	if res.StructuredContent == nil {
		return res, nil
	}
	return res, resultOf(t, res).Session
}

// mustRunIn is runIn that fails the test unless the run went well.
func mustRunIn(t *testing.T, c *mcpclient.Client, name, code string, extra map[string]any) *api.SessionState {
	t.Helper()
	res, st := runIn(t, c, name, code, extra)
	if res.IsError || st == nil {
		t.Fatalf("run in session %q: isError %v, session %v:\n%s", name, res.IsError, st, resultText(res))
	}
	return st
}

func resetSession(t *testing.T, c *mcpclient.Client, name string) (*mcp.CallToolResult, resetReport) {
	t.Helper()
	res := callTool(t, context.Background(), c, ToolResetSession, map[string]any{"session": name})
	var rep resetReport
	if !res.IsError {
		structured(t, res, &rep)
	}
	return res, rep
}

func TestSessionKeepsState(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			fd := startFakeDaemon(t)
			countingRuns(fd)
			c := connect(t, newServer(t, fd), p.opts...)

			first := mustRunIn(t, c, "analysis", "# /// script\n# dependencies = [\"rich\"]\n# ///\nimport numpy as np\ndata = np.arange(10)", map[string]any{
				"dependencies": []string{"numpy"}, "python": "3.12", "memory_mb": 300,
				"env": map[string]string{"MODE": "x"}, "timeout_seconds": 3,
			})
			res, second := runIn(t, c, "analysis", "data.sum()", map[string]any{"timeout_seconds": 4})
			if res.IsError || second == nil {
				t.Fatalf("second run: %s", resultText(res))
			}
			if first.ID == "" || second.ID != first.ID {
				t.Fatalf("the runs reported sessions %q and %q, want one", first.ID, second.ID)
			}
			if first.ExecutionCount != 1 || second.ExecutionCount != 2 || second.State != api.SessionAlive {
				t.Errorf("sessions reported %+v then %+v", first, second)
			}
			mustContain(t, resultText(res), `run 2 in "`+first.ID+`"`, `--- session "analysis" ---`, "Run 2 in this session",
				"kept for the next call", "expires after 10 minutes without a call")

			// One daemon session, made with the first call's settings.
			sreqs := fd.SessionRequests()
			if len(sreqs) != 1 {
				t.Fatalf("%d session requests, want 1", len(sreqs))
			}
			want := api.SessionRequest{
				Python: "3.12", Dependencies: []string{"rich", "numpy"}, MemoryBytes: 300 << 20,
				Env: map[string]string{"MODE": "x", "PYTHONUNBUFFERED": "1"},
			}
			if !reflect.DeepEqual(sreqs[0], want) {
				t.Errorf("session request %+v, want %+v", sreqs[0], want)
			}

			// Both runs went to it, as cells with their own timeouts and
			// nothing the session fixes.
			reqs := fd.Requests()
			if len(reqs) != 2 {
				t.Fatalf("%d run requests, want 2", len(reqs))
			}
			for i, r := range reqs {
				if r.Session != first.ID || r.Mode != api.ModeCell {
					t.Errorf("run %d: session %q mode %q", i, r.Session, r.Mode)
				}
				if r.Python != "" || len(r.Dependencies) > 0 || len(r.Env) > 0 || r.MemoryBytes != 0 {
					t.Errorf("run %d sets what the session fixes: %+v", i, r.RunRequest)
				}
				if want := int64(3000 + 1000*i); r.TimeoutMs != want {
					t.Errorf("run %d: timeout %d ms, want %d", i, r.TimeoutMs, want)
				}
			}

			// Without a name, a call runs in a fresh jail.
			res = callTool(t, context.Background(), c, ToolRunPython, map[string]any{"code": "1"})
			if res.IsError || resultOf(t, res).Session != nil || fd.lastRequest(t).Session != "" {
				t.Errorf("a call without a session ran in one: %s", resultText(res))
			}
		})
	}
}

func TestSessionsPrivateToConnection(t *testing.T) {
	fd := startFakeDaemon(t)
	countingRuns(fd)
	url := serveHTTPURL(t, newServer(t, fd))
	a := dialHTTP(t, url, legacy...)
	b := dialHTTP(t, url, legacy...)

	sa := mustRunIn(t, a, "x", "v = 1", nil)
	sb := mustRunIn(t, b, "x", "v = 2", nil)
	if sa.ID == sb.ID {
		t.Fatalf("two connections share session %q", sa.ID)
	}
	if again := mustRunIn(t, a, "x", "v", nil); again.ID != sa.ID || again.ExecutionCount != 2 {
		t.Errorf("connection a's second run reported %+v, want session %q run 2", again, sa.ID)
	}
	if got := daemonSessions(t, fd); len(got) != 2 {
		t.Errorf("daemon sessions %v, want 2", got)
	}
}

func TestSessionsEndWithConnection(t *testing.T) {
	t.Run("http", func(t *testing.T) {
		fd := startFakeDaemon(t)
		url := serveHTTPURL(t, newServer(t, fd))
		a := dialHTTP(t, url, legacy...)
		b := dialHTTP(t, url, legacy...)
		mustRunIn(t, a, "one", "1", nil)
		mustRunIn(t, a, "two", "2", nil)
		kept := mustRunIn(t, b, "one", "1", nil)
		if got := daemonSessions(t, fd); len(got) != 3 {
			t.Fatalf("daemon sessions %v, want 3", got)
		}
		// Closing the client ends its MCP session (DELETE), which ends
		// its daemon sessions before it is answered.
		a.Close()
		if got := daemonSessions(t, fd); !slices.Equal(got, []string{kept.ID}) {
			t.Errorf("after a closed: daemon sessions %v, want only %q", got, kept.ID)
		}
	})

	t.Run("http-server-stops", func(t *testing.T) {
		fd := startFakeDaemon(t)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() {
			done <- ServeHTTP(ctx, newServer(t, fd), ln, HTTPOptions{Security: HTTPSecurity{Token: testToken}})
		}()
		c := dialHTTP(t, "http://"+ln.Addr().String()+HTTPPath, legacy...)
		mustRunIn(t, c, "one", "1", nil)
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeHTTP: %v", err)
		}
		if got := daemonSessions(t, fd); len(got) != 0 {
			t.Errorf("after the server stopped: daemon sessions %v", got)
		}
	})

	t.Run("in-process", func(t *testing.T) {
		fd := startFakeDaemon(t)
		c := connect(t, newServer(t, fd))
		mustRunIn(t, c, "one", "1", nil)
		c.Close()
		if got := daemonSessions(t, fd); len(got) != 0 {
			t.Errorf("after the client closed: daemon sessions %v", got)
		}
	})

	// Over stdio the connection is the process: the sessions end when
	// the server stops.
	for _, stop := range []string{"eof", "cancel"} {
		t.Run("stdio-"+stop, func(t *testing.T) {
			fd := startFakeDaemon(t)
			clientIn, serverOut := io.Pipe()
			serverIn, clientOut := io.Pipe()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- ServeStdio(ctx, newServer(t, fd), serverIn, serverOut, nil) }()
			c := mcpclient.NewClient(transport.NewIO(clientIn, clientOut, io.NopCloser(strings.NewReader(""))))
			initialize(t, c)
			mustRunIn(t, c, "one", "1", nil)
			mustRunIn(t, c, "two", "2", nil)
			if got := daemonSessions(t, fd); len(got) != 2 {
				t.Fatalf("daemon sessions %v, want 2", got)
			}
			if stop == "eof" {
				clientOut.Close()
			} else {
				cancel()
			}
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("ServeStdio: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("ServeStdio did not return")
			}
			serverOut.Close()
			clientOut.Close()
			if got := daemonSessions(t, fd); len(got) != 0 {
				t.Errorf("after the server stopped: daemon sessions %v", got)
			}
		})
	}
}

func TestSessionNeedsAStatefulConnection(t *testing.T) {
	fd := startFakeDaemon(t)
	c := serveHTTP(t, newServer(t, fd)) // protocol 2026-07-28: no MCP session
	res, _ := runIn(t, c, "x", "1", nil)
	if !res.IsError {
		t.Fatalf("a named session over a stateless connection ran: %s", resultText(res))
	}
	mustContain(t, resultText(res), "Nothing was run", "2026-07-28", "stdio", mcp.LATEST_LEGACY_PROTOCOL_VERSION, `without "session"`)
	if n := len(fd.SessionRequests()); n != 0 {
		t.Errorf("%d sessions created", n)
	}
	res, _ = resetSession(t, c, "x")
	if !res.IsError {
		t.Errorf("reset_session over a stateless connection: %s", resultText(res))
	}
	// Calls without a session work as ever.
	if res := callTool(t, context.Background(), c, ToolRunPython, map[string]any{"code": "1"}); res.IsError {
		t.Errorf("a call without a session: %s", resultText(res))
	}
}

func TestSessionLostIsNotReplaced(t *testing.T) {
	fd := startFakeDaemon(t)
	c := connect(t, newServer(t, fd))
	lost := mustRunIn(t, c, "a", "x = 1", nil)
	gone := mustRunIn(t, c, "b", "x = 1", nil)

	fd.LoseSession(lost.ID)
	// Expiry, or a daemon restart, as the daemon shows it.
	if err := client.New(fd.socket).DeleteSession(context.Background(), gone.ID); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		id    string
		wants []string
	}{
		{"a", lost.ID, []string{`session "a" is lost`, "interpreter died", "variables, imports and files are gone", `reset_session with {"session": "a"}`}},
		{"b", gone.ID, []string{`session "b" no longer exists`, "expired after 10 minutes", "daemon restarted",
			"variables, imports and files are gone", "not recreated", `reset_session with {"session": "b"}`}},
	} {
		for range 2 { // and again: still not replaced
			res, st := runIn(t, c, tc.name, "x", nil)
			if !res.IsError {
				t.Fatalf("session %q: a run went through: %s", tc.name, resultText(res))
			}
			mustContain(t, resultText(res), append(tc.wants, "Nothing was run")...)
			if r := resultOf(t, res); r.Error == nil {
				t.Errorf("session %q: structured content has no error", tc.name)
			}
			if tc.name == "a" && (st == nil || st.ID != tc.id || st.State != api.SessionLost) {
				t.Errorf("session %q: structured session %+v, want %q lost", tc.name, st, tc.id)
			}
		}
	}
	if n := len(fd.SessionRequests()); n != 2 {
		t.Errorf("%d sessions created, want the first 2 only", n)
	}

	// reset_session frees the names; the next calls start afresh.
	if res, rep := resetSession(t, c, "a"); res.IsError || rep.Outcome != "ended" || rep.ID != lost.ID {
		t.Errorf("reset a lost session: %+v %s", rep, resultText(res))
	}
	if res, rep := resetSession(t, c, "b"); res.IsError || rep.Outcome != "already_ended" || rep.ID != gone.ID {
		t.Errorf("reset an expired session: %+v %s", rep, resultText(res))
	}
	if st := mustRunIn(t, c, "a", "x", nil); st.ID == lost.ID || st.ExecutionCount != 1 {
		t.Errorf("after reset: %+v", st)
	}
}

func TestSessionRunLosesItsInterpreter(t *testing.T) {
	fd := startFakeDaemon(t)
	c := connect(t, newServer(t, fd))
	st := mustRunIn(t, c, "a", "x = 1", nil)
	fd.run = func(_ context.Context, req *api.RunRequest, _ func(string, string)) *api.Result {
		fd.LoseSession(req.Session)
		return &api.Result{ExitCode: 137, OOMKilled: true}
	}
	res, after := runIn(t, c, "a", "x = [0] * 10**10", nil)
	if !res.IsError || after == nil || after.ID != st.ID || after.State != api.SessionLost {
		t.Fatalf("isError %v, session %+v: %s", res.IsError, after, resultText(res))
	}
	mustContain(t, resultText(res), "memory limit", "did not survive this run", "variables, imports and files are gone", "reset_session")
}

func TestSessionBusy(t *testing.T) {
	fd := startFakeDaemon(t)
	c := connect(t, newServer(t, fd))
	mustRunIn(t, c, "a", "1", nil)
	started := make(chan string, 1)
	fd.run = blockUntilCanceled(started)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.CallTool(ctx, toolRequest(ToolRunPython, map[string]any{"code": "while True: pass", "session": "a"}, nil))
		errc <- err
	}()
	<-started
	res, _ := runIn(t, c, "a", "2", nil)
	if !res.IsError {
		t.Errorf("a second run in a busy session went through: %s", resultText(res))
	}
	mustContain(t, resultText(res), "still running", "one call at a time")
	cancel()
	<-errc
}

func TestResetSession(t *testing.T) {
	fd := startFakeDaemon(t)
	c := connect(t, newServer(t, fd))
	old := mustRunIn(t, c, "a", "x = 1", map[string]any{"dependencies": []string{"numpy"}})
	other := mustRunIn(t, c, "b", "x = 1", nil)

	res, rep := resetSession(t, c, "a")
	if res.IsError || rep != (resetReport{Session: "a", Outcome: "ended", ID: old.ID}) {
		t.Fatalf("reset: %+v: %s", rep, resultText(res))
	}
	mustContain(t, resultText(res), `Session "a" has ended`, "variables, imports and files are gone", "fresh Python interpreter")
	if got := daemonSessions(t, fd); !slices.Equal(got, []string{other.ID}) {
		t.Errorf("daemon sessions after reset %v, want only %q", got, other.ID)
	}

	// The name starts afresh, with the new call's settings.
	fresh := mustRunIn(t, c, "a", "x", map[string]any{"dependencies": []string{"pandas"}})
	if fresh.ID == old.ID || fresh.ExecutionCount != 1 {
		t.Errorf("after reset: %+v", fresh)
	}
	if sreqs := fd.SessionRequests(); len(sreqs) != 3 || !slices.Equal(sreqs[2].Dependencies, []string{"pandas"}) {
		t.Errorf("session requests %+v", sreqs)
	}

	// An unknown name: nothing to end, and no error.
	res, rep = resetSession(t, c, "never")
	if res.IsError || rep != (resetReport{Session: "never", Outcome: "none"}) {
		t.Errorf("reset of an unknown name: %+v: %s", rep, resultText(res))
	}
	mustContain(t, resultText(res), "no session named", "fresh Python interpreter")

	for _, args := range []map[string]any{{}, {"session": ""}, {"session": "a b"}, {"session": 3}, {"session": "a", "code": "1"}} {
		res := callTool(t, context.Background(), c, ToolResetSession, args)
		if !res.IsError {
			t.Errorf("reset_session %v: no error: %s", args, resultText(res))
		}
		mustContain(t, resultText(res), "Nothing was reset", "session")
	}
	if got := daemonSessions(t, fd); len(got) != 2 {
		t.Errorf("daemon sessions %v after bad resets", got)
	}
}

func TestSessionSettingsAreFixed(t *testing.T) {
	fd := startFakeDaemon(t)
	c := connect(t, newServer(t, fd))
	mustRunIn(t, c, "a", "1", map[string]any{
		"python": "3.12", "dependencies": []string{"numpy", "pandas"}, "env": map[string]string{"K": "v"}, "memory_mb": 300,
	})
	for _, tc := range []struct {
		args  map[string]any
		wants []string
	}{
		{map[string]any{"python": "3.11"}, []string{`"python" "3.11"`, "Python 3.12"}},
		{map[string]any{"dependencies": []string{"scipy"}}, []string{"dependencies scipy", "only numpy, pandas", "cannot be added"}},
		{map[string]any{"code": "# /// script\n# dependencies = [\"scipy\"]\n# ///\n1"}, []string{"dependencies scipy"}},
		{map[string]any{"env": map[string]string{"K": "w"}}, []string{`"env"`}},
		{map[string]any{"memory_mb": 200}, []string{`"memory_mb" 200 (it has 300)`}},
	} {
		code := "1"
		if c, ok := tc.args["code"].(string); ok {
			code = c
			delete(tc.args, "code")
		}
		res, _ := runIn(t, c, "a", code, tc.args)
		if !res.IsError {
			t.Errorf("%v: ran: %s", tc.args, resultText(res))
			continue
		}
		mustContain(t, resultText(res), append(tc.wants, "Nothing was run", `session "a" was created with other settings`,
			`reset_session with {"session": "a"}`, "another session name", "Leave those arguments out")...)
	}
	// The same settings, a subset of the dependencies or none at all are
	// what the session has.
	for _, args := range []map[string]any{
		nil,
		{"python": "3.12", "dependencies": []string{"pandas"}, "env": map[string]string{"K": "v"}, "memory_mb": 300},
		{"dependencies": []string{"numpy", " pandas "}},
	} {
		if res, _ := runIn(t, c, "a", "1", args); res.IsError {
			t.Errorf("%v: %s", args, resultText(res))
		}
	}
	if n := len(fd.SessionRequests()); n != 1 {
		t.Errorf("%d sessions created, want 1", n)
	}
}

func TestSessionName(t *testing.T) {
	fd := startFakeDaemon(t)
	c := connect(t, newServer(t, fd))
	for _, name := range []any{"has space", "ü", "a/b", strings.Repeat("n", 65), 7, true} {
		res := callTool(t, context.Background(), c, ToolRunPython, map[string]any{"code": "1", "session": name})
		if !res.IsError {
			t.Errorf("session %v: ran: %s", name, resultText(res))
			continue
		}
		mustContain(t, resultText(res), "Nothing was run", `"session"`, `"analysis"`)
	}
	for _, name := range []string{"a", "data-1", "v1.2_x", strings.Repeat("n", 64)} {
		mustRunIn(t, c, name, "1", nil)
	}
	if len(fd.SessionRequests()) != 4 {
		t.Errorf("%d sessions created, want 4", len(fd.SessionRequests()))
	}
}

func TestSessionsBoundedPerConnection(t *testing.T) {
	fd := startFakeDaemon(t)
	srv := newServer(t, fd)
	c := connect(t, srv)
	for i := range maxSessionsPerConn {
		mustRunIn(t, c, fmt.Sprintf("s%d", i), "1", nil)
	}
	res, _ := runIn(t, c, "one-more", "1", nil)
	if !res.IsError {
		t.Fatalf("session %d was created: %s", maxSessionsPerConn+1, resultText(res))
	}
	mustContain(t, resultText(res), "already has 8 sessions", `"s0", "s1"`, "the most it may hold", "reset_session", `"one-more"`)
	// Names in use still work, and another connection has its own bound.
	mustRunIn(t, c, "s3", "1", nil)
	mustRunIn(t, connect(t, srv), "one-more", "1", nil)

	resetSession(t, c, "s3")
	mustRunIn(t, c, "one-more", "1", nil)
	if n := len(fd.SessionRequests()); n != maxSessionsPerConn+2 {
		t.Errorf("%d sessions created, want %d", n, maxSessionsPerConn+2)
	}
}

// TestSessionCreatedOnce: calls racing to use a new name make one session
// and all run in it.
func TestSessionCreatedOnce(t *testing.T) {
	fd := startFakeDaemon(t)
	c := connect(t, newServer(t, fd))
	var wg sync.WaitGroup
	ids := make(chan string, 4)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, st := runIn(t, c, "shared", fmt.Sprint(i), nil)
			switch {
			case st != nil:
				ids <- st.ID
			case !strings.Contains(resultText(res), "one call at a time"):
				t.Errorf("call %d: %s", i, resultText(res))
			}
		}()
	}
	wg.Wait()
	close(ids)
	var seen []string
	for id := range ids {
		if !slices.Contains(seen, id) {
			seen = append(seen, id)
		}
	}
	if len(seen) > 1 || len(fd.SessionRequests()) != 1 {
		t.Errorf("sessions %v from %d requests, want one", seen, len(fd.SessionRequests()))
	}
}
