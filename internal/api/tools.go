package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/cellblock/cellblock/nsjail/runner/wire"
)

// The tool bridge: a run that declares Tools may call them from its code
// as cellblock.tools.NAME(**arguments). The daemon streams each call to
// the run's caller as an Event with a ToolCall, and the caller answers it
// with POST ToolCallPath(run, call) and a ToolAnswer. The daemon only
// relays: it checks the name, the arguments (against InputSchema) and the
// caps (ToolLimits), and counts the time.

// PathToolCalls is the pattern of the route that answers a tool call:
// POST with a ToolAnswer.
const PathToolCalls = PathRuns + "/{run}/tool_calls/{call}"

// ToolCallPath is the path that answers call of run.
func ToolCallPath(run, call string) string {
	return PathRuns + "/" + run + "/tool_calls/" + call
}

// Bounds of a request's tools that do not depend on the daemon's
// configuration.
const (
	MaxTools = 256
	// MaxToolName bounds a tool's name: an ASCII identifier.
	MaxToolName = wire.MaxToolName
	// MaxToolDescription bounds a tool's description, in bytes.
	MaxToolDescription = 16 << 10
	// MaxToolSchema bounds one input schema, encoded, and MaxToolSchemaDepth
	// how deep it nests.
	MaxToolSchema      = 256 << 10
	MaxToolSchemaDepth = 32
	// MaxToolSchemasBytes bounds a request's input schemas together.
	MaxToolSchemasBytes = 1 << 20
	// MaxToolError bounds the error message of a failed call, in bytes;
	// a longer one is cut.
	MaxToolError = 4096
)

// ToolLimits are a run's caps on its tool calls. In a request, zero
// fields take the daemon's defaults; a field above the daemon's maximum
// is refused with over_limit naming it.
type ToolLimits struct {
	// Calls is the most calls the run may make; later ones fail in the
	// jail without reaching the caller.
	Calls int64 `json:"calls,omitempty"`
	// ArgumentBytes bounds one call's arguments, encoded as JSON.
	ArgumentBytes int64 `json:"argument_bytes,omitempty"`
	// ResultBytes bounds one answer's result, encoded as JSON.
	ResultBytes int64 `json:"result_bytes,omitempty"`
	// TimeoutMs is how long a call waits for its answer; then it fails in
	// the jail and the run goes on. The run's own timeout bounds the
	// whole run, its tool calls included.
	TimeoutMs int64 `json:"timeout_ms,omitempty"`
}

// ToolCaps are the daemon's defaults and maxima of ToolLimits, in Info.
type ToolCaps struct {
	Defaults ToolLimits `json:"defaults"`
	Maxima   ToolLimits `json:"maxima"`
}

// ToolCall is one call of a run's code to a tool, as its caller gets it
// (Event.ToolCall).
type ToolCall struct {
	// ID names the call in ToolCallPath: random, valid for one answer.
	ID   string `json:"id"`
	Name string `json:"name"`
	// Arguments is a JSON object that passed the tool's input schema.
	Arguments json.RawMessage `json:"arguments"`
	// TimeoutMs is how long the daemon waits for the answer.
	TimeoutMs int64 `json:"timeout_ms"`
}

// ToolAnswer is the body of POST ToolCallPath: exactly one of Result (any
// JSON value, null included) and Error.
type ToolAnswer struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *string         `json:"error,omitempty"`
}

// Outcomes of a tool call (ToolCallReport.Outcome).
const (
	// ToolOK: the caller answered with a result.
	ToolOK = "ok"
	// ToolErrored: the caller answered with an error.
	ToolErrored = "error"
	// ToolRefused: the daemon refused the call without asking the caller
	// (a name the run did not declare, arguments that fail its schema or
	// are over the cap, a malformed call).
	ToolRefused = "refused"
	// ToolTimeout: no answer came within the call's timeout.
	ToolTimeout = "timeout"
	// ToolTooLarge: the answer was over result_bytes.
	ToolTooLarge = "too_large"
	// ToolCanceled: the run ended (or its caller went away) first.
	ToolCanceled = "canceled"
)

// ToolCallReport is one call of a run, in Result.ToolCalls.
type ToolCallReport struct {
	Name       string `json:"name"`
	DurationMs int64  `json:"duration_ms"`
	OK         bool   `json:"ok"`
	// Outcome is one of the Tool* outcomes.
	Outcome string `json:"outcome"`
	// Error is what the code's ToolError said, when the call failed.
	Error string `json:"error,omitempty"`
}

// toolName is what a tool may be called: cellblock.tools.NAME.
var toolName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]*$`)

// ValidToolName reports whether name may name a tool.
func ValidToolName(name string) bool {
	return len(name) <= MaxToolName && toolName.MatchString(name) && !pythonKeywords[name]
}

// validateTools checks the request's tools and tool_limits.
func (r *RunRequest) validateTools() *Error {
	if r.ToolLimits != nil && len(r.Tools) == 0 {
		return Errorf(ErrBadRequest, "tool_limits", "is for a run that declares tools")
	}
	if len(r.Tools) > MaxTools {
		return Errorf(ErrBadRequest, "tools", "has %d entries; the maximum is %d", len(r.Tools), MaxTools)
	}
	seen := make(map[string]bool, len(r.Tools))
	schemaBytes := 0
	for i, t := range r.Tools {
		field := fmt.Sprintf("tools[%d]", i)
		if !ValidToolName(t.Name) {
			return Errorf(ErrBadRequest, field+".name", "%.140q is not a tool name: an ASCII identifier of at most %d characters that starts with a letter and is no Python keyword", t.Name, MaxToolName)
		}
		if seen[t.Name] {
			return Errorf(ErrBadRequest, field+".name", "%q is declared twice", t.Name)
		}
		seen[t.Name] = true
		if len(t.Description) > MaxToolDescription {
			return Errorf(ErrTooLarge, field+".description", "is %d bytes; the maximum is %d", len(t.Description), MaxToolDescription)
		}
		if !utf8.ValidString(t.Description) || strings.IndexByte(t.Description, 0) >= 0 {
			return Errorf(ErrBadRequest, field+".description", "must be UTF-8 text without NUL bytes")
		}
		if len(t.InputSchema) == 0 || bytes.Equal(t.InputSchema, []byte("null")) {
			continue
		}
		if len(t.InputSchema) > MaxToolSchema {
			return Errorf(ErrTooLarge, field+".input_schema", "is %d bytes; the maximum is %d", len(t.InputSchema), MaxToolSchema)
		}
		if schemaBytes += len(t.InputSchema); schemaBytes > MaxToolSchemasBytes {
			return Errorf(ErrTooLarge, field+".input_schema", "takes the request's input schemas past %d bytes together", MaxToolSchemasBytes)
		}
		if !json.Valid(t.InputSchema) {
			return Errorf(ErrBadRequest, field+".input_schema", "is not JSON")
		}
		if s := bytes.TrimSpace(t.InputSchema); s[0] != '{' && !bytes.Equal(s, []byte("true")) {
			return Errorf(ErrBadRequest, field+".input_schema", "must be a JSON Schema object")
		}
		if d := wire.JSONDepth(t.InputSchema); d > MaxToolSchemaDepth {
			return Errorf(ErrBadRequest, field+".input_schema", "nests %d deep; the maximum is %d", d, MaxToolSchemaDepth)
		}
	}
	if l := r.ToolLimits; l != nil {
		for _, f := range []struct {
			name string
			v    int64
		}{
			{"tool_limits.calls", l.Calls}, {"tool_limits.argument_bytes", l.ArgumentBytes},
			{"tool_limits.result_bytes", l.ResultBytes}, {"tool_limits.timeout_ms", l.TimeoutMs},
		} {
			if f.v < 0 {
				return Errorf(ErrBadRequest, f.name, "must not be negative")
			}
		}
	}
	return nil
}

// Resolve fills l's unset fields from def and refuses any above max (a
// request's tool_limits; nil takes def).
func (l *ToolLimits) Resolve(def, max ToolLimits) (ToolLimits, *Error) {
	out := def
	if l == nil {
		return out, nil
	}
	for _, f := range []struct {
		name       string
		asked, max int64
		dst        *int64
	}{
		{"tool_limits.calls", l.Calls, max.Calls, &out.Calls},
		{"tool_limits.argument_bytes", l.ArgumentBytes, max.ArgumentBytes, &out.ArgumentBytes},
		{"tool_limits.result_bytes", l.ResultBytes, max.ResultBytes, &out.ResultBytes},
		{"tool_limits.timeout_ms", l.TimeoutMs, max.TimeoutMs, &out.TimeoutMs},
	} {
		if f.asked == 0 {
			continue
		}
		if f.asked > f.max {
			return out, Errorf(ErrOverLimit, f.name, "%d is above the daemon's maximum of %d", f.asked, f.max)
		}
		*f.dst = f.asked
	}
	return out, nil
}

// ToolAnswered is the reply to an answer the daemon took.
type ToolAnswered struct {
	ID       string `json:"id"`
	Answered bool   `json:"answered"`
}
