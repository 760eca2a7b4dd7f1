// Package wire holds what the jail's runner and the daemon's socket API
// both carry unchanged, so that it is written down once: the bound on the
// nesting of untrusted JSON, checked on both sides.
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
