// Package wire holds what the jail's runner and the daemon's socket API
// both carry unchanged, so that it is written down once: a cell's Value,
// an Exception, DisplayItems and their notes, the Tools a run declares,
// and the measure of untrusted JSON's nesting that both sides check. The
// runner's protocol (package runner) carries these types in its frames,
// and the API (package api) in its requests and results under the same
// JSON names, as aliases: a result's value, exception and display are
// what the runner's Collector validated, handed on without a copy.
//
// It is plain data and pure functions: it must import nothing but the
// standard library, so that everything from the runner's Go side (package
// runner) to the unprivileged client (through package api) may import it.
package wire

// JSONDepth is how deep valid JSON nests arrays and objects (0 for a
// scalar). It scans bytes, without decoding: the daemon checks untrusted
// JSON's nesting with it before anything decodes it.
func JSONDepth(raw []byte) int {
	d, deepest, inString, escaped := 0, 0, false, false
	for _, ch := range raw {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case ch == '\\':
				escaped = true
			case ch == '"':
				inString = false
			}
		case ch == '"':
			inString = true
		case ch == '[' || ch == '{':
			d++
			deepest = max(deepest, d)
		case ch == ']' || ch == '}':
			d--
		}
	}
	return deepest
}
