package runner

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/cellblock/cellblock/nsjail/runner/wire"
)

// Message types of sessions (PROTOCOL.md, "Sessions").
const (
	// TypeSession (daemon → runner) starts session mode in place of a run.
	TypeSession = "session"
	// TypeIdle (runner → daemon): the session is set up and waits for runs.
	TypeIdle = "idle"
	// TypeVars (runner → daemon): the session's variables after a run,
	// just before its done.
	TypeVars = "vars"
)

// Bounds on what a session's runner reports about its variables.
const (
	MaxVariables     = 200
	MaxVariableName  = 256
	MaxVariableType  = 256
	MaxVariableRepr  = 256 // the runner sends at most 120 bytes; more is cut
	SessionRunFDs    = 3   // stdin, stdout, stderr, sent with each run
	sessionRunHeader = 4
)

// SessionStart is the daemon's session message: the interpreter's whole
// environment and the caps of what it may send.
type SessionStart struct {
	Type   string            `json:"type"` // TypeSession; EncodeSession sets it
	Env    map[string]string `json:"env"`
	Limits Limits            `json:"limits"`
}

// SessionRun is one run in a session. Its frame carries SessionRunFDs
// descriptors (SCM_RIGHTS): the run's stdin, stdout and stderr.
type SessionRun struct {
	Type     string                     `json:"type"` // TypeRun; EncodeSessionRun sets it
	Seq      int64                      `json:"seq"`
	Mode     string                     `json:"mode"`
	Code     string                     `json:"code"`
	Filename string                     `json:"filename"`
	Inputs   map[string]json.RawMessage `json:"inputs,omitempty"`
	Limits   Limits                     `json:"limits"`
	// Tools and ToolLimits are as in Run.
	Tools      []wire.Tool `json:"tools,omitempty"`
	ToolLimits *ToolLimits `json:"tool_limits,omitempty"`
}

// Variable is one of a session's globals, as its runner reported it.
type Variable struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Repr string `json:"repr"`
}

// EncodeSession returns m as one frame.
func EncodeSession(m SessionStart) ([]byte, error) {
	m.Type = TypeSession
	return encodeFrame(m)
}

// EncodeSessionRun returns m as one frame.
func EncodeSessionRun(m SessionRun) ([]byte, error) {
	m.Type = TypeRun
	return encodeFrame(m)
}

func encodeFrame(m any) ([]byte, error) {
	b, err := marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode runner message: %w", err)
	}
	if len(b) > MaxDaemonFrame {
		return nil, fmt.Errorf("%w: message of %d bytes", ErrFrameTooLarge, len(b))
	}
	frame := make([]byte, sessionRunHeader+len(b))
	binary.BigEndian.PutUint32(frame, uint32(len(b)))
	copy(frame[sessionRunHeader:], b)
	return frame, nil
}

// marshal is json.Marshal without its escapes for HTML: "<", ">" and "&"
// would take 6 bytes each (a 3 MiB string of "<" 18 MiB, over a frame's
// bound), and the runner reads JSON, not HTML.
func marshal(m any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// MessageType returns a frame's "type" (see messageType), for readers of
// a session's frames.
func MessageType(payload []byte) (string, error) { return messageType(payload) }

// Seq returns the "seq" member of a started or vars message; ok is false
// when it has none or it is not an integer.
func Seq(payload []byte) (seq int64, ok bool) {
	var m struct {
		Seq *int64 `json:"seq"`
	}
	if decodeStrict(payload, &m, false) != nil || m.Seq == nil {
		return 0, false
	}
	return *m.Seq, true
}

// ParseVars validates a vars message: at most MaxVariables entries, names
// and types bounded and valid UTF-8, reprs cut to MaxVariableRepr. more
// reports that the runner (or the cut) left variables out.
func ParseVars(payload []byte) (vars []Variable, more bool, err error) {
	var m struct {
		Type      string     `json:"type"`
		Seq       int64      `json:"seq"`
		Vars      []Variable `json:"vars"`
		Truncated bool       `json:"truncated"`
	}
	if err := decodeStrict(payload, &m, true); err != nil {
		return nil, false, fmt.Errorf("vars message: %w", err)
	}
	more = m.Truncated
	if len(m.Vars) > MaxVariables {
		m.Vars, more = m.Vars[:MaxVariables], true
	}
	out := make([]Variable, 0, len(m.Vars))
	for _, v := range m.Vars {
		if v.Name == "" || len(v.Name) > MaxVariableName || len(v.Type) > MaxVariableType ||
			!utf8.ValidString(v.Name) || !utf8.ValidString(v.Type) || !utf8.ValidString(v.Repr) {
			return nil, false, fmt.Errorf("%w: a variable's name, type or repr is malformed", ErrBadMessage)
		}
		v.Repr = capString(v.Repr, MaxVariableRepr, false)
		out = append(out, v)
	}
	return out, more, nil
}
