package runner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/cellblock/cellblock/nsjail/runner/wire"
)

// Message types of tool calls (PROTOCOL.md, "Tools").
const (
	// TypeToolCall (runner → daemon): the code calls a tool.
	TypeToolCall = "tool_call"
	// TypeToolResult (daemon → runner): the call's answer.
	TypeToolResult = "tool_result"
)

// Bounds of a tool call's frame.
const (
	// MaxToolCallID bounds the runner's id of a call.
	MaxToolCallID = 64
)

// ToolLimits are what the runner is told of the run's caps on tool calls:
// it refuses arguments over ArgumentBytes itself, and gives up waiting
// for an answer a little after TimeoutMs (the daemon answers by then).
type ToolLimits struct {
	ArgumentBytes int64 `json:"argument_bytes"`
	TimeoutMs     int64 `json:"timeout_ms"`
}

// ToolCall is a tool_call frame from the runner, parsed: untrusted, as
// everything the runner sends. Arguments is a JSON object, as it came.
type ToolCall struct {
	ID        string
	Name      string
	Arguments json.RawMessage
}

// ParseToolCall reads a tool_call frame. A call whose id is usable but
// whose other members are not still returns that id with the error, so
// that the daemon can answer it; an unusable id returns "".
func ParseToolCall(payload []byte) (ToolCall, error) {
	var m struct {
		Type      string          `json:"type"`
		ID        json.RawMessage `json:"id"`
		Name      json.RawMessage `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if !utf8.Valid(payload) {
		return ToolCall{}, fmt.Errorf("%w: tool_call not UTF-8", ErrBadMessage)
	}
	if err := decodeStrict(payload, &m, true); err != nil {
		return ToolCall{}, fmt.Errorf("tool_call: %w", err)
	}
	var c ToolCall
	if json.Unmarshal(m.ID, &c.ID) != nil || !validCallID(c.ID) {
		return ToolCall{}, fmt.Errorf("%w: tool_call id must be 1-%d of [A-Za-z0-9_.-]", ErrBadMessage, MaxToolCallID)
	}
	if json.Unmarshal(m.Name, &c.Name) != nil || c.Name == "" || len(c.Name) > wire.MaxToolName || !printableASCII(c.Name) {
		return ToolCall{ID: c.ID}, fmt.Errorf("%w: tool_call name must be a string of 1-%d printable ASCII characters", ErrBadMessage, wire.MaxToolName)
	}
	args := bytes.TrimSpace(validText(m.Arguments))
	if len(args) == 0 || args[0] != '{' {
		return c, fmt.Errorf("%w: tool_call arguments must be a JSON object", ErrBadMessage)
	}
	if ok, why := jsonOK(args, len(args)); !ok {
		return c, fmt.Errorf("%w: tool_call arguments: %s", ErrBadMessage, why)
	}
	c.Arguments = append(json.RawMessage(nil), args...)
	return c, nil
}

// validCallID: 1 to MaxToolCallID of [A-Za-z0-9_.-].
func validCallID(id string) bool {
	if id == "" || len(id) > MaxToolCallID {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// EncodeToolResult is the tool_result frame answering call id: result (a
// JSON value) when ok, else errText.
func EncodeToolResult(id string, ok bool, result json.RawMessage, errText string) ([]byte, error) {
	m := struct {
		Type   string          `json:"type"`
		ID     string          `json:"id"`
		OK     bool            `json:"ok"`
		Result json.RawMessage `json:"result,omitempty"`
		Error  string          `json:"error,omitempty"`
	}{Type: TypeToolResult, ID: id, OK: ok}
	if ok {
		m.Result = result
		if len(m.Result) == 0 {
			m.Result = json.RawMessage("null")
		}
	} else {
		m.Error = errText
	}
	return encodeFrame(m)
}
