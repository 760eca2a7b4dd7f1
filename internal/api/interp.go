package api

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/cellblock/cellblock/nsjail/runner/wire"
)

// Run modes (RunRequest.Mode).
const (
	// ModeScript runs the code exactly as `python FILE args` would.
	ModeScript = "script"
	// ModeCell runs the code like a notebook cell: the value of a final
	// expression comes back as the result's Value.
	ModeCell = "cell"
)

// Bounds of a request's inputs.
const (
	MaxInputs      = 64
	MaxInputsBytes = 1 << 20
	// MaxInputDepth bounds how deep an input's JSON nests.
	MaxInputDepth = 64
)

// Value is the value of a cell's final expression.
type Value struct {
	// Type is the value's type name ("int", "DataFrame").
	Type string `json:"type"`
	// Repr is its repr(), capped.
	Repr string `json:"repr"`
	// JSON is the value itself when it is JSON-serialisable (within a
	// cap); absent otherwise.
	JSON json.RawMessage `json:"json,omitempty"`
}

// Exception is an uncaught exception as data.
type Exception struct {
	// Type is the exception's class, qualified by its module outside the
	// builtins ("ZeroDivisionError", "json.decoder.JSONDecodeError").
	Type    string `json:"type"`
	Message string `json:"message"`
	// Traceback is what Python printed to stderr, capped.
	Traceback string `json:"traceback"`
	// Line is the line of the user's code it was raised on, when known.
	Line *int `json:"line"`
}

// DisplayItem is one piece of rich output in Jupyter's MIME-bundle shape:
// Data maps a MIME type to its content, a string (base64 for binary types
// such as image/png) or, for application/json, any JSON value. text/plain
// is always there.
type DisplayItem struct {
	Data map[string]json.RawMessage `json:"data"`
	// Metadata says, under "cellblock", what was dropped from the item
	// and why (a MIME type over a cap, an image that was not one).
	Metadata map[string]json.RawMessage `json:"metadata,omitempty"`
}

// DisplayNotesKey is the key of a DisplayItem's Metadata that holds its
// DisplayNotes.
const DisplayNotesKey = "cellblock"

// DisplayNotes is what the sandbox says about one display item, under
// Metadata[DisplayNotesKey].
type DisplayNotes struct {
	// Dropped lists the content left out of the item, one entry each.
	Dropped []Dropped `json:"dropped,omitempty"`
	// DroppedItems, on the last item of a run's display only, counts the
	// items dropped whole past the run's caps; the item's text/plain says
	// so too.
	DroppedItems int64 `json:"dropped_items,omitempty"`
}

// Dropped is one piece of content left out of a display item.
type Dropped struct {
	// MIME is the MIME type left out ("metadata" for the item's metadata,
	// "*" for an item that could not be read at all).
	MIME string `json:"mime"`
	// Bytes is the size of what was left out, as it was sent.
	Bytes int64 `json:"bytes"`
	// Reason says why ("item over display_item_bytes (1048576)").
	Reason string `json:"reason"`
}

// identifier is a Python identifier in ASCII (inputs become globals).
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// pythonKeywords cannot be bound as globals.
var pythonKeywords = map[string]bool{
	"False": true, "None": true, "True": true, "and": true, "as": true, "assert": true,
	"async": true, "await": true, "break": true, "class": true, "continue": true, "def": true,
	"del": true, "elif": true, "else": true, "except": true, "finally": true, "for": true,
	"from": true, "global": true, "if": true, "import": true, "in": true, "is": true,
	"lambda": true, "nonlocal": true, "not": true, "or": true, "pass": true, "raise": true,
	"return": true, "try": true, "while": true, "with": true, "yield": true,
}

// validateInterp checks mode and inputs.
func (r *RunRequest) validateInterp() *Error {
	switch r.Mode {
	case "", ModeScript, ModeCell:
	default:
		return Errorf(ErrBadRequest, "mode", "%q is not %q or %q", r.Mode, ModeScript, ModeCell)
	}
	if len(r.Inputs) > MaxInputs {
		return Errorf(ErrBadRequest, "inputs", "has %d entries; the maximum is %d", len(r.Inputs), MaxInputs)
	}
	size := 0
	for _, name := range sortedKeys(r.Inputs) {
		v := r.Inputs[name]
		field := "inputs." + name
		if !identifier.MatchString(name) || pythonKeywords[name] || strings.HasPrefix(name, "__") {
			return Errorf(ErrBadRequest, "inputs", "%q is not a name a global can have (a Python identifier, not a keyword, not __dunder)", name)
		}
		size += len(name) + len(v)
		if size > MaxInputsBytes {
			return Errorf(ErrTooLarge, "inputs", "are more than %d bytes", MaxInputsBytes)
		}
		if !json.Valid(v) {
			return Errorf(ErrBadRequest, field, "is not JSON")
		}
		if d := wire.JSONDepth(v); d > MaxInputDepth {
			return Errorf(ErrBadRequest, field, "nests %d deep; the maximum is %d", d, MaxInputDepth)
		}
	}
	return nil
}

// String is a short form for logs.
func (e *Exception) String() string { return fmt.Sprintf("%s: %s", e.Type, e.Message) }
