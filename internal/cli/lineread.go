package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"unicode"
	"unicode/utf8"
	"unsafe"
)

// How the console reads its lines: consoleInput reads standard input in
// the background, so that waiting for a line ends on Ctrl-C or a signal;
// a lineReader makes lines of it, plainly (plainReader) or, on a
// terminal, with editing and history (lineEditor). Both write the prompt
// on stderr, as Python does.

// errInterrupted is what readLine returns for Ctrl-C.
var errInterrupted = errors.New("interrupted")

// lineReader reads the console's lines.
type lineReader interface {
	// readLine shows prompt and returns the next line, without its
	// newline. It returns errInterrupted on Ctrl-C (or a SIGINT on
	// interrupts), ctx's cause when ctx ends, and io.EOF (or the error
	// reading stdin) at the end of the input.
	readLine(ctx context.Context, interrupts <-chan struct{}, prompt string) (string, error)
}

var (
	_ lineReader = (*plainReader)(nil)
	_ lineReader = (*lineEditor)(nil)
)

// consoleInput reads r in the background, a chunk at a time.
type consoleInput struct {
	chunks chan []byte
	// err ends the input; set before chunks is closed.
	err  error
	done chan struct{}
}

func startInput(r io.Reader) *consoleInput {
	in := &consoleInput{chunks: make(chan []byte), done: make(chan struct{})}
	go func() {
		defer close(in.chunks)
		for {
			buf := make([]byte, 4096)
			n, err := r.Read(buf)
			if n > 0 {
				select {
				case in.chunks <- buf[:n]:
				case <-in.done:
					return
				}
			}
			if err != nil {
				in.err = err
				return
			}
		}
	}()
	return in
}

// stop lets the reading goroutine end once its read returns (a read
// from a terminal returns when a key is pressed: the process is usually
// gone by then).
func (in *consoleInput) stop() { close(in.done) }

// next waits for the next chunk. At the end of the input it returns the
// error that ended it (io.EOF); errInterrupted on interrupts; ctx's cause
// when ctx ends.
func (in *consoleInput) next(ctx context.Context, interrupts <-chan struct{}) ([]byte, error) {
	select {
	case b, ok := <-in.chunks:
		if !ok {
			return nil, in.err
		}
		return b, nil
	case <-interrupts:
		return nil, errInterrupted
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// plainReader reads lines as they come: from a pipe, a file, or a
// terminal in its usual (cooked) mode, which echoes and edits the line.
type plainReader struct {
	in  *consoleInput
	out io.Writer
	buf []byte
	// end is the error that ended the input, once it has.
	end error
}

func (p *plainReader) readLine(ctx context.Context, interrupts <-chan struct{}, prompt string) (string, error) {
	io.WriteString(p.out, prompt)
	for {
		if i := bytes.IndexByte(p.buf, '\n'); i >= 0 {
			line := string(bytes.TrimSuffix(p.buf[:i], []byte("\r")))
			p.buf = p.buf[i+1:]
			return line, nil
		}
		if p.end != nil {
			if len(p.buf) > 0 {
				line := string(p.buf)
				p.buf = nil
				return line, nil
			}
			return "", p.end
		}
		b, err := p.in.next(ctx, interrupts)
		switch {
		case errors.Is(err, errInterrupted) || ctx.Err() != nil:
			return "", err
		case err != nil:
			p.end = err
		}
		p.buf = append(p.buf, b...)
	}
}

// maxHistory bounds the lines a lineEditor remembers.
const maxHistory = 1000

// lineEditor reads lines from a terminal in raw mode and lets them be
// edited: the arrows, Home and End, Backspace and Delete, Ctrl-A, -E,
// -B, -F, -K, -U, -W and -L as in readline, Up and Down (Ctrl-P, Ctrl-N)
// through the lines entered before, Tab as four spaces. Every character
// counts as one column, and a line wider than the terminal is redrawn
// poorly: a small editor, not readline.
type lineEditor struct {
	in  *consoleInput
	out io.Writer
	// raw puts the terminal in raw mode and returns what restores it;
	// nil when it needs no switching (tests).
	raw func() (restore func(), err error)

	history []string
	// pending are bytes read but not yet used: the next keys.
	pending []byte
	// end is the error that ended the input, once it has.
	end error

	// The line being edited.
	prompt string
	line   []rune
	pos    int
	// hist is the index in history of the line shown, len(history) for
	// the new one, kept in draft while an older one is shown.
	hist  int
	draft []rune
}

func (e *lineEditor) readLine(ctx context.Context, interrupts <-chan struct{}, prompt string) (string, error) {
	if e.raw != nil {
		restore, err := e.raw()
		if err != nil {
			return "", fmt.Errorf("set up the terminal: %w", err)
		}
		defer restore()
	}
	e.prompt, e.line, e.pos, e.hist, e.draft = prompt, nil, 0, len(e.history), nil
	e.refresh()
	for {
		k, n := decodeKey(e.pending, e.end != nil)
		if n == 0 {
			if e.end != nil {
				if len(e.line) > 0 {
					return e.accept(), nil
				}
				return "", e.end
			}
			b, err := e.in.next(ctx, interrupts)
			switch {
			case errors.Is(err, errInterrupted) || ctx.Err() != nil:
				return "", err
			case err != nil:
				e.end = err
			}
			e.pending = append(e.pending, b...)
			continue
		}
		e.pending = e.pending[n:]
		switch k.code {
		case keyEnter:
			return e.accept(), nil
		case keyInterrupt:
			return "", errInterrupted
		case keyEOF:
			if len(e.line) == 0 {
				return "", io.EOF
			}
			e.deleteAt(e.pos)
		default:
			e.edit(k)
		}
		e.refresh()
	}
}

// accept ends the line: onto a new one on the terminal, and into the
// history.
func (e *lineEditor) accept() string {
	io.WriteString(e.out, "\n")
	s := string(e.line)
	if strings.TrimSpace(s) != "" && (len(e.history) == 0 || e.history[len(e.history)-1] != s) {
		e.history = append(e.history, s)
		if len(e.history) > maxHistory {
			e.history = e.history[len(e.history)-maxHistory:]
		}
	}
	return s
}

// edit applies one key to the line.
func (e *lineEditor) edit(k key) {
	switch k.code {
	case keyRune:
		e.insert([]rune{k.r})
	case keyTab:
		e.insert([]rune("    "))
	case keyBackspace:
		if e.pos > 0 {
			e.pos--
			e.deleteAt(e.pos)
		}
	case keyDelete:
		e.deleteAt(e.pos)
	case keyLeft:
		e.pos = max(e.pos-1, 0)
	case keyRight:
		e.pos = min(e.pos+1, len(e.line))
	case keyHome:
		e.pos = 0
	case keyEnd:
		e.pos = len(e.line)
	case keyWordLeft:
		e.pos = e.wordStart()
	case keyWordRight:
		for e.pos < len(e.line) && !isWordRune(e.line[e.pos]) {
			e.pos++
		}
		for e.pos < len(e.line) && isWordRune(e.line[e.pos]) {
			e.pos++
		}
	case keyKillEnd:
		e.line = e.line[:e.pos]
	case keyKillStart:
		e.line = append([]rune(nil), e.line[e.pos:]...)
		e.pos = 0
	case keyKillWord:
		start := e.wordStart()
		e.line = append(e.line[:start], e.line[e.pos:]...)
		e.pos = start
	case keyUp:
		if e.hist > 0 {
			if e.hist == len(e.history) {
				e.draft = e.line
			}
			e.hist--
			e.show([]rune(e.history[e.hist]))
		}
	case keyDown:
		if e.hist < len(e.history) {
			e.hist++
			if e.hist == len(e.history) {
				e.show(e.draft)
			} else {
				e.show([]rune(e.history[e.hist]))
			}
		}
	case keyClear:
		io.WriteString(e.out, "\x1b[H\x1b[2J")
	}
}

func (e *lineEditor) insert(rs []rune) {
	line := make([]rune, 0, len(e.line)+len(rs))
	line = append(line, e.line[:e.pos]...)
	line = append(line, rs...)
	e.line = append(line, e.line[e.pos:]...)
	e.pos += len(rs)
}

func (e *lineEditor) deleteAt(i int) {
	if i < len(e.line) {
		e.line = append(e.line[:i], e.line[i+1:]...)
	}
}

// show replaces the line with a copy of rs, the cursor at its end.
func (e *lineEditor) show(rs []rune) {
	e.line = append([]rune(nil), rs...)
	e.pos = len(e.line)
}

// wordStart is where the word before the cursor starts.
func (e *lineEditor) wordStart() int {
	i := e.pos
	for i > 0 && !isWordRune(e.line[i-1]) {
		i--
	}
	for i > 0 && isWordRune(e.line[i-1]) {
		i--
	}
	return i
}

func isWordRune(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }

// refresh redraws the prompt and the line, and puts the cursor in place.
func (e *lineEditor) refresh() {
	var b strings.Builder
	b.WriteString("\r")
	b.WriteString(e.prompt)
	for _, r := range e.line {
		if unicode.IsPrint(r) || r == ' ' {
			b.WriteRune(r)
		} else {
			b.WriteRune('?')
		}
	}
	b.WriteString("\x1b[K")
	if n := len(e.line) - e.pos; n > 0 {
		fmt.Fprintf(&b, "\x1b[%dD", n)
	}
	io.WriteString(e.out, b.String())
}

// Keys the editor knows.
const (
	keyNone = iota // a sequence it ignores
	keyRune
	keyEnter
	keyInterrupt
	keyEOF
	keyTab
	keyBackspace
	keyDelete
	keyLeft
	keyRight
	keyUp
	keyDown
	keyHome
	keyEnd
	keyWordLeft
	keyWordRight
	keyKillEnd
	keyKillStart
	keyKillWord
	keyClear
)

type key struct {
	code int
	r    rune // for keyRune
}

// controlKeys are the keys sent as one control byte.
var controlKeys = map[byte]int{
	'\r': keyEnter, '\n': keyEnter, 0x03: keyInterrupt, 0x04: keyEOF, '\t': keyTab,
	0x7f: keyBackspace, 0x08: keyBackspace,
	0x01: keyHome, 0x05: keyEnd, 0x02: keyLeft, 0x06: keyRight, 0x10: keyUp, 0x0e: keyDown,
	0x0b: keyKillEnd, 0x15: keyKillStart, 0x17: keyKillWord, 0x0c: keyClear,
}

// escapeKeys are the keys sent as ESC [ or ESC O sequences, by what
// follows those.
var escapeKeys = map[string]int{
	"A": keyUp, "B": keyDown, "C": keyRight, "D": keyLeft, "H": keyHome, "F": keyEnd,
	"1~": keyHome, "7~": keyHome, "4~": keyEnd, "8~": keyEnd, "3~": keyDelete,
	"1;5D": keyWordLeft, "1;5C": keyWordRight, "1;3D": keyWordLeft, "1;3C": keyWordRight,
}

// decodeKey decodes the first key in b and returns it with the number of
// bytes it took, 0 when b holds no whole key yet. final says no more
// bytes will come: what b holds is taken as it is.
func decodeKey(b []byte, final bool) (key, int) {
	if len(b) == 0 {
		return key{}, 0
	}
	c := b[0]
	if c == 0x1b {
		return decodeEscape(b, final)
	}
	if code, ok := controlKeys[c]; ok {
		return key{code: code}, 1
	}
	if c < 0x20 {
		return key{}, 1
	}
	if !utf8.FullRune(b) && !final {
		return key{}, 0
	}
	r, n := utf8.DecodeRune(b)
	return key{code: keyRune, r: r}, n
}

// decodeEscape decodes a key sent as an escape sequence.
func decodeEscape(b []byte, final bool) (key, int) {
	if len(b) < 2 {
		if final {
			return key{}, 1
		}
		return key{}, 0
	}
	switch b[1] {
	case '[', 'O':
		// Parameters and intermediates, then a final byte.
		for i := 2; i < len(b); i++ {
			if b[i] >= 0x40 && b[i] <= 0x7e {
				return key{code: escapeKeys[string(b[2:i+1])]}, i + 1
			}
		}
		if final || len(b) > 16 {
			return key{}, len(b)
		}
		return key{}, 0
	case 'b':
		return key{code: keyWordLeft}, 2
	case 'f':
		return key{code: keyWordRight}, 2
	case 0x7f:
		return key{code: keyKillWord}, 2
	}
	return key{}, 2
}

// isTerminal reports whether fd is a terminal.
func isTerminal(fd uintptr) bool {
	var t syscall.Termios
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TCGETS, uintptr(unsafe.Pointer(&t)))
	return errno == 0
}

// rawMode puts the terminal fd in the mode lineEditor needs: each byte as
// it is typed, no echo, Ctrl-C and Ctrl-D as bytes. Output is processed
// as usual. It returns what restores the mode it found.
func rawMode(fd uintptr) (restore func(), err error) {
	var old syscall.Termios
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TCGETS, uintptr(unsafe.Pointer(&old))); errno != 0 {
		return nil, errno
	}
	t := old
	t.Iflag &^= syscall.ICRNL | syscall.INLCR | syscall.IGNCR | syscall.IXON | syscall.ISTRIP
	t.Lflag &^= syscall.ECHO | syscall.ICANON | syscall.ISIG | syscall.IEXTEN
	t.Cc[syscall.VMIN] = 1
	t.Cc[syscall.VTIME] = 0
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TCSETS, uintptr(unsafe.Pointer(&t))); errno != 0 {
		return nil, errno
	}
	return func() {
		syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TCSETS, uintptr(unsafe.Pointer(&old)))
	}, nil
}
