package servertest

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/toolrelay"
)

// A run that declares tools gets a stand-in for its jail's side of the
// tool relay: CallTool sends a tool_call frame to the server's real relay,
// which checks it and streams it to the caller, and waits for the
// tool_result frame the relay replies with.

// jails are the stand-in jails of the runs in progress, by their request
// (the one the RunFunc gets).
var jails sync.Map // *api.RunRequest → *fakeJail

// fakeJail is the jail's side of one run's relay.
type fakeJail struct {
	relay   *toolrelay.Relay
	mu      sync.Mutex
	seq     int
	waiting map[string]chan toolResult
}

type toolResult struct {
	OK     bool            `json:"ok"`
	ID     string          `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  string          `json:"error"`
}

// withTools starts the stand-in jail of the relay r of the run of req, if
// it has one; stop stops the relay as the jail does when its channel ends.
func withTools(req *api.RunRequest, r *toolrelay.Relay) (stop func()) {
	if r == nil {
		return func() {}
	}
	j := &fakeJail{relay: r, waiting: map[string]chan toolResult{}}
	r.Start(j.reply)
	jails.Store(req, j)
	return func() {
		jails.Delete(req)
		r.Stop()
	}
}

func (j *fakeJail) reply(frame []byte) {
	n := binary.BigEndian.Uint32(frame)
	var m toolResult
	if json.Unmarshal(frame[4:4+n], &m) != nil {
		return
	}
	j.mu.Lock()
	ch := j.waiting[m.ID]
	delete(j.waiting, m.ID)
	j.mu.Unlock()
	if ch != nil {
		ch <- m
	}
}

// ToolError is what the code's cellblock.ToolError would say.
type ToolError struct{ Message string }

func (e *ToolError) Error() string { return e.Message }

// CallTool makes a call of the code of the run of req (the request the
// RunFunc got) to tool name with arguments (marshalled to a JSON object),
// for a RunFunc whose run declares tools. It returns the result, or a
// *ToolError with what the code would be told (the relay's refusal, the
// caller's error, a timeout), or ctx's error.
func CallTool(ctx context.Context, req *api.RunRequest, name string, arguments any) (json.RawMessage, error) {
	v, _ := jails.Load(req)
	j, _ := v.(*fakeJail)
	if j == nil {
		return nil, errors.New("servertest: CallTool in a run without tools")
	}
	args, err := json.Marshal(arguments)
	if err != nil {
		return nil, err
	}
	j.mu.Lock()
	j.seq++
	id := fmt.Sprintf("c%d", j.seq)
	ch := make(chan toolResult, 1)
	j.waiting[id] = ch
	j.mu.Unlock()
	frame, _ := json.Marshal(map[string]any{"type": "tool_call", "id": id, "name": name, "arguments": json.RawMessage(args)})
	j.relay.Call(frame)
	select {
	case m := <-ch:
		if !m.OK {
			return nil, &ToolError{Message: m.Error}
		}
		return m.Result, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// toolsConfig is the server's configuration of tool calls for info's
// caps: the daemon's defaults when info has none.
func toolsConfig(caps *api.ToolCaps) toolrelay.Config {
	cfg := toolrelay.DefaultConfig()
	if caps != nil {
		cfg.Defaults, cfg.Maxima = caps.Defaults, caps.Maxima
	}
	return cfg
}
