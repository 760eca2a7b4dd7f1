// Package pep723 reads PEP 723 inline script metadata: the
// "# /// script" ... "# ///" comment block a Python script may carry to say
// which packages and which Python it needs.
//
// It owns only the parsing and the merging of requirement lists. It does
// not resolve, check or install requirements, and it must not import
// anything that needs privileges or cgo: the unprivileged client and the MCP
// front end use it as well as the daemon.
//
// Block detection follows the reference regular expression of the PEP,
//
//	(?m)^# /// (?P<type>[a-zA-Z0-9-]+)$\s(?P<content>(^#(| .*)$\s)+)^# ///$
//
// line by line: a block opens with a line that is exactly "# /// TYPE",
// holds one or more lines that are "#" alone or "# " followed by anything,
// and closes with the last line that is exactly "# ///" before the run of
// comment lines ends. Blocks of other types are skipped (and, as with the
// regular expression, consume their lines). More than one "script" block
// is an error. Line endings are normalised first ("\r\n" and "\r" become
// "\n"), as Python does when it reads a source file in text mode; content
// lines are split on "\n" only.
package pep723

import (
	"errors"
	"fmt"
	"strings"

	"github.com/BurntSushi/toml"
)

// Metadata is what a script's "script" block asks for.
type Metadata struct {
	// Dependencies are the PEP 508 requirement strings of the
	// "dependencies" key, in the order written.
	Dependencies []string
	// RequiresPython is the PEP 440 specifier of the "requires-python"
	// key, or "" when the key is absent.
	RequiresPython string
	// Present reports whether the script has a "script" block at all.
	Present bool
}

// ErrMetadata is wrapped by every error Parse returns, so callers can tell
// a malformed metadata block from other failures with errors.Is.
var ErrMetadata = errors.New("invalid PEP 723 metadata")

// Error is a problem in a script's metadata block, located by the 1-based
// line of the script it is on.
type Error struct {
	Line int
	Msg  string
}

func (e *Error) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

// Unwrap makes errors.Is(err, ErrMetadata) hold.
func (e *Error) Unwrap() error { return ErrMetadata }

// Bounds on the "script" block, checked before the TOML parser sees it: a
// parser building nested values for a block of a few hundred kilobytes of
// "[[[[..." takes hundreds of megabytes. Real metadata is a few lines.
const (
	// MaxBlockBytes bounds the block's TOML text.
	MaxBlockBytes = 64 << 10
	// MaxNesting bounds how deep the block's values may nest: arrays,
	// inline tables and the tables that dotted keys make.
	MaxNesting = 32
)

// blockType is the only block type this package reads.
const blockType = "script"

// block is one metadata block found in a script.
type block struct {
	typ     string
	open    int      // 0-based index of the "# /// TYPE" line
	content []string // the content lines with their comment prefix removed
}

// Parse finds the script's "script" block, if any, and decodes its TOML.
//
// Only "dependencies" (an array of strings) and "requires-python" (a
// string) are read; other top-level keys are ignored for forward
// compatibility. The "[tool]" table, and with it every "[tool.*]" table
// such as "[tool.uv]", is ignored on purpose: index URLs, find-links and
// similar settings embedded in a script do not decide where packages come
// from. That is the operator's choice, made with the daemon's --index-url,
// --find-links and --no-index flags.
//
// A script without a block gives a zero Metadata and a nil error.
func Parse(code string) (Metadata, error) {
	blocks := findBlocks(code)
	var found *block
	for i := range blocks {
		b := &blocks[i]
		if b.typ != blockType {
			continue
		}
		if found != nil {
			return Metadata{}, &Error{Line: b.open + 1, Msg: fmt.Sprintf(
				"a second '# /// script' block (the first opens on line %d); a script may have only one", found.open+1)}
		}
		found = b
	}
	if found == nil {
		return Metadata{}, nil
	}
	return decode(found)
}

// findBlocks scans the script as the PEP's regular expression does with
// re.finditer: left to right, a match consuming its lines.
func findBlocks(code string) []block {
	code = strings.ReplaceAll(code, "\r\n", "\n")
	code = strings.ReplaceAll(code, "\r", "\n")
	lines := strings.Split(code, "\n")
	// The last element has no newline after it. Every other line does,
	// which the "$\s" of the opening and content lines requires.
	last := len(lines) - 1

	var blocks []block
	for i := 0; i < len(lines); i++ {
		typ, ok := openingType(lines[i])
		if !ok || i == last {
			continue
		}
		// end is one past the run of content-shaped lines after the
		// opening line; each of them must be followed by a newline.
		end := i + 1
		for end < last && isContentLine(lines[end]) {
			end++
		}
		// The closing line is the last "# ///" that leaves at least one
		// content line before it: it may be any line of the run, or the
		// line just after the run.
		closing := -1
		for j := min(end, last); j > i+1; j-- {
			if lines[j] == "# ///" {
				closing = j
				break
			}
		}
		if closing < 0 {
			continue
		}
		content := make([]string, 0, closing-i-1)
		for _, l := range lines[i+1 : closing] {
			if strings.HasPrefix(l, "# ") {
				content = append(content, l[2:])
			} else {
				content = append(content, l[1:])
			}
		}
		blocks = append(blocks, block{typ: typ, open: i, content: content})
		i = closing
	}
	return blocks
}

// openingType reports whether line is exactly "# /// TYPE" and returns TYPE.
func openingType(line string) (string, bool) {
	typ, ok := strings.CutPrefix(line, "# /// ")
	if !ok || typ == "" {
		return "", false
	}
	for _, c := range []byte(typ) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-':
		default:
			return "", false
		}
	}
	return typ, true
}

// isContentLine reports whether line is "#" alone or "# " and anything.
func isContentLine(line string) bool {
	return line == "#" || strings.HasPrefix(line, "# ")
}

// decode reads the block's TOML and checks the types of the keys it uses.
func decode(b *block) (Metadata, error) {
	// Content line k (0-based) is script line b.open+2+k (1-based), so a
	// TOML line n (1-based) is script line b.open+1+n.
	lineOf := func(tomlLine int) int { return b.open + 1 + tomlLine }

	text := strings.Join(b.content, "\n") + "\n"
	if len(text) > MaxBlockBytes {
		return Metadata{}, &Error{Line: b.open + 1, Msg: fmt.Sprintf(
			"the script block is %d bytes; the maximum is %d", len(text), MaxBlockBytes)}
	}
	if depth, line := nesting(text); depth > MaxNesting {
		return Metadata{}, &Error{Line: lineOf(line), Msg: fmt.Sprintf(
			"the script block nests values more than %d deep", MaxNesting)}
	}
	var doc map[string]any
	if _, err := toml.Decode(text, &doc); err != nil {
		var perr toml.ParseError
		if errors.As(err, &perr) && perr.Position.Line > 0 {
			return Metadata{}, &Error{Line: lineOf(perr.Position.Line), Msg: "invalid TOML in the script block: " + perr.Message}
		}
		return Metadata{}, &Error{Line: b.open + 1, Msg: "invalid TOML in the script block: " + err.Error()}
	}

	meta := Metadata{Present: true}
	keyLine := func(key string) int {
		if n := findKeyLine(b.content, key); n > 0 {
			return lineOf(n)
		}
		return b.open + 1
	}

	if v, ok := doc["dependencies"]; ok {
		arr, ok := v.([]any)
		if !ok {
			return Metadata{}, &Error{Line: keyLine("dependencies"), Msg: fmt.Sprintf(
				"'dependencies' must be an array of strings such as [\"requests>=2\"], not %s", tomlType(v))}
		}
		for i, d := range arr {
			s, ok := d.(string)
			if !ok {
				return Metadata{}, &Error{Line: keyLine("dependencies"), Msg: fmt.Sprintf(
					"'dependencies' item %d must be a string, not %s", i+1, tomlType(d))}
			}
			if strings.TrimSpace(s) == "" {
				return Metadata{}, &Error{Line: keyLine("dependencies"), Msg: fmt.Sprintf(
					"'dependencies' item %d is empty", i+1)}
			}
			meta.Dependencies = append(meta.Dependencies, s)
		}
	}
	if v, ok := doc["requires-python"]; ok {
		s, ok := v.(string)
		if !ok {
			return Metadata{}, &Error{Line: keyLine("requires-python"), Msg: fmt.Sprintf(
				"'requires-python' must be a string such as \">=3.11\", not %s", tomlType(v))}
		}
		meta.RequiresPython = s
	}
	return meta, nil
}

// nesting returns an upper bound of how deep the values of TOML text nest,
// and the 1-based line where it first exceeds MaxNesting (or 0): on each
// line, the open arrays and inline tables plus the dots outside strings
// (dotted keys and table headers nest a table per dot; a float's dot
// counts too, which only makes the bound looser). Strings and comments are
// skipped, so brackets and dots inside them do not count.
func nesting(text string) (depth, line int) {
	open := 0 // open brackets and braces; values may span lines
	n := 1
	for i := 0; i < len(text); i++ {
		dots := 0
		for ; i < len(text) && text[i] != '\n'; i++ {
			switch c := text[i]; c {
			case '[', '{':
				open++
			case ']', '}':
				open = max(open-1, 0)
			case '.':
				dots++
			case '#':
				for i+1 < len(text) && text[i+1] != '\n' {
					i++
				}
			case '"', '\'':
				end, lines := skipString(text, i)
				i, n = end, n+lines
			}
			if d := open + dots; d > depth {
				depth = d
				if depth > MaxNesting && line == 0 {
					line = n
				}
			}
		}
		n++
	}
	return depth, line
}

// skipString returns the index of the last byte of the TOML string that
// opens at text[i] (basic or literal, single- or multi-line), or of the
// text's end when it does not close, and how many newlines it spans.
func skipString(text string, i int) (end, lines int) {
	q := text[i]
	delim := string(q)
	if strings.HasPrefix(text[i:], strings.Repeat(delim, 3)) {
		delim = strings.Repeat(delim, 3)
	}
	for j := i + len(delim); j < len(text); j++ {
		switch {
		case q == '"' && text[j] == '\\':
			if j+1 < len(text) && text[j+1] == '\n' {
				lines++
			}
			j++
		case len(delim) == 1 && text[j] == '\n':
			return j - 1, lines // an unclosed single-line string ends here
		case text[j] == '\n':
			lines++
		case strings.HasPrefix(text[j:], delim):
			return j + len(delim) - 1, lines
		}
	}
	return len(text) - 1, lines
}

// findKeyLine returns the 1-based line of the TOML text lines on which key
// is assigned at the top level, or 0 when it cannot tell (for example for
// a quoted key written with escapes). It is only used to point error
// messages at the right line.
func findKeyLine(lines []string, key string) int {
	for n, l := range lines {
		l = strings.TrimLeft(l, " \t")
		if strings.HasPrefix(l, "[") {
			return 0 // a table header: top-level keys come before it
		}
		for _, spelled := range []string{key, `"` + key + `"`, `'` + key + `'`} {
			if rest, ok := strings.CutPrefix(l, spelled); ok &&
				strings.HasPrefix(strings.TrimLeft(rest, " \t"), "=") {
				return n + 1
			}
		}
	}
	return 0
}

// tomlType names the TOML type of a decoded value for error messages.
func tomlType(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case []any, []map[string]any:
		return "an array"
	case map[string]any:
		return "a table"
	default:
		return "a date or time"
	}
}

// Merge merges requirement lists: meta (usually a script's Dependencies)
// first, then each of extra in order. Each requirement is trimmed of
// surrounding white space; empty ones and exact duplicates of an earlier
// one are dropped. It does not normalise names or versions: "Requests" and
// "requests" both stay, and the resolver reconciles them.
func Merge(meta []string, extra ...[]string) []string {
	var out []string
	seen := make(map[string]bool)
	add := func(list []string) {
		for _, r := range list {
			r = strings.TrimSpace(r)
			if r == "" || seen[r] {
				continue
			}
			seen[r] = true
			out = append(out, r)
		}
	}
	add(meta)
	for _, e := range extra {
		add(e)
	}
	return out
}
