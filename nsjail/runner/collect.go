package runner

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"unicode/utf8"

	"github.com/cellblock/cellblock/nsjail/runner/wire"
)

// Result is what the Collector made of one run's messages. All of it comes
// from the jail: validated, but to be shown, not believed.
type Result struct {
	// Started: the runner said it started the code.
	Started bool
	// Done and ExitCode: the runner's done message, if any. The exit code
	// that counts is the process's; this one is informative.
	Done     bool
	ExitCode *int
	// Exit is the status of the runner's last exit message, if one came:
	// the process is ending with it, its output and channel closed.
	Exit *int
	// Value, Exception and Display are the result's fields.
	Value     *wire.Value
	Exception *wire.Exception
	Display   []wire.DisplayItem
	// Notes says what was dropped or replaced and why, for the daemon's log.
	Notes []string
}

// maxNotes bounds Result.Notes; the last note counts the rest.
const maxNotes = 32

// maxDropped bounds one item's metadata.cellblock.dropped list.
const maxDropped = 32

// textMIME are the MIME types whose content is a string; binaryMIME those
// whose content is base64 with the given signature.
var (
	textMIME = map[string]bool{
		"text/plain": true, "text/html": true, "text/markdown": true,
		"text/latex": true, "image/svg+xml": true,
	}
	binaryMIME = map[string][]byte{
		"image/png":  []byte("\x89PNG\r\n\x1a\n"),
		"image/jpeg": {0xff, 0xd8, 0xff},
	}
)

const jsonMIME = "application/json"

// Collector validates the runner's messages for one run. Not safe for
// concurrent use.
type Collector struct {
	// OnStarted, when set, is called once, when the started message arrives.
	OnStarted func()
	// OnToolCall, when set, is given the payload of every tool_call frame
	// (valid until it returns); without it they are ignored.
	OnToolCall func(payload []byte)

	limits        Limits
	res           Result
	total         int64 // bytes of the kept display items
	droppedItems  int64 // items the Collector refused
	runnerDropped int64 // items the runner said it dropped
	moreNotes     int
}

// NewCollector returns a Collector for a run with these limits, which
// should have passed Validate.
func NewCollector(l Limits) *Collector {
	return &Collector{limits: l}
}

// Collect reads frames from r until it ends, handing each to Handle. It
// returns nil when the stream ends (also inside a frame) and the read
// error otherwise. Oversized frames and garbage are skipped with a note
// and reading goes on, so a flooding program never stalls on the channel.
func (c *Collector) Collect(r io.Reader) error {
	f := NewFrameReader(r, c.limits.FrameBytes)
	for {
		payload, err := f.Next()
		switch {
		case err == nil:
			c.Handle(payload)
		case errors.Is(err, ErrFrameTooLarge):
			c.note("frame skipped: %v", err)
		case errors.Is(err, io.EOF):
			return nil
		case errors.Is(err, io.ErrUnexpectedEOF):
			c.note("channel ended inside a frame")
			return nil
		default:
			return fmt.Errorf("read runner channel: %w", err)
		}
	}
}

// Handle takes one frame's payload.
func (c *Collector) Handle(payload []byte) {
	t, err := messageType(payload)
	if err != nil {
		c.note("frame skipped: %v", err)
		return
	}
	switch t {
	case TypeStarted:
		if !c.res.Started {
			c.res.Started = true
			if c.OnStarted != nil {
				c.OnStarted()
			}
		}
	case TypeDisplay:
		c.display(payload)
	case TypeValue:
		c.value(payload)
	case TypeException:
		c.exception(payload)
	case TypeDone:
		c.done(payload)
	case TypeExit:
		c.exit(payload)
	case TypeToolCall:
		if c.OnToolCall != nil {
			c.OnToolCall(payload)
		}
	default:
		// ready again, or a later version's messages: ignored.
	}
}

// Result returns what was collected. When display items were dropped, the
// last item is a text/plain note that says how many.
func (c *Collector) Result() Result {
	r := c.res
	r.Display = append([]wire.DisplayItem(nil), c.res.Display...)
	if n := c.droppedItems + c.runnerDropped; n > 0 {
		text := fmt.Sprintf("[cellblock: %d more display items dropped: a run keeps at most %d items and %d bytes of them]",
			n, c.limits.DisplayItems, c.limits.DisplayTotalBytes)
		r.Display = append(r.Display, wire.DisplayItem{
			Data:     map[string]json.RawMessage{"text/plain": mustJSON(text)},
			Metadata: map[string]json.RawMessage{wire.DisplayNotesKey: mustJSON(wire.DisplayNotes{DroppedItems: n})},
		})
	}
	if c.moreNotes > 0 {
		r.Notes = append(append([]string(nil), r.Notes...), fmt.Sprintf("and %d more notes", c.moreNotes))
	}
	return r
}

func (c *Collector) note(format string, args ...any) {
	if len(c.res.Notes) >= maxNotes {
		c.moreNotes++
		return
	}
	c.res.Notes = append(c.res.Notes, capString(fmt.Sprintf(format, args...), 512, false))
}

func (c *Collector) done(payload []byte) {
	var m struct {
		Type           string `json:"type"`
		ExitCode       int    `json:"exit_code"`
		DisplayDropped int64  `json:"display_dropped"`
	}
	if err := decodeStrict(payload, &m, true); err != nil {
		c.note("done message: %v", err)
		return
	}
	if c.res.Done {
		c.note("done message again: ignored")
		return
	}
	c.res.Done = true
	if m.ExitCode >= 0 && m.ExitCode <= 255 {
		code := m.ExitCode
		c.res.ExitCode = &code
	}
	if m.DisplayDropped > 0 && m.DisplayDropped <= 1<<31 {
		c.runnerDropped = m.DisplayDropped
	}
}

// exit takes the runner's last message: the exit status its process is
// ending with, its standard output and error closed, the channel closing
// next. Like every frame it may be forged by the program, which could exit
// with any status anyway; the last one counts.
func (c *Collector) exit(payload []byte) {
	var m struct {
		Type     string `json:"type"`
		ExitCode int    `json:"exit_code"`
	}
	if err := decodeStrict(payload, &m, true); err != nil || m.ExitCode < 0 || m.ExitCode > 255 {
		c.note("exit message: not a status from 0 to 255: %v", err)
		return
	}
	code := m.ExitCode
	c.res.Exit = &code // the last one counts: the runner's is its last frame
}

func (c *Collector) value(payload []byte) {
	var m struct {
		Type  string `json:"type"`
		Value struct {
			Type string          `json:"type"`
			Repr string          `json:"repr"`
			JSON json.RawMessage `json:"json"`
		} `json:"value"`
	}
	if c.res.Value != nil {
		c.note("value message again: ignored")
		return
	}
	if err := decodeStrict(payload, &m, true); err != nil {
		c.note("value message: %v", err)
		c.res.Value = &wire.Value{Type: "?", Repr: "[cellblock: the value could not be read]"}
		return
	}
	v := &wire.Value{Type: c.typeName(m.Value.Type, "value"), Repr: c.capField(m.Value.Repr, c.limits.ReprBytes, false, "value.repr")}
	if j := validText(m.Value.JSON); len(j) > 0 {
		if ok, why := jsonOK(j, c.limits.JSONBytes); ok {
			v.JSON = append(json.RawMessage(nil), j...)
		} else {
			c.note("value.json dropped: %s", why)
		}
	}
	c.res.Value = v
}

func (c *Collector) exception(payload []byte) {
	var m struct {
		Type      string `json:"type"`
		Exception struct {
			Type      string `json:"type"`
			Message   string `json:"message"`
			Traceback string `json:"traceback"`
			Line      *int64 `json:"line"`
		} `json:"exception"`
	}
	if c.res.Exception != nil {
		c.note("exception message again: ignored")
		return
	}
	if err := decodeStrict(payload, &m, true); err != nil {
		c.note("exception message: %v", err)
		c.res.Exception = &wire.Exception{Type: "?", Message: "[cellblock: the exception could not be read]"}
		return
	}
	e := m.Exception
	x := &wire.Exception{
		Type:      c.typeName(e.Type, "exception"),
		Message:   c.capField(e.Message, c.limits.MessageBytes, false, "exception.message"),
		Traceback: c.capField(e.Traceback, c.limits.TracebackBytes, true, "exception.traceback"),
	}
	if e.Line != nil && *e.Line >= 1 && *e.Line <= 1<<31 {
		line := int(*e.Line)
		x.Line = &line
	}
	c.res.Exception = x
}

func (c *Collector) typeName(s, what string) string {
	if s == "" {
		return "?"
	}
	return c.capField(s, typeBytes, false, what+".type")
}

func (c *Collector) capField(s string, n int, keepTail bool, what string) string {
	if len(s) <= n {
		return s
	}
	c.note("%s cut from %d to %d bytes", what, len(s), n)
	return capString(s, n, keepTail)
}

func (c *Collector) display(payload []byte) {
	var m struct {
		Type     string                     `json:"type"`
		Data     map[string]json.RawMessage `json:"data"`
		Metadata json.RawMessage            `json:"metadata"`
	}
	var dropped []wire.Dropped
	if err := decodeStrict(payload, &m, true); err != nil {
		c.note("display message: %v", err)
		m.Data = nil
		dropped = append(dropped, wire.Dropped{MIME: "*", Bytes: int64(len(payload)), Reason: "display message could not be read"})
	}
	l := c.limits
	it := wire.DisplayItem{Data: map[string]json.RawMessage{}}
	var size int64
	mimes := make([]string, 0, len(m.Data))
	for k := range m.Data {
		mimes = append(mimes, k)
	}
	sort.Strings(mimes)
	plain := ""
	hasPlain := false
	for _, mime := range mimes {
		raw := validText(m.Data[mime])
		if mime == "text/plain" {
			var s string
			if json.Unmarshal(raw, &s) == nil {
				plain, hasPlain = s, true
			} else {
				dropped = append(dropped, wire.Dropped{MIME: mime, Bytes: int64(len(raw)), Reason: "not a string"})
			}
			continue
		}
		n, why := checkContent(mime, raw, l)
		if why != "" {
			if len(dropped) < maxDropped {
				dropped = append(dropped, wire.Dropped{MIME: capString(mime, 255, false), Bytes: int64(len(raw)), Reason: why})
			}
			continue
		}
		it.Data[mime] = append(json.RawMessage(nil), raw...)
		size += n
	}
	if !hasPlain {
		plain = "[cellblock: no text/plain]"
	}
	if len(plain) > l.ReprBytes {
		dropped = append(dropped, wire.Dropped{MIME: "text/plain", Bytes: int64(len(plain)), Reason: fmt.Sprintf("cut to repr_bytes (%d)", l.ReprBytes)})
		plain = capString(plain, l.ReprBytes, false)
	}
	it.Data["text/plain"] = mustJSON(plain)
	plainSize := int64(len(plain))
	size += plainSize
	if size > int64(l.DisplayItemBytes) {
		dropped = keepPlain(it, dropped, fmt.Sprintf("item over display_item_bytes (%d)", l.DisplayItemBytes))
		size = plainSize
	}
	if int64(len(c.res.Display)) >= int64(l.DisplayItems) {
		c.droppedItems++
		return
	}
	if c.total+size > int64(l.DisplayTotalBytes) {
		dropped = keepPlain(it, dropped, fmt.Sprintf("past display_total_bytes (%d)", l.DisplayTotalBytes))
		size = plainSize
		if c.total+size > int64(l.DisplayTotalBytes) {
			c.droppedItems++
			return
		}
	}
	it.Metadata, dropped = c.metadata(m.Metadata, dropped)
	if len(dropped) > 0 {
		if len(dropped) > maxDropped {
			dropped = dropped[:maxDropped]
		}
		it.Metadata[wire.DisplayNotesKey] = mustJSON(wire.DisplayNotes{Dropped: dropped})
	}
	if len(it.Metadata) == 0 {
		it.Metadata = nil
	}
	c.total += size
	c.res.Display = append(c.res.Display, it)
}

// metadata validates an item's metadata: a JSON object within
// MetadataBytes and MaxJSONDepth. The runner's own notes in its "cellblock"
// member are kept when well formed and put before dropped's.
func (c *Collector) metadata(raw json.RawMessage, dropped []wire.Dropped) (map[string]json.RawMessage, []wire.Dropped) {
	md := map[string]json.RawMessage{}
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return md, dropped
	}
	raw = validText(raw)
	if ok, why := jsonOK(raw, MetadataBytes); !ok {
		return md, append(dropped, wire.Dropped{MIME: "metadata", Bytes: int64(len(raw)), Reason: why})
	}
	if json.Unmarshal(raw, &md) != nil {
		return map[string]json.RawMessage{}, append(dropped, wire.Dropped{MIME: "metadata", Bytes: int64(len(raw)), Reason: "not a JSON object"})
	}
	if cb, ok := md[wire.DisplayNotesKey]; ok {
		delete(md, wire.DisplayNotesKey)
		var notes struct {
			Dropped []wire.Dropped `json:"dropped"`
		}
		if decodeStrict(cb, &notes, true) == nil {
			var own []wire.Dropped
			for _, d := range notes.Dropped {
				if len(d.MIME) <= 255 && len(d.Reason) <= 512 && d.Bytes >= 0 {
					own = append(own, d)
				}
			}
			dropped = append(own, dropped...)
		}
	}
	return md, dropped
}

func keepPlain(it wire.DisplayItem, dropped []wire.Dropped, reason string) []wire.Dropped {
	mimes := make([]string, 0, len(it.Data))
	for m := range it.Data {
		mimes = append(mimes, m)
	}
	sort.Strings(mimes)
	for _, m := range mimes {
		if m != "text/plain" {
			dropped = append(dropped, wire.Dropped{MIME: m, Bytes: int64(len(it.Data[m])), Reason: reason})
			delete(it.Data, m)
		}
	}
	return dropped
}

// checkContent checks one MIME type's content in a display item and
// returns its size (as PROTOCOL.md counts it), or why it is refused.
func checkContent(mime string, raw json.RawMessage, l Limits) (int64, string) {
	if !validMIME(mime) {
		return 0, "not a MIME type name"
	}
	if magic, ok := binaryMIME[mime]; ok {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return 0, "not a base64 string"
		}
		if len(s) > l.DisplayItemBytes {
			return 0, fmt.Sprintf("over display_item_bytes (%d)", l.DisplayItemBytes)
		}
		b, err := base64.StdEncoding.Strict().DecodeString(s)
		if err != nil {
			return 0, "not valid base64"
		}
		if !bytes.HasPrefix(b, magic) {
			return 0, "content does not start with the " + mime + " signature"
		}
		return int64(len(s)), ""
	}
	if textMIME[mime] {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return 0, "not a string"
		}
		return int64(len(s)), ""
	}
	if mime == jsonMIME {
		if ok, why := jsonOK(raw, l.DisplayItemBytes); !ok {
			return 0, why
		}
		return int64(len(raw)), ""
	}
	return 0, "MIME type not supported"
}

// validMIME: type/subtype, lower case, RFC 6838's restricted names.
func validMIME(s string) bool {
	slash := -1
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch == '/':
			if slash >= 0 {
				return false
			}
			slash = i
		case 'a' <= ch && ch <= 'z', '0' <= ch && ch <= '9':
		case bytes.IndexByte([]byte("!#$&^_.+-"), ch) >= 0:
			if i == 0 || i == slash+1 {
				return false
			}
		default:
			return false
		}
	}
	return slash > 0 && slash < len(s)-1 && slash <= 127 && len(s)-slash-1 <= 127
}

// jsonOK: raw is valid JSON within max bytes and MaxJSONDepth.
func jsonOK(raw []byte, max int) (bool, string) {
	if len(raw) > max {
		return false, fmt.Sprintf("JSON over %d bytes", max)
	}
	if !json.Valid(raw) {
		return false, "not valid JSON"
	}
	if wire.JSONDepth(raw) > MaxJSONDepth {
		return false, fmt.Sprintf("JSON nested deeper than %d", MaxJSONDepth)
	}
	return true, ""
}

// validText returns raw, a JSON value that the Collector keeps as it came,
// with every escape of a lone surrogate ("\udcff": valid JSON syntax, but
// strict parsers refuse it and no UTF-8 can hold it) replaced by \ufffd,
// as encoding/json does in every string the Collector decodes. The
// daemon's answers are then valid UTF-8 JSON whatever the jail sent: raw
// is UTF-8 already, since messageType refuses frames that are not. raw is
// rewritten in one pass, without decoding it, so that a big value costs
// no more than its copy; what is not JSON is left for the checks to
// refuse.
func validText(raw json.RawMessage) json.RawMessage {
	var out []byte // raw rewritten up to i, once it needs rewriting
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' || i+1 >= len(raw) {
			if out != nil {
				out = append(out, raw[i])
			}
			continue
		}
		n := 2 // the escape's length: kept as it is, unless 0
		if raw[i+1] == 'u' {
			if r, ok := hex4(raw, i+2); ok {
				n = 6
				if r >= 0xd800 && r <= 0xdfff {
					n = 0 // a lone surrogate, unless a high one before a low one
					if r < 0xdc00 && i+12 <= len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' {
						if low, ok := hex4(raw, i+8); ok && low >= 0xdc00 && low <= 0xdfff {
							n = 12
						}
					}
				}
			}
		}
		if n == 0 {
			if out == nil {
				out = append(make([]byte, 0, len(raw)), raw[:i]...)
			}
			out = append(out, `\ufffd`...)
			i += 5
			continue
		}
		if out != nil {
			out = append(out, raw[i:i+n]...)
		}
		i += n - 1
	}
	if out == nil {
		return raw
	}
	return out
}

// hex4 reads the 4 hex digits of a \u escape at raw[i:].
func hex4(raw []byte, i int) (rune, bool) {
	if i+4 > len(raw) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(raw[i:i+4]), 16, 16)
	return rune(n), err == nil
}

// capString cuts s to at most n bytes on a UTF-8 boundary, keeping its
// start (or its end, keepTail), with a marker inside the n bytes.
func capString(s string, n int, keepTail bool) string {
	if len(s) <= n {
		return s
	}
	mark := fmt.Sprintf("[cellblock: cut, %d bytes in all]", len(s))
	keep := n - len(mark) - 1
	if keep < 0 {
		keep, mark = n, ""
	}
	if keepTail {
		i := len(s) - keep
		for i < len(s) && !utf8.RuneStart(s[i]) {
			i++
		}
		if mark == "" {
			return s[i:]
		}
		return mark + "\n" + s[i:]
	}
	i := keep
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	if mark == "" {
		return s[:i]
	}
	return s[:i] + "\n" + mark
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // strings, ints and Dropped lists always encode
	}
	return b
}
