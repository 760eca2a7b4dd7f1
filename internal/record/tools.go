package record

import (
	"encoding/json"
	"time"
)

// ToolCall is what the daemon keeps of one tool call of a run (see
// package toolrelay): the audit log writes it, the metrics count it.
// Everything in it that came from the jail is bounded and validated.
type ToolCall struct {
	// ID is the call's id as its caller saw it; "" for a call refused
	// before it reached the caller.
	ID string
	// Name is the tool the code called: a declared name, or for a refused
	// call what the jail sent, cut to printable ASCII of bounded length.
	Name string
	// Declared: Name is one of the run's tools.
	Declared bool
	// Outcome is one of api's Tool* outcomes.
	Outcome string
	// Reason says why the daemon refused or failed the call; never the
	// caller's own words.
	Reason   string
	Started  time.Time
	Duration time.Duration
	// ArgumentBytes and ArgumentSHA256 describe the arguments as the jail
	// sent them; ResultBytes and ResultSHA256 the caller's answer (its
	// result, or its error message), when one came.
	ArgumentBytes  int
	ArgumentSHA256 string
	ResultBytes    int
	ResultSHA256   string
	// Error is the caller's error message (cut to api.MaxToolError), for
	// a call it answered with one: content, which the audit log writes
	// only when asked to.
	Error string
	// Arguments and Result are the content itself, kept only when the
	// operator asked for it (cellblockd --audit-tool-content).
	Arguments json.RawMessage
	Result    json.RawMessage
}
