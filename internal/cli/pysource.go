package cli

import "strings"

// When is what the console was typed complete?
//
// Python's REPL asks its compiler (codeop) whether the lines typed so far
// make a complete statement. The console has no Python on the host, and
// asking the session's would cost a run per line (and count in the
// session's runs), so it decides by a rule of its own that gives Python's
// answer for what people type:
//
//   - Inside an open bracket or triple-quoted string, or after a backslash
//     that ends a line, the input goes on.
//   - A compound statement goes on until an empty line: an input whose
//     first token is a block keyword (if, for, while, def, class, with,
//     try, async) or a decorator's @, as in `if x: y` on one line, or
//     whose first logical line ends with ':' (match x:).
//   - Anything else is complete at the end of its line.
//
// Where the rule and Python's would differ (input that is not Python),
// the input is sent all the same and Python judges it: the syntax error
// comes back as Python's own.

// blockKeywords start a compound statement.
var blockKeywords = map[string]bool{
	"if": true, "for": true, "while": true, "def": true, "class": true,
	"with": true, "try": true, "async": true,
}

// inputComplete reports whether lines, typed one after another at the
// console's prompts, make an input to run now.
func inputComplete(lines []string) bool {
	sc := scanSource(strings.Join(lines, "\n"))
	switch {
	case sc.open:
		return false
	case !sc.code:
		return true
	case sc.block:
		return len(lines) > 1 && strings.TrimSpace(lines[len(lines)-1]) == ""
	default:
		return true
	}
}

// hasCode reports whether source holds anything but blanks and comments.
func hasCode(source string) bool { return scanSource(source).code }

// sourceScan is what scanSource found.
type sourceScan struct {
	// open: the source ends inside a bracket or a triple-quoted string,
	// or with a backslash that continues the line.
	open bool
	// code: it holds a token, not only blanks and comments.
	code bool
	// block: its first statement is a compound one.
	block bool
}

// scanSource tokenizes Python source just enough for inputComplete:
// strings (with any prefix, single or triple quoted), comments, brackets
// and line continuations.
func scanSource(src string) sourceScan {
	var sc sourceScan
	depth := 0
	first := ""          // the first token: a name, or "@"
	var lastOfFirst byte // the last character of the first logical line
	firstEnded := false  // the first logical line has ended
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '#':
			for i < len(src) && src[i] != '\n' {
				i++
			}
			continue
		case c == '\\':
			if i+1 == len(src) {
				sc.open = true
				return sc
			}
			// A backslash before a newline joins the lines; any
			// other is a syntax error, Python's to report.
			i += 2
			continue
		case c == '\n':
			if depth == 0 && sc.code {
				firstEnded = true
			}
			i++
			continue
		case c == ' ' || c == '\t' || c == '\r' || c == '\f':
			i++
			continue
		}
		start := i
		switch {
		case c == '\'' || c == '"':
			end, open := scanString(src, i)
			if open {
				sc.open = true
				return sc
			}
			i = end
		case isNameByte(c):
			for i < len(src) && isNameByte(src[i]) {
				i++
			}
		default:
			switch c {
			case '(', '[', '{':
				depth++
			case ')', ']', '}':
				depth = max(depth-1, 0)
			}
			i++
		}
		if !sc.code {
			sc.code = true
			first = src[start:i]
		}
		if !firstEnded {
			lastOfFirst = src[i-1]
		}
	}
	sc.open = depth > 0
	sc.block = blockKeywords[first] || first == "@" || lastOfFirst == ':'
	return sc
}

// isNameByte reports whether c can be part of a name (or a number); any
// byte of a non-ASCII character counts, as Python's names may hold them.
func isNameByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}

// scanString scans the string literal whose opening quote is at src[i]
// and returns the index just past it. open reports that the source ends
// inside it where the string may go on: a triple-quoted one, or a single
// one whose line ends with a backslash. A single-quoted string that meets
// the end of its line unclosed ends there (a syntax error, Python's to
// report).
func scanString(src string, i int) (end int, open bool) {
	q := src[i]
	quote := src[i : i+1]
	triple := strings.HasPrefix(src[i:], strings.Repeat(quote, 3))
	j := i + 1
	if triple {
		j = i + 3
	}
	for j < len(src) {
		switch src[j] {
		case '\\':
			if j+1 == len(src) {
				return len(src), true
			}
			j += 2
			continue
		case '\n':
			if !triple {
				return j, false
			}
		case q:
			if !triple {
				return j + 1, false
			}
			if strings.HasPrefix(src[j:], strings.Repeat(quote, 3)) {
				return j + 3, false
			}
		}
		j++
	}
	return len(src), triple
}
