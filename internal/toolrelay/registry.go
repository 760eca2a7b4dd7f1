package toolrelay

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"unicode/utf8"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/peercred"
	"github.com/cellblock/cellblock/nsjail/runner"
	"github.com/cellblock/cellblock/nsjail/runner/wire"
)

// Registry holds the relays of the runs in progress, by run id, for the
// answers to find. It is safe for concurrent use.
type Registry struct {
	mu   sync.Mutex
	runs map[string]*Relay
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{runs: map[string]*Relay{}} }

// Open starts the relay of run runID, started by owner, for tools: emit
// sends each call to the run's caller (it may block while the caller
// reads, for a bounded time; it should not write once its context, which
// ends when the relay stops, has ended). Close the relay when the run is
// over.
func (g *Registry) Open(tools *Tools, runID string, owner peercred.Peer, emit func(context.Context, api.ToolCall) error, log *slog.Logger) *Relay {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Relay{tools: tools, runID: runID, owner: owner.UID, emit: emit, log: log, reg: g, ctx: ctx, cancel: cancel,
		pending: map[string]*call{}, jailIDs: map[string]bool{}}
	g.mu.Lock()
	g.runs[runID] = r
	g.mu.Unlock()
	return r
}

func (g *Registry) remove(runID string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.runs, runID)
}

// Lookup returns the relay that waits for call id's answer from p: the
// run's owner or root. Any other uid, an unknown run or call, and a call
// answered, timed out or ended get the same not_found error.
func (g *Registry) Lookup(p peercred.Peer, runID, id string) (*Relay, *api.Error) {
	g.mu.Lock()
	r := g.runs[runID]
	g.mu.Unlock()
	if r == nil {
		return nil, notFound(runID, id)
	}
	r.mu.Lock()
	ok := r.pending[id] != nil && r.owns(p)
	r.mu.Unlock()
	if !ok {
		return nil, notFound(runID, id)
	}
	return r, nil
}

// AnswerLimit is the most bytes an answer's body may take to be read:
// the run's cap on a result, escaped in the worst case, plus room for an
// error message.
func (r *Relay) AnswerLimit() int64 { return r.resultLimit()*6 + 64<<10 }

// Answer gives p's answer (a ToolAnswer's body, decoded) to call id. It
// returns an *api.Error naming the field for an answer of the wrong shape
// (the call still waits), too_large for a result over the cap (the call
// fails in the code) and not_found when no such call waits for p.
// tooLarge says that the body was cut at AnswerLimit.
func (r *Relay) Answer(p peercred.Peer, id string, body []byte, tooLarge bool) *api.Error {
	if tooLarge {
		return r.deliver(p, id, nil, len(body), true)
	}
	a, aerr := decodeAnswer(body)
	if aerr != nil {
		return aerr
	}
	return r.deliver(p, id, a, len(body), false)
}

// decodeAnswer reads a ToolAnswer: one JSON object with exactly one of
// result and error, the result valid JSON nested at most 64 deep (the
// runner's decoder's bound).
func decodeAnswer(body []byte) (*api.ToolAnswer, *api.Error) {
	if !utf8.Valid(body) {
		// The runner reads only UTF-8 frames.
		return nil, api.Errorf(api.ErrBadRequest, "", "an answer is UTF-8 JSON")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		return nil, api.Errorf(api.ErrBadRequest, "", `an answer is a JSON object: {"result": VALUE} or {"error": "message"}`)
	}
	for k := range fields {
		if k != "result" && k != "error" {
			return nil, api.Errorf(api.ErrBadRequest, k, "unknown field; an answer has result or error")
		}
	}
	res, hasResult := fields["result"]
	errRaw, hasError := fields["error"]
	if hasResult == hasError {
		return nil, api.Errorf(api.ErrBadRequest, "", `an answer has exactly one of result and error: {"result": VALUE} or {"error": "message"}`)
	}
	a := &api.ToolAnswer{}
	if hasError {
		var msg string
		if json.Unmarshal(errRaw, &msg) != nil {
			return nil, api.Errorf(api.ErrBadRequest, "error", "must be a string")
		}
		a.Error = &msg
		return a, nil
	}
	// As deep as anything the runner itself sends.
	if d := wire.JSONDepth(res); d > runner.MaxJSONDepth {
		return nil, api.Errorf(api.ErrBadRequest, "result", "nests %d deep; the most is %d", d, runner.MaxJSONDepth)
	}
	var b bytes.Buffer
	if json.Compact(&b, res) != nil {
		return nil, api.Errorf(api.ErrBadRequest, "result", "is not JSON")
	}
	a.Result = b.Bytes()
	return a, nil
}
