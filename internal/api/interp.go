package api

import (
	"encoding/json"
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

// The parts of a result that the jail's runner reports, and the tools a
// run declares, are package wire's types: the runner's Collector makes
// them, and the result carries them as they are.
type (
	Value        = wire.Value
	Exception    = wire.Exception
	DisplayItem  = wire.DisplayItem
	DisplayNotes = wire.DisplayNotes
	Dropped      = wire.Dropped
	Tool         = wire.Tool
)

// DisplayNotesKey is the key of a DisplayItem's Metadata that holds its
// DisplayNotes.
const DisplayNotesKey = wire.DisplayNotesKey

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
