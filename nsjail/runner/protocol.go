package runner

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/cellblock/cellblock/nsjail/runner/wire"
)

// ProtocolVersion is the version of PROTOCOL.md this package speaks.
const ProtocolVersion = 1

const (
	// MaxDaemonFrame is the largest frame the daemon sends (a run message).
	MaxDaemonFrame = 16 << 20
	// ReadyFrameBytes bounds the runner's frames before the run message.
	ReadyFrameBytes = 1 << 20
	// MaxJSONDepth is how deep a JSON value from the runner may nest.
	MaxJSONDepth = 64
	// MetadataBytes bounds a display item's metadata, encoded.
	MetadataBytes = 16384
	// typeBytes bounds a value's or exception's type name.
	typeBytes = 256
)

// Default caps of a run, as in PROTOCOL.md.
const (
	DefaultFrameBytes        = 9 << 20
	DefaultDisplayItems      = 64
	DefaultDisplayItemBytes  = 1 << 20
	DefaultDisplayTotalBytes = 8 << 20
	DefaultReprBytes         = 4096
	DefaultJSONBytes         = 65536
	DefaultMessageBytes      = 4096
	DefaultTracebackBytes    = 65536
)

// Limits are a run's caps on what the runner sends; the runner applies them
// and the Collector checks them again.
type Limits struct {
	// FrameBytes is the largest frame the runner may send.
	FrameBytes int `json:"frame_bytes"`
	// DisplayItems is the most display items one run keeps.
	DisplayItems int `json:"display_items"`
	// DisplayItemBytes bounds one item's data, all its MIME types together
	// (strings as UTF-8, base64 as sent, JSON encoded).
	DisplayItemBytes int `json:"display_item_bytes"`
	// DisplayTotalBytes bounds all the display items of a run together.
	DisplayTotalBytes int `json:"display_total_bytes"`
	// ReprBytes bounds value.repr and every text/plain.
	ReprBytes int `json:"repr_bytes"`
	// JSONBytes bounds value.json, encoded.
	JSONBytes int `json:"json_bytes"`
	// MessageBytes bounds exception.message.
	MessageBytes int `json:"message_bytes"`
	// TracebackBytes bounds exception.traceback.
	TracebackBytes int `json:"traceback_bytes"`
}

// DefaultLimits returns the default caps.
func DefaultLimits() Limits {
	return Limits{
		FrameBytes:        DefaultFrameBytes,
		DisplayItems:      DefaultDisplayItems,
		DisplayItemBytes:  DefaultDisplayItemBytes,
		DisplayTotalBytes: DefaultDisplayTotalBytes,
		ReprBytes:         DefaultReprBytes,
		JSONBytes:         DefaultJSONBytes,
		MessageBytes:      DefaultMessageBytes,
		TracebackBytes:    DefaultTracebackBytes,
	}
}

// ErrInvalidLimits is wrapped by Limits.Validate's errors.
var ErrInvalidLimits = errors.New("invalid runner limits")

// Validate checks that every cap is positive and that a frame can carry
// the largest item, value and exception (escaping in JSON can take six
// bytes for one).
func (l Limits) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{
		{"frame_bytes", l.FrameBytes}, {"display_items", l.DisplayItems},
		{"display_item_bytes", l.DisplayItemBytes}, {"display_total_bytes", l.DisplayTotalBytes},
		{"repr_bytes", l.ReprBytes}, {"json_bytes", l.JSONBytes},
		{"message_bytes", l.MessageBytes}, {"traceback_bytes", l.TracebackBytes},
	} {
		if f.v <= 0 {
			return fmt.Errorf("%w: %s is %d", ErrInvalidLimits, f.name, f.v)
		}
	}
	if l.FrameBytes > 1<<30 {
		return fmt.Errorf("%w: frame_bytes %d over 1 GiB", ErrInvalidLimits, l.FrameBytes)
	}
	if l.FrameBytes < ReadyFrameBytes {
		return fmt.Errorf("%w: frame_bytes %d under %d", ErrInvalidLimits, l.FrameBytes, ReadyFrameBytes)
	}
	return nil
}

// Message types.
const (
	TypeReady     = "ready"
	TypeRun       = "run"
	TypeStarted   = "started"
	TypeDisplay   = "display"
	TypeValue     = "value"
	TypeException = "exception"
	TypeDone      = "done"
	TypeExit      = "exit"
)

// Ready is the runner's first message.
type Ready struct {
	Type     string `json:"type"`
	Protocol int    `json:"protocol"`
	Python   string `json:"python"`
	// PreloadFailed lists the modules of the preload list (EnvPreload)
	// that could not be imported; ReadReady bounds it.
	PreloadFailed []PreloadFailure `json:"preload_failed,omitempty"`
}

// PreloadFailure is one module of the preload list that did not import.
type PreloadFailure struct {
	Module string `json:"module"`
	// Error is "ExceptionType: message", cut to PreloadErrorBytes.
	Error string `json:"error"`
}

// The preload list: the modules a jail built ahead of its run imports
// before its runner says it is ready (PROTOCOL.md, "Preloaded modules").
const (
	// EnvPreload is the runner's environment variable that holds the
	// list, comma-separated; only jails built ahead of their run get it.
	EnvPreload = "CELLBLOCK_RUNNER_PRELOAD"
	// MaxPreload is the most modules in the list; MaxModuleName the
	// longest name (the API's bounds).
	MaxPreload    = 64
	MaxModuleName = 128
	// PreloadErrorBytes bounds a failure's description.
	PreloadErrorBytes = 256
)

// ValidModule reports whether name may be in the preload list: ASCII
// identifiers joined by dots, at most MaxModuleName bytes (so never a
// comma, the list's separator).
func ValidModule(name string) bool {
	if name == "" || len(name) > MaxModuleName {
		return false
	}
	for _, part := range strings.Split(name, ".") {
		if part == "" || part[0] >= '0' && part[0] <= '9' {
			return false
		}
		for _, c := range []byte(part) {
			if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
				return false
			}
		}
	}
	return true
}

// Run is the daemon's run message.
type Run struct {
	Type   string                     `json:"type"` // TypeRun; WriteRun sets it
	Mode   string                     `json:"mode"` // "script" or "cell"
	Code   string                     `json:"code"`
	Argv0  string                     `json:"argv0"` // a path, "-c" or "-"
	Argv   []string                   `json:"argv"`
	Env    map[string]string          `json:"env"`
	Inputs map[string]json.RawMessage `json:"inputs,omitempty"`
	Limits Limits                     `json:"limits"`
	// StdinNull: the program was given no standard input, and gets
	// /dev/null, not the (empty) pipe the runner started with.
	StdinNull bool `json:"stdin_null,omitempty"`
	// Tools the code may call, and the caps the runner applies to them
	// (tools.go); absent for a run without tools.
	Tools      []wire.Tool `json:"tools,omitempty"`
	ToolLimits *ToolLimits `json:"tool_limits,omitempty"`
}

// ErrFrameTooLarge is returned for a frame over the reader's maximum; the
// frame's payload has been skipped, so the stream stays in step.
var ErrFrameTooLarge = errors.New("runner frame too large")

// WriteRun sends the run message on w.
func WriteRun(w io.Writer, m Run) error {
	m.Type = TypeRun
	if m.Argv == nil {
		m.Argv = []string{}
	}
	b, err := marshal(m)
	if err != nil {
		return fmt.Errorf("encode run message: %w", err)
	}
	if len(b) > MaxDaemonFrame {
		return fmt.Errorf("%w: run message of %d bytes", ErrFrameTooLarge, len(b))
	}
	frame := make([]byte, 4+len(b))
	binary.BigEndian.PutUint32(frame, uint32(len(b)))
	copy(frame[4:], b)
	if _, err := w.Write(frame); err != nil {
		return fmt.Errorf("send run message: %w", err)
	}
	return nil
}
