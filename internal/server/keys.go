package server

import (
	"bytes"
	"encoding/json"
)

// decodeFast decodes body into v, a struct whose JSON fields are known,
// in one pass of encoding/json instead of decodeBody's two, when body is
// one JSON object, every top-level key of which is exactly a field's name,
// with nothing after it; it reports whether it did. Any other body, good
// or bad, is left to decodeBody's two passes, so that what is accepted and
// every error's words are theirs: this only saves a request carrying
// files (megabytes of JSON) a scan.
func decodeFast(body []byte, v any, known map[string]bool) bool {
	keys, ok := topLevelKeys(body)
	if !ok {
		return false
	}
	for _, k := range keys {
		if !known[k] {
			return false
		}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return false
	}
	// Nothing but white space after the object.
	return len(bytes.TrimLeft(body[dec.InputOffset():], " \t\n\r")) == 0
}

// topLevelKeys returns the keys of the JSON object body is, as written,
// without checking that body is valid JSON (the decoder does). ok is false
// when body does not start with an object or a key has an escape in it.
func topLevelKeys(body []byte) (keys []string, ok bool) {
	i := 0
	for i < len(body) && (body[i] == ' ' || body[i] == '\t' || body[i] == '\n' || body[i] == '\r') {
		i++
	}
	if i == len(body) || body[i] != '{' {
		return nil, false
	}
	depth, expectKey := 0, false
	for ; i < len(body); i++ {
		switch c := body[i]; c {
		case '{', '[':
			depth++
			expectKey = depth == 1 && c == '{'
		case '}', ']':
			depth--
		case ',':
			expectKey = depth == 1
		case '"':
			start := i + 1
			i++
			for i < len(body) && body[i] != '"' {
				if body[i] == '\\' {
					if depth == 1 && expectKey {
						return nil, false
					}
					i++ // the escaped byte
				}
				i++
			}
			if depth == 1 && expectKey && i < len(body) {
				keys = append(keys, string(body[start:i]))
				expectKey = false
			}
		}
	}
	return keys, true
}
