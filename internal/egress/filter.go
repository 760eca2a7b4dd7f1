package egress

import (
	"bytes"
	"io"
	"strings"
)

// A filter finds fixed byte strings in a stream (a request body, a
// response body, a header value) and replaces each by another, or stops
// the stream at one. It holds back the stream's last bytes while they
// might begin a string it looks for, so that nothing it looks for ever
// passes, whole or in part, however the stream is cut into reads.
//
// What it holds back must not tell what it looks for when that is secret
// (a value, in a response): a program that makes a host echo a guess
// would see the guess held back exactly when it begins the value, and
// learn the value a character at a time. A secret filter (newSecretFilter)
// holds back whatever follows the stream's last control character (a
// line break), up to one byte less than its longest find, whatever those
// bytes are: no find holds a control character, so none can begin before
// it. Lines, and the events of a stream (server-sent events, JSON lines),
// pass as they come. A filter of placeholders, which the program knows,
// holds back only what begins one.
type filter struct {
	rules []rule
	// longest is the length of the longest find.
	longest int
	// pending holds what may begin a match, until more comes.
	pending []byte
	// matched, if set, is told of every match before its replacement is
	// written; an error stops the stream there.
	matched func(*rule) error
	// secret says what the filter looks for is secret: what it holds
	// back depends on the stream alone (above). lineSafe says no find
	// holds a control character; without it a secret filter holds back
	// the longest find's length less one byte, always.
	secret, lineSafe bool
}

// rule is one string a filter looks for.
type rule struct {
	find, repl []byte
	// secret is the secret the rule is about.
	secret *runSecret
}

func newFilter(rules []rule, matched func(*rule) error) *filter {
	f := &filter{matched: matched, lineSafe: true}
	seen := map[string]bool{}
	for _, r := range rules {
		if len(r.find) == 0 || seen[string(r.find)] {
			continue
		}
		seen[string(r.find)] = true
		f.rules = append(f.rules, r)
		f.longest = max(f.longest, len(r.find))
		if bytes.IndexFunc(r.find, isControl) >= 0 {
			f.lineSafe = false
		}
	}
	return f
}

// newSecretFilter is a filter of secret strings: what it holds back
// tells nothing of them (see filter).
func newSecretFilter(rules []rule, matched func(*rule) error) *filter {
	f := newFilter(rules, matched)
	f.secret = true
	return f
}

// isControl reports whether r is a control character, which no value
// holds (secrets.ReadValue), nor any form of one.
func isControl(r rune) bool { return r < ' ' || r == 0x7f }

// feed filters src, the stream's next bytes, appending what may pass to
// dst. final says the stream ends with src: nothing is held back. An
// error from matched stops it: what came before the match is in dst.
func (f *filter) feed(dst, src []byte, final bool) ([]byte, error) {
	if len(f.rules) == 0 {
		dst = append(dst, f.pending...)
		f.pending = f.pending[:0]
		return append(dst, src...), nil
	}
	buf := src
	if len(f.pending) > 0 {
		buf = append(f.pending, src...)
	}
	// next[k] is where rule k is next found at or after i (-1: nowhere).
	next := make([]int, len(f.rules))
	for k := range next {
		next[k] = -2 // not looked for yet
	}
	i := 0
	for {
		m, best := -1, -1
		for k := range f.rules {
			if next[k] == -2 || next[k] >= 0 && next[k] < i {
				next[k] = -1
				if j := bytes.Index(buf[i:], f.rules[k].find); j >= 0 {
					next[k] = i + j
				}
			}
			if n := next[k]; n >= 0 && (m < 0 || n < m || n == m && len(f.rules[k].find) > len(f.rules[best].find)) {
				m, best = n, k
			}
		}
		hold := len(buf)
		if !final {
			hold = f.partial(buf, i)
		}
		if m >= 0 && m < hold {
			r := &f.rules[best]
			dst = append(dst, buf[i:m]...)
			if f.matched != nil {
				if err := f.matched(r); err != nil {
					f.pending = f.pending[:0]
					return dst, err
				}
			}
			dst = append(dst, r.repl...)
			i = m + len(r.find)
			continue
		}
		dst = append(dst, buf[i:hold]...)
		// Copied: buf may be pending's own array, or the caller's.
		f.pending = append(make([]byte, 0, len(buf)-hold), buf[hold:]...)
		return dst, nil
	}
}

// partial is the first position at or after i from which the rest of buf
// is the beginning of some rule's find (and shorter than it), or len(buf).
// For a secret filter, it is the position after buf's last control
// character, or the longest find's length less one from the end,
// whichever is later (and not before i): a position that depends on the
// stream, and on no find's bytes.
func (f *filter) partial(buf []byte, i int) int {
	lo := max(i, len(buf)-f.longest+1)
	if f.secret {
		if f.lineSafe {
			for s := len(buf); s > lo; s-- {
				if isControl(rune(buf[s-1])) {
					return s
				}
			}
		}
		return lo
	}
	for s := lo; s < len(buf); s++ {
		tail := buf[s:]
		for k := range f.rules {
			find := f.rules[k].find
			if len(tail) < len(find) && find[0] == tail[0] && bytes.HasPrefix(find, tail) {
				return s
			}
		}
	}
	return len(buf)
}

// string filters a whole string (a header's value).
func (f *filter) string(s string) (string, error) {
	if len(f.rules) == 0 {
		return s, nil
	}
	f.pending = f.pending[:0]
	out, err := f.feed(nil, []byte(s), true)
	return string(out), err
}

// inName reports whether a header's name holds any find, in any case:
// names are case-insensitive, and canonicalized on the way.
func (f *filter) inName(name string) bool {
	lower := strings.ToLower(name)
	for _, r := range f.rules {
		if strings.Contains(lower, strings.ToLower(string(r.find))) {
			return true
		}
	}
	return false
}

// filterReader filters what it reads from src: a request body on its way
// to the outside.
type filterReader struct {
	src io.ReadCloser
	f   *filter
	buf []byte // read from src
	out []byte // filtered, not yet returned
	err error  // src's end, or the filter's refusal
}

func newFilterReader(src io.ReadCloser, f *filter) *filterReader {
	return &filterReader{src: src, f: f, buf: make([]byte, 32<<10)}
}

func (r *filterReader) Read(p []byte) (int, error) {
	for len(r.out) == 0 && r.err == nil {
		n, err := r.src.Read(r.buf)
		// Only a stream that ends gives up what the filter holds back:
		// one that breaks off keeps it (it may be the start of a
		// string the filter looks for).
		r.out, r.err = r.f.feed(r.out[:0], r.buf[:n], err == io.EOF)
		if r.err == nil {
			r.err = err
		}
	}
	if len(r.out) > 0 {
		n := copy(p, r.out)
		r.out = r.out[n:]
		return n, nil
	}
	return 0, r.err
}

func (r *filterReader) Close() error { return r.src.Close() }
