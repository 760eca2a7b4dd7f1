package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/peercred"
	"github.com/cellblock/cellblock/internal/record"
	"github.com/cellblock/cellblock/internal/toolrelay"
)

// The tool bridge's side of the API: a run that declares tools must be
// streamed; its relay (package toolrelay) sends each call as an event of
// the stream, and the caller answers with POST api.PathToolCalls, a
// second request on the same socket. Calls are answered by the uid that
// started the run (or root); anyone else is told not_found, as for a call
// that does not exist.

// errStreamGone is the error of a tool call the caller's stream can no
// longer carry.
var errStreamGone = errors.New("the caller's stream failed")

// registerTools adds the route that answers tool calls.
func (s *Server) registerTools(mux *http.ServeMux) {
	mux.HandleFunc("POST "+api.PathToolCalls, s.handleToolAnswer)
}

func (s *Server) handleToolAnswer(w http.ResponseWriter, r *http.Request) {
	peer, _ := PeerFrom(r.Context())
	run, id := r.PathValue("run"), r.PathValue("call")
	relay, aerr := s.tools.Lookup(peer, run, id)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		writeError(w, api.Errorf(api.ErrBadRequest, "", "Content-Type must be application/json, not %q", ct))
		return
	}
	limit := relay.AnswerLimit()
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		writeError(w, api.Errorf(api.ErrBadRequest, "", "read the answer: %v", err))
		return
	}
	if aerr := relay.Answer(peer, id, body, int64(len(body)) > limit); aerr != nil {
		writeError(w, aerr)
		return
	}
	writeJSON(w, http.StatusOK, api.ToolAnswered{ID: id, Answered: true})
}

// runTools is what handleRun does for a run's tools: Prepare checks
// them; open starts the relay, which the run carries (Run.Tools) to the
// jail; finish puts the calls into the result and the record.
type runTools struct {
	tools *toolrelay.Tools
	relay *toolrelay.Relay
}

// checkTools makes the checks of req's tools that cost nothing, before
// the run is admitted: stream says whether its caller asked for a
// stream, which a run with tools needs, and its tool_limits must be
// within the maxima.
func (s *Server) checkTools(req *api.RunRequest, stream bool) *api.Error {
	if len(req.Tools) == 0 {
		return nil
	}
	if !stream {
		return api.Errorf(api.ErrBadRequest, "tools", "a run that declares tools must be streamed (Accept: %s): "+
			"each call comes to the caller as an event of the stream, and the caller answers it with POST %s",
			api.StreamContentType, api.PathToolCalls)
	}
	_, aerr := req.ToolLimits.Resolve(s.cfg.Tools.Defaults, s.cfg.Tools.Maxima)
	return aerr
}

// prepareTools compiles req's input schemas (which checkTools passed),
// once the run holds a slot: compiling costs time.
func (s *Server) prepareTools(req *api.RunRequest) (*runTools, *api.Error) {
	tools, aerr := toolrelay.Prepare(req, s.cfg.Tools)
	if aerr != nil || tools == nil {
		return nil, aerr
	}
	return &runTools{tools: tools}, nil
}

// open starts the relay of run id, whose calls go to sw, and returns it;
// nil for a run without tools. Nil-safe.
func (t *runTools) open(s *Server, id string, peer peercred.Peer, sw *streamWriter) *toolrelay.Relay {
	if t == nil {
		return nil
	}
	t.relay = s.tools.Open(t.tools, id, peer, func(ctx context.Context, c api.ToolCall) error { return sw.toolCall(ctx, id, c) }, s.log)
	return t.relay
}

// finish ends the relay and reports its calls in res and rec. Nil-safe.
func (t *runTools) finish(res *api.Result, rec *record.Run) {
	if t == nil || t.relay == nil {
		return
	}
	t.relay.Close()
	calls, records, over, busy := t.relay.Report()
	res.ToolCalls, res.ToolCallsOverCap = calls, over
	if res.Phases != nil {
		res.Phases.ToolsUs = busy.Microseconds()
	}
	rec.ToolCalls, rec.ToolCallsOverCap = records, over
}

// toolCall sends a tool call to the caller as an event, unless ctx (the
// relay's) ended while it waited for the stream.
func (s *streamWriter) toolCall(ctx context.Context, run string, c api.ToolCall) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed {
		return errStreamGone
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.write(api.Event{RunID: run, ToolCall: &c})
}
