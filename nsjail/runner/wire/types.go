package wire

import "encoding/json"

// Value is the value of a cell's final expression: the result's "value".
type Value struct {
	// Type is the value's type name ("int", "DataFrame").
	Type string `json:"type"`
	// Repr is its repr(), capped.
	Repr string `json:"repr"`
	// JSON is the value itself when it is JSON-serialisable (within a
	// cap); absent otherwise.
	JSON json.RawMessage `json:"json,omitempty"`
}

// Exception is an uncaught exception as data: the result's "exception".
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

// String is a short form for logs.
func (e *Exception) String() string { return e.Type + ": " + e.Message }

// DisplayItem is one piece of rich output in Jupyter's MIME-bundle shape,
// an element of the result's "display": Data maps a MIME type to its
// content, a string (base64 for binary types such as image/png) or, for
// application/json, any JSON value. text/plain is always there.
type DisplayItem struct {
	Data map[string]json.RawMessage `json:"data"`
	// Metadata says, under DisplayNotesKey, what was dropped from the
	// item and why (a MIME type over a cap, an image that was not one).
	Metadata map[string]json.RawMessage `json:"metadata,omitempty"`
}

// Text returns the string content of mime in the item (base64 for
// images).
func (it DisplayItem) Text(mime string) (string, bool) {
	raw, ok := it.Data[mime]
	if !ok {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
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

// MaxToolName bounds a tool's name: the API refuses a longer one, and the
// runner's tool_call frames may not carry one.
const MaxToolName = 128

// Tool is one host tool a run's code may call: in the run request, and in
// the runner's run message.
type Tool struct {
	// Name is how the code calls it: cellblock.tools.NAME. An ASCII
	// identifier that is no Python keyword and does not start with "_".
	Name string `json:"name"`
	// Description is the tool's docstring in the jail.
	Description string `json:"description,omitempty"`
	// InputSchema is a JSON Schema that the call's arguments (a JSON
	// object) must pass; absent means any object.
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
}
