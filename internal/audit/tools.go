package audit

import (
	"encoding/json"

	"github.com/cellblock/cellblock/internal/record"
)

// ToolCall is one tool call of a run in its audit line: which tool, how it
// ended, how long it took, and the size and SHA-256 of its arguments and
// of the caller's answer (its result, or its error message). The content
// itself only with Config.IncludeToolContent.
type ToolCall struct {
	// ID is the call's id as the caller saw it; absent for a call the
	// daemon refused before the caller heard of it.
	ID       string `json:"id,omitempty"`
	Name     string `json:"name"`
	Declared bool   `json:"declared"`
	// Outcome is ok, error, refused, timeout, too_large or canceled.
	Outcome string `json:"outcome"`
	// Reason is the daemon's: why it refused or failed the call.
	Reason         string `json:"reason,omitempty"`
	DurationMs     int64  `json:"duration_ms"`
	ArgumentBytes  int    `json:"argument_bytes"`
	ArgumentSHA256 string `json:"argument_sha256,omitempty"`
	ResultBytes    int    `json:"result_bytes"`
	ResultSHA256   string `json:"result_sha256,omitempty"`

	Arguments json.RawMessage `json:"arguments,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     string          `json:"error,omitempty"`
}

func toolCalls(recs []record.ToolCall, content bool) []ToolCall {
	if len(recs) == 0 {
		return nil
	}
	out := make([]ToolCall, 0, len(recs))
	for _, r := range recs {
		c := ToolCall{ID: r.ID, Name: r.Name, Declared: r.Declared, Outcome: r.Outcome, Reason: r.Reason,
			DurationMs: r.Duration.Milliseconds(), ArgumentBytes: r.ArgumentBytes, ArgumentSHA256: r.ArgumentSHA256,
			ResultBytes: r.ResultBytes, ResultSHA256: r.ResultSHA256}
		if content {
			c.Arguments, c.Result, c.Error = r.Arguments, r.Result, r.Error
		}
		out = append(out, c)
	}
	return out
}

// WithToolContent puts the arguments and answers of rec's tool calls into
// e, which NewEntry made from rec.
func (e *Entry) WithToolContent(rec record.Run) { e.ToolCalls = toolCalls(rec.ToolCalls, true) }
