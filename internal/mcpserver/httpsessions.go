package mcpserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// MCP sessions over streamable HTTP.
//
// A client's initialize makes an MCP session (its Mcp-Session-Id), which
// holds state here and in mcp-go until the client sends DELETE. A client
// that never does (it crashed, or it is hostile and initializes in a loop)
// would keep it for good. So ServeHTTP issues the ids itself
// (httpSessions, mcp-go's SessionIdManager): a request naming an id it did
// not issue, or one that ended, is answered 404 (the client then
// initializes again, as MCP says it must); a session without a request for
// HTTPSessionLimits.Idle ends as if its client had sent DELETE, its named
// sessions with it; and past HTTPSessionLimits.Max live sessions a new
// initialize is refused (503) until one ends. A request in progress (a
// long run_python call, a client's open GET stream) keeps its session
// alive. Only sessions issued here are registered with the MCP server, so
// the per-connection tables (named sessions, artifacts) hold only those.

// Defaults of HTTPSessionLimits.
const (
	// DefaultHTTPSessionIdle is as long as cellblockd lets a session of
	// its own go without a run at most (--session-max-idle's default):
	// an MCP session idle longer has lost those anyway.
	DefaultHTTPSessionIdle = time.Hour
	// DefaultHTTPMaxSessions live MCP sessions hold about 12 MiB of
	// mcp-go's state (some 12 KiB each, most of it the buffers of a
	// session's notification channels), plus the tables of this package.
	DefaultHTTPMaxSessions = 1024
)

// HTTPSessionLimits bound the MCP sessions of the streamable HTTP
// transport.
type HTTPSessionLimits struct {
	// Idle ends a session that has had no request for this long (0:
	// DefaultHTTPSessionIdle).
	Idle time.Duration
	// Max is how many sessions may be live at once (0:
	// DefaultHTTPMaxSessions).
	Max int
}

// withDefaults fills in what l leaves unset.
func (l HTTPSessionLimits) withDefaults() HTTPSessionLimits {
	if l.Idle <= 0 {
		l.Idle = DefaultHTTPSessionIdle
	}
	if l.Max <= 0 {
		l.Max = DefaultHTTPMaxSessions
	}
	return l
}

// sessionIDPrefix starts the ids httpSessions issues (as mcp-go's own).
const sessionIDPrefix = "mcp-session-"

// httpSessions issues the MCP session ids of the HTTP transport, knows
// which are live, and which have been idle past the limit. It implements
// mcp-go's server.SessionIdManager.
type httpSessions struct {
	limits HTTPSessionLimits
	now    func() time.Time

	mu   sync.Mutex
	live map[string]*httpSession
}

// httpSession is one live MCP session.
type httpSession struct {
	lastUsed time.Time // the end of its last request
	inFlight int       // its requests in progress
}

func newHTTPSessions(l HTTPSessionLimits) *httpSessions {
	return &httpSessions{limits: l.withDefaults(), now: time.Now, live: map[string]*httpSession{}}
}

// Generate issues the id of a new session (an initialize).
func (h *httpSessions) Generate() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	id := sessionIDPrefix + hex.EncodeToString(b[:])
	h.mu.Lock()
	defer h.mu.Unlock()
	h.live[id] = &httpSession{lastUsed: h.now()}
	return id
}

// errUnknownSession is Validate's answer for an id that is not live,
// which mcp-go turns into 404: the client must initialize again.
var errUnknownSession = errors.New("no such MCP session: it was never issued here, or it ended (DELETE, or idle too long)")

// Validate accepts the ids of live sessions only.
func (h *httpSessions) Validate(id string) (isTerminated bool, err error) {
	if !h.known(id) {
		return false, errUnknownSession
	}
	return false, nil
}

// Terminate forgets a session (its client's DELETE, or its idle end).
func (h *httpSessions) Terminate(id string) (isNotAllowed bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.live, id)
	return false, nil
}

// count is how many sessions are live.
func (h *httpSessions) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.live)
}

func (h *httpSessions) known(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.live[id] != nil
}

// full reports whether no more sessions may be made.
func (h *httpSessions) full() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.live) >= h.limits.Max
}

// begin counts a request of session id as in progress, reporting whether
// id is live; end, when begin said so, counts it over.
func (h *httpSessions) begin(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.live[id]
	if s != nil {
		s.inFlight++
	}
	return s != nil
}

func (h *httpSessions) end(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.live[id]; s != nil {
		s.inFlight--
		s.lastUsed = h.now()
	}
}

// isIdle reports whether s has no request in progress and has had none
// for longer than the limit at now.
func (h *httpSessions) isIdle(s *httpSession, now time.Time) bool {
	return s.inFlight == 0 && now.Sub(s.lastUsed) > h.limits.Idle
}

// idle lists the sessions that are idle now.
func (h *httpSessions) idle() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	var ids []string
	for id, s := range h.live {
		if h.isIdle(s, now) {
			ids = append(ids, id)
		}
	}
	return ids
}

// endIfIdle forgets session id if it is still idle (no request began
// since idle listed it), reporting whether it did: from then on its
// requests are refused as those of an ended session.
func (h *httpSessions) endIfIdle(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.live[id]
	if s == nil || !h.isIdle(s, h.now()) {
		return false
	}
	delete(h.live, id)
	return true
}

// sweepInterval is how often idle sessions are looked for: a quarter of
// the idle limit, within a second and a minute.
func (h *httpSessions) sweepInterval() time.Duration {
	return min(max(h.limits.Idle/4, time.Second), time.Minute)
}

// expire ends every idle session through the transport, as its client's
// DELETE would: mcp-go drops its state, and the session hooks end its
// named sessions and forget its artifacts.
func (h *httpSessions) expire(ctx context.Context, t *server.StreamableHTTPServer, log *slog.Logger) {
	for _, id := range h.idle() {
		if !h.endIfIdle(id) {
			continue
		}
		log.Info("MCP session idle too long; ending it", "connection", id, "idle", h.limits.Idle)
		t.Handle(discardResponse{header: http.Header{}}, &server.HTTPRequest{
			Method:  http.MethodDelete,
			Header:  http.Header{server.HeaderKeySessionID: []string{id}},
			Context: ctx,
		})
	}
}

// sweep calls expire every sweepInterval until ctx ends.
func (h *httpSessions) sweep(ctx context.Context, t *server.StreamableHTTPServer, log *slog.Logger) {
	tick := time.NewTicker(h.sweepInterval())
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			h.expire(ctx, t, log)
		}
	}
}

// maxPeekBytes bounds the body guard reads to tell an initialize.
const maxPeekBytes = 1 << 20

// isInitialize reports whether r's body is an initialize request, and
// puts the body back for mcp-go to read. An initialize is small; a body
// over maxPeekBytes is not one.
func isInitialize(r *http.Request) bool {
	head, err := io.ReadAll(io.LimitReader(r.Body, maxPeekBytes+1))
	r.Body = readCloser{io.MultiReader(bytes.NewReader(head), r.Body), r.Body}
	if err != nil || len(head) > maxPeekBytes {
		return false
	}
	var msg struct {
		Method string `json:"method"`
	}
	return json.Unmarshal(head, &msg) == nil && strings.TrimSpace(msg.Method) == string(mcp.MethodInitialize)
}

// readCloser reads from one reader and closes another.
type readCloser struct {
	io.Reader
	io.Closer
}

// discardResponse is the response of a request the sweeper makes itself.
type discardResponse struct{ header http.Header }

func (d discardResponse) Header() http.Header         { return d.header }
func (d discardResponse) WriteHeader(int)             {}
func (d discardResponse) Write(p []byte) (int, error) { return len(p), nil }
func (d discardResponse) Flush()                      {}
func (d discardResponse) CanStream() bool             { return false }
