package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/client"
	"github.com/cellblock/cellblock/internal/pep723"
)

// Named sessions.
//
// run_python's "session" is a name the model picks. The first call with a
// name creates a daemon session (POST /v1/sessions) with that call's
// python, dependencies, env and memory; later calls with the name run in
// it. Names are private to the MCP client connection, which is mcp-go's
// ClientSession: one per initialised streamable HTTP client (its
// Mcp-Session-Id), one for the process over stdio, one per in-process
// client. Two connections using the same name get two daemon sessions.
//
// mcp-go's session hooks drive the lifetime: OnRegisterSession makes a
// connection known, OnUnregisterSession (an HTTP client's DELETE, the HTTP
// server shutting down, stdio reaching EOF or being stopped) deletes every
// daemon session the connection made. A call whose connection mcp-go never
// registered (streamable HTTP with protocol 2026-07-28, which has no MCP
// sessions) cannot use a name, since nothing would ever end its sessions
// and nothing would keep another client from its names.
//
// A session that expired or was lost is never replaced behind the model's
// back: calls with its name fail, saying its variables are gone, until
// reset_session forgets it.

const (
	// maxSessionsPerConn bounds the named sessions of one connection.
	maxSessionsPerConn = 8
	// maxSessionName bounds a session name's length.
	maxSessionName = 64
	// sessionCloseTimeout bounds ending a connection's daemon sessions
	// when it closes.
	sessionCloseTimeout = 5 * time.Second
)

// sessionNamePattern is what a session name may be.
var sessionNamePattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// checkSessionName says what is wrong with a session name, if anything.
func checkSessionName(name string) error {
	if sessionNamePattern.MatchString(name) {
		return nil
	}
	shown := name
	if len(shown) > maxSessionName+16 {
		shown = strings.ToValidUTF8(shown[:maxSessionName+16], "") + "..."
	}
	return fmt.Errorf(`"session" must be a short name of your choice: 1 to %d letters, digits, '_', '.' or '-', such as "analysis" or "data-1", not %q`,
		maxSessionName, shown)
}

// sessionSpec is what fixes a session's jail, as the call that names it
// asks for it: what run_python's arguments say, dependencies merged with
// the code's PEP 723 block. An empty field asks for nothing in particular.
type sessionSpec struct {
	python      string
	deps        []string
	env         map[string]string
	memoryBytes int64
	network     []string
}

// specOf is what a run_python call asks of its session; rr is the run
// request made of its arguments.
func specOf(a *runArgs, rr *api.RunRequest) sessionSpec {
	var block []string
	if meta, err := pep723.Parse(a.Code); err == nil {
		block = meta.Dependencies
	}
	var env map[string]string
	if len(a.Env) > 0 {
		env = a.Env
	}
	return sessionSpec{
		python:      rr.Python,
		deps:        pep723.Merge(block, rr.Dependencies),
		env:         env,
		memoryBytes: rr.MemoryBytes,
		network:     networkOf(rr),
	}
}

// networkOf is a run request's network allowlist, nil without one.
func networkOf(rr *api.RunRequest) []string {
	if !rr.Network.Wants() {
		return nil
	}
	return rr.Network.Allow
}

// namedSession is one name of one connection.
type namedSession struct {
	name string
	// spec is what the call that created it asked for.
	spec sessionSpec
	// created is closed once the creation has ended, either way.
	created chan struct{}

	// Set once it is created (under sessionTable.mu).

	// id is the daemon's session id; "" while it is being created.
	id string
	// python is the interpreter version the daemon reported.
	python string
	// idle is its idle timeout.
	idle time.Duration
}

// conflict says how spec asks for something the session was not created
// with, or "" when it does not. Leaving a field out asks for what the
// session has; dependencies the session has are fine in any subset.
func (s *namedSession) conflict(spec sessionSpec) string {
	var diffs []string
	if p := spec.python; p != "" && p != s.spec.python && !versionMatches(p, s.python) {
		have := "the default Python"
		switch {
		case s.python != "":
			have = "Python " + s.python
		case s.spec.python != "":
			have = "Python " + s.spec.python
		}
		diffs = append(diffs, fmt.Sprintf(`"python" %q (it runs %s)`, p, have))
	}
	var missing []string
	for _, d := range spec.deps {
		if !slices.Contains(s.spec.deps, d) {
			missing = append(missing, d)
		}
	}
	if len(missing) > 0 {
		have := "no dependencies"
		if len(s.spec.deps) > 0 {
			have = "only " + strings.Join(s.spec.deps, ", ")
		}
		diffs = append(diffs, fmt.Sprintf("dependencies %s (it has %s; packages cannot be added to a running session)",
			strings.Join(missing, ", "), have))
	}
	if spec.env != nil && !maps.Equal(spec.env, s.spec.env) {
		diffs = append(diffs, `other "env" variables than it was created with`)
	}
	if spec.memoryBytes != 0 && spec.memoryBytes != s.spec.memoryBytes {
		have := "the default"
		if s.spec.memoryBytes != 0 {
			have = fmt.Sprint(s.spec.memoryBytes >> 20)
		}
		diffs = append(diffs, fmt.Sprintf(`"memory_mb" %d (it has %s)`, spec.memoryBytes>>20, have))
	}
	if spec.network != nil && !sameNetwork(spec.network, s.spec.network) {
		have := "no network"
		if len(s.spec.network) > 0 {
			have = strings.Join(s.spec.network, ", ")
		}
		diffs = append(diffs, fmt.Sprintf(`"network_allow" %s (it has %s)`, strings.Join(spec.network, ", "), have))
	}
	return strings.Join(diffs, "; ")
}

// versionMatches reports whether the version prefix p ("3.12") names the
// full version v ("3.12.7").
func versionMatches(p, v string) bool {
	return v != "" && (v == p || strings.HasPrefix(v, p+"."))
}

// sessionTable holds the named sessions of every connection. It owns the
// daemon sessions it creates: it deletes them when their connection ends
// or reset_session forgets their name, and nothing else does.
type sessionTable struct {
	client *client.Client
	log    *slog.Logger

	mu sync.Mutex
	// conns holds the connections mcp-go has registered and not yet
	// unregistered: MCP session id, then name.
	conns map[string]map[string]*namedSession
}

// connected is the OnRegisterSession hook.
func (t *sessionTable) connected(_ context.Context, cs server.ClientSession) {
	id := cs.SessionID()
	if id == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.conns == nil {
		t.conns = make(map[string]map[string]*namedSession)
	}
	if _, ok := t.conns[id]; !ok {
		t.conns[id] = make(map[string]*namedSession)
	}
}

// disconnected is the OnUnregisterSession hook: it ends the connection's
// daemon sessions before it returns, so that a stdio server has ended
// them when ServeStdio returns. A session still being created is ended by
// its creator (see create).
func (t *sessionTable) disconnected(ctx context.Context, cs server.ClientSession) {
	conn := cs.SessionID()
	t.mu.Lock()
	names := t.conns[conn]
	delete(t.conns, conn)
	var ids []string
	for _, s := range names {
		if s.id != "" {
			ids = append(ids, s.id)
		}
	}
	t.mu.Unlock()
	if len(ids) > 0 {
		t.log.Info("MCP connection closed; ending its sessions", "connection", conn, "sessions", ids)
	}
	t.end(ctx, ids)
}

// end deletes daemon sessions, one after the other, within
// sessionCloseTimeout in all. One that is already gone is fine; a failure
// is logged (the session then ends at its idle timeout).
func (t *sessionTable) end(ctx context.Context, ids []string) {
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sessionCloseTimeout)
	defer cancel()
	for _, id := range ids {
		if err := t.client.DeleteSession(ctx, id); err != nil && !isSessionGone(err) {
			t.log.Warn("could not end a session; it ends at its idle timeout", "session", id, "err", err)
		}
	}
}

// isSessionGone reports whether err says the session no longer exists.
func isSessionGone(err error) bool {
	var e *api.Error
	return errors.As(err, &e) && e.Type == api.ErrSessionNotFound
}

// connectionOf is the MCP session id of the connection a call came on.
func connectionOf(ctx context.Context) string {
	if cs := server.ClientSessionFromContext(ctx); cs != nil {
		return cs.SessionID()
	}
	return ""
}

// sortedNames returns a connection's names, sorted. Call with t.mu held.
func sortedNames(names map[string]*namedSession) []string {
	return slices.Sorted(maps.Keys(names))
}

// sessionFor returns the session name stands for on the call's
// connection, creating it with sreq on first use. When it cannot, the tool
// result says why.
func (h *handler) sessionFor(ctx context.Context, name string, spec sessionSpec, sreq *api.SessionRequest) (*namedSession, *mcp.CallToolResult) {
	t := h.sessions
	conn := connectionOf(ctx)
	for {
		t.mu.Lock()
		names, ok := t.conns[conn]
		if !ok {
			t.mu.Unlock()
			return nil, textResult("Nothing was run: "+noConnectionText(conn)+` Call run_python without "session" instead (each call then starts a fresh interpreter, so pass everything the code needs in "code" and "inputs").`, true)
		}
		s := names[name]
		switch {
		case s == nil:
			if len(names) >= maxSessionsPerConn {
				in := sortedNames(names)
				t.mu.Unlock()
				return nil, textResult(fmt.Sprintf("Nothing was run: this connection already has %d sessions (%s), the most it may hold at once. "+
					"Run this in one of them, or call reset_session on one you no longer need, which frees its name, before starting session %q.",
					len(in), quoteAll(in), name), true)
			}
			s = &namedSession{name: name, spec: spec, created: make(chan struct{})}
			names[name] = s
			t.mu.Unlock()
			return h.createSession(ctx, conn, s, sreq)
		case s.id == "":
			// Another call is creating it: wait and look again.
			created := s.created
			t.mu.Unlock()
			select {
			case <-created:
				continue
			case <-ctx.Done():
				return nil, textResult("The call was cancelled before it finished; nothing was run.", true)
			}
		default:
			conflict := s.conflict(spec)
			t.mu.Unlock()
			if conflict != "" {
				return nil, textResult(fmt.Sprintf("Nothing was run: session %q was created with other settings, and a session's python, dependencies, env, memory_mb and network_allow are fixed when its first call creates it. "+
					"This call asks for %s. Leave those arguments out to run with what the session has; "+
					"or call reset_session with {\"session\": %q} (its variables are lost) and call again to recreate it with the new settings; "+
					"or use another session name.", name, conflict, name), true)
			}
			return s, nil
		}
	}
}

// createSession creates s's daemon session. s is in the table already,
// with no id, so that other calls with its name wait for it.
func (h *handler) createSession(ctx context.Context, conn string, s *namedSession, sreq *api.SessionRequest) (*namedSession, *mcp.CallToolResult) {
	t := h.sessions
	sess, err := h.client.CreateSession(ctx, sreq)

	t.mu.Lock()
	close(s.created)
	names := t.conns[conn]
	live := names != nil && names[s.name] == s
	if err != nil || !live {
		if live {
			delete(names, s.name)
		}
		t.mu.Unlock()
		if err != nil {
			return nil, h.createFailure(ctx, s.name, err)
		}
		// The connection ended while the session was being made.
		t.end(ctx, []string{sess.ID})
		return nil, textResult("Nothing was run: the MCP connection ended while the session was being created.", true)
	}
	s.id = sess.ID
	s.python = sess.Python
	s.idle = time.Duration(sess.IdleTimeoutMs) * time.Millisecond
	t.mu.Unlock()
	h.log.Info("session created", "connection", conn, "name", s.name, "session", sess.ID, "python", sess.Python)
	return s, nil
}

// createFailure explains why a session could not be created.
func (h *handler) createFailure(ctx context.Context, name string, err error) *mcp.CallToolResult {
	var e *api.Error
	if !errors.As(err, &e) {
		return h.daemonFailure(ctx, fmt.Sprintf("start session %q", name), err)
	}
	res := runResult(&api.Result{Error: e}, h.currentInfo())
	lead := fmt.Sprintf("The sandbox did not start session %q, so nothing was run: ", name)
	res.Content[0] = mcp.NewTextContent(refusalTextAs(lead, e, h.currentInfo()))
	return res
}

// noConnectionText explains why a call cannot use a session name.
func noConnectionText(conn string) string {
	if conn == "" {
		return "named sessions need an MCP connection that keeps state, and this call came without one " +
			"(streamable HTTP with protocol version 2026-07-28 has no MCP sessions, so cellblock-mcp could not keep a session private to this client or end it when the client goes away; " +
			"stdio, or streamable HTTP with protocol version " + mcp.LATEST_LEGACY_PROTOCOL_VERSION + ", has them)."
	}
	return "this call's MCP session is not one cellblock-mcp knows (it was not initialised here, or it has ended), so it cannot hold named sessions; the client should reconnect."
}

// runInSession is run_python with "session": rr's python, dependencies,
// env and memory go to the session's creation, the rest to the run.
func (h *handler) runInSession(ctx context.Context, req mcp.CallToolRequest, args *runArgs, rr *api.RunRequest) *mcp.CallToolResult {
	name := args.Session
	spec := specOf(args, rr)
	sreq := &api.SessionRequest{Python: rr.Python, Dependencies: spec.deps, Env: rr.Env, MemoryBytes: rr.MemoryBytes, Network: rr.Network, Secrets: rr.Secrets}
	s, refused := h.sessionFor(ctx, name, spec, sreq)
	if refused != nil {
		return refused
	}

	run := *rr
	run.Python, run.Dependencies, run.Env, run.MemoryBytes, run.Network, run.Secrets = "", nil, nil, 0, nil, nil
	run.Session = s.id
	if e := run.Validate(); e != nil {
		return runResult(&api.Result{Error: e}, h.currentInfo())
	}
	relay := newOutputRelay(ctx, h.srv, req)
	res, err := h.stream(ctx, &run, relay.Add)
	relay.Close()
	if err != nil {
		return h.daemonFailure(ctx, fmt.Sprintf("run the program in session %q", name), err)
	}
	h.log.Debug("run finished", "run_id", res.RunID, "session", s.id, "exit_code", res.ExitCode,
		"timed_out", res.TimedOut, "oom_killed", res.OOMKilled, "error", res.Error)
	if res.Error != nil && res.Error.Type == api.ErrSessionLost && res.Session == nil {
		// What the daemon says of the session, for the structured content.
		if sess, err := h.client.Session(ctx, s.id); err == nil {
			res.Session = &api.SessionState{ID: sess.ID, ExecutionCount: sess.ExecutionCount, State: sess.State, ExpiresAt: sess.ExpiresAt}
		}
	}
	out := sessionResult(s, res, h.currentInfo())
	h.addFiles(ctx, out, res)
	return out
}

// sessionResult is runResult, with what became of the session said in
// the text.
func sessionResult(s *namedSession, res *api.Result, info *api.Info) *mcp.CallToolResult {
	reset := fmt.Sprintf(`call reset_session with {"session": %q} to start a fresh interpreter under that name (then redo any set-up: imports, loading data), or use another name`, s.name)
	if e := res.Error; e != nil {
		var text string
		switch e.Type {
		case api.ErrSessionNotFound:
			text = fmt.Sprintf("Nothing was run: session %q no longer exists in the sandbox. It has most likely expired after %s without a call, or the sandbox daemon restarted. "+
				"Its variables, imports and files are gone, and it is not recreated behind your back. To go on, %s. (The daemon said: %s.)",
				s.name, idleText(s.idle), reset, strings.TrimSuffix(e.Message, "."))
		case api.ErrSessionLost:
			text = fmt.Sprintf("Nothing was run: session %q is lost: its Python interpreter died (out of memory, a crash, os._exit, or a timeout it did not survive). "+
				"Its variables, imports and files are gone. To go on, %s. (The daemon said: %s.)",
				s.name, reset, strings.TrimSuffix(e.Message, "."))
		case api.ErrSessionBusy:
			text = fmt.Sprintf("Nothing was run: another run_python call is still running in session %q, and a session runs one call at a time. "+
				"Wait for that call's result and call again, or use another session name to run code side by side.", s.name)
		}
		out := runResult(res, info)
		if text != "" {
			out.Content[0] = mcp.NewTextContent(text)
		}
		return out
	}

	out := runResult(res, info)
	var b strings.Builder
	b.WriteString(out.Content[0].(mcp.TextContent).Text)
	fmt.Fprintf(&b, "\n\n--- session %q ---\n", s.name)
	st := res.Session
	switch {
	case st != nil && st.State == api.SessionLost:
		fmt.Fprintf(&b, "The session's interpreter did not survive this run: its variables, imports and files are gone. Calls with this name fail until you %s.", reset)
		out.IsError = true
	case st != nil:
		fmt.Fprintf(&b, "Run %d in this session. Its variables, imports and files in /work are kept for the next call with this name", st.ExecutionCount)
		if !st.ExpiresAt.IsZero() {
			fmt.Fprintf(&b, " until %s (it expires after %s without a call)", st.ExpiresAt.UTC().Format(time.RFC3339), idleText(s.idle))
		}
		b.WriteString(".")
	default:
		b.WriteString("The code ran in this session; its variables, imports and files in /work are kept for the next call with this name.")
	}
	out.Content[0] = mcp.NewTextContent(b.String())
	return out
}

// idleText says how long a session may go without a call.
func idleText(d time.Duration) string {
	if d <= 0 {
		d = api.DefaultSessionIdle
	}
	return fmtDuration(d)
}

// fmtDuration formats a duration for people, in whole minutes when it is
// some.
func fmtDuration(d time.Duration) string {
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		n := int64(d / time.Hour)
		return fmt.Sprintf("%d hour%s", n, plural(float64(n)))
	case d >= time.Minute && d%time.Minute == 0:
		n := int64(d / time.Minute)
		return fmt.Sprintf("%d minute%s", n, plural(float64(n)))
	}
	return fmtMs(d.Milliseconds())
}

// quoteAll quotes each name and joins them.
func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

// resetReport is reset_session's structured content.
type resetReport struct {
	// Session is the name.
	Session string `json:"session"`
	// Outcome is what became of the session that had the name: "ended",
	// "already_ended" (it had expired or been lost), "not_confirmed" (the
	// daemon could not be asked; it ends at its idle timeout) or "none"
	// (no session had the name).
	Outcome string `json:"outcome"`
	// ID is the daemon's id of the session that had the name.
	ID string `json:"id,omitempty"`
}

// resetSession is reset_session's handler: it ends the daemon session a
// name stands for on the call's connection and forgets the name, so that
// the next run_python with it creates a fresh one.
func (h *handler) resetSession(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var args resetArgs
	err := decodeArgs(req, &args, resetArgNames...)
	if err == nil {
		err = args.check()
	}
	if err != nil {
		return textResult("Nothing was reset: "+err.Error()+".", true), nil
	}
	name := args.Session
	t := h.sessions
	conn := connectionOf(ctx)
	var s *namedSession
	for {
		t.mu.Lock()
		names, ok := t.conns[conn]
		if !ok {
			t.mu.Unlock()
			return textResult("Nothing was reset: "+noConnectionText(conn), true), nil
		}
		s = names[name]
		if s != nil && s.id == "" {
			// Being created by a call in flight: reset what it makes.
			created := s.created
			t.mu.Unlock()
			select {
			case <-created:
				continue
			case <-ctx.Done():
				return textResult("The call was cancelled before it finished; nothing was reset.", true), nil
			}
		}
		if s != nil {
			delete(names, name)
		}
		t.mu.Unlock()
		break
	}

	fresh := fmt.Sprintf(`The next run_python call with "session": %q starts a fresh Python interpreter, created with that call's python, dependencies, env and memory_mb.`, name)
	report := &resetReport{Session: name, Outcome: "none"}
	var text string
	if s == nil {
		text = fmt.Sprintf("There was no session named %q on this connection, so there was nothing to end. %s", name, fresh)
	} else {
		report.ID = s.id
		err := h.client.DeleteSession(ctx, s.id)
		switch {
		case err == nil:
			report.Outcome = "ended"
			text = fmt.Sprintf("Session %q has ended: its variables, imports and files are gone (a run still going on in it was stopped). %s", name, fresh)
		case isSessionGone(err):
			report.Outcome = "already_ended"
			text = fmt.Sprintf("Session %q had already ended (it expired, or the sandbox daemon restarted); its name is free again. %s", name, fresh)
		default:
			report.Outcome = "not_confirmed"
			h.log.Warn("could not end a session on reset; it ends at its idle timeout", "session", s.id, "err", err)
			text = fmt.Sprintf("The name %q is free again, but the sandbox could not be asked to end its old session (%v); "+
				"that session ends by itself after %s without a call. %s", name, err, idleText(s.idle), fresh)
		}
		h.log.Info("session reset", "connection", conn, "name", name, "session", s.id, "outcome", report.Outcome)
	}
	return &mcp.CallToolResult{
		Content:           []mcp.Content{mcp.NewTextContent(text)},
		StructuredContent: report,
	}, nil
}
