package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// readAll reads lines with r until it fails, and returns them and the
// error that ended them.
func readAll(t *testing.T, r lineReader) ([]string, error) {
	t.Helper()
	var lines []string
	for range 100 {
		line, err := r.readLine(context.Background(), nil, "> ")
		if err != nil {
			return lines, err
		}
		lines = append(lines, line)
	}
	t.Fatal("readLine never ended")
	return nil, nil
}

func TestPlainReader(t *testing.T) {
	var out bytes.Buffer
	r := &plainReader{in: startInput(strings.NewReader("a\r\n\nb\nlast")), out: &out}
	lines, err := readAll(t, r)
	if want := []string{"a", "", "b", "last"}; !slices.Equal(lines, want) || err != io.EOF {
		t.Errorf("lines %q, %v; want %q, EOF", lines, err, want)
	}
	if out.String() != "> > > > > " {
		t.Errorf("prompts %q", out.String())
	}
}

func TestReadLineInterrupted(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	ints := make(chan struct{}, 1)
	for _, r := range []lineReader{
		&plainReader{in: startInput(pr), out: io.Discard},
		&lineEditor{in: startInput(pr), out: io.Discard},
	} {
		ints <- struct{}{}
		if _, err := r.readLine(context.Background(), ints, "> "); !errors.Is(err, errInterrupted) {
			t.Errorf("%T: readLine = %v, want errInterrupted", r, err)
		}
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(&interrupted{sig: os.Kill})
		var in *interrupted
		if _, err := r.readLine(ctx, nil, "> "); !errors.As(err, &in) {
			t.Errorf("%T: readLine after cancel = %v, want the cause", r, err)
		}
	}
}

func TestLineEditor(t *testing.T) {
	const (
		up, down, left, right = "\x1b[A", "\x1b[B", "\x1b[D", "\x1b[C"
		home, end, del        = "\x1b[H", "\x1b[F", "\x1b[3~"
	)
	for _, tc := range []struct {
		name  string
		input string
		want  []string
	}{
		{"plain", "x = 1\rprint(x)\n", []string{"x = 1", "print(x)"}},
		{"backspace", "abd\x7f\x7fc\r", []string{"ac"}},
		{"insert in the middle", "ac" + left + "b\r", []string{"abc"}},
		{"home and end", "bc" + home + "a" + end + "d\r", []string{"abcd"}},
		{"ctrl-a, ctrl-e", "bc\x01a\x05d\r", []string{"abcd"}},
		{"delete", "abc" + home + del + "\r", []string{"bc"}},
		{"ctrl-d deletes on a line", "abc\x01\x04\r", []string{"bc"}},
		{"kill to end", "abcdef" + left + left + left + "\x0b\r", []string{"abc"}},
		{"kill to start", "abcdef" + left + left + "\x15\r", []string{"ef"}},
		{"kill word", "x = foo_bar\x17baz\r", []string{"x = baz"}},
		{"word moves", "one two\x1bbX\x1bfY\r", []string{"one XtwoY"}},
		{"tab", "\tpass\r", []string{"    pass"}},
		{"unicode", "caf\u00e9\x7f\u00e9" + left + "\U0001F600\r", []string{"caf\U0001F600\u00e9"}},
		{"rune split across reads", "\xc3", nil}, // completed below
		{"history", "a\rb\r" + up + up + "\r" + up + up + up + down + "\r", []string{"a", "b", "a", "b"}},
		{"draft kept", "a\rdraft" + up + down + "\r", []string{"a", "draft"}},
		{"no duplicate history", "a\ra\rb\r" + up + up + "\r", []string{"a", "a", "b", "a"}},
		{"arrows in SS3", "ab\x1bOD\x1bODX\r", []string{"Xab"}},
		{"unknown sequences ignored", "a\x1b[15~\x1b[200~b\x07\r", []string{"ab"}},
		{"pending line at the end", "abc", []string{"abc"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			var in io.Reader = strings.NewReader(tc.input)
			want := tc.want
			if tc.name == "rune split across reads" {
				in = io.MultiReader(strings.NewReader("caf\xc3"), strings.NewReader("\xa9\r"))
				want = []string{"caf\u00e9"}
			}
			e := &lineEditor{in: startInput(in), out: &out}
			lines, err := readAll(t, e)
			if !slices.Equal(lines, want) || err != io.EOF {
				t.Errorf("lines %q, %v; want %q, EOF", lines, err, want)
			}
		})
	}
}

func TestLineEditorKeys(t *testing.T) {
	e := &lineEditor{in: startInput(strings.NewReader("ab\x03cd\x04")), out: io.Discard}
	if _, err := e.readLine(context.Background(), nil, "> "); !errors.Is(err, errInterrupted) {
		t.Errorf("Ctrl-C: %v, want errInterrupted", err)
	}
	if line, err := e.readLine(context.Background(), nil, "> "); err != nil || line != "cd" {
		t.Errorf("after Ctrl-C: %q, %v", line, err)
	}
	// Ctrl-D on an empty line.
	e = &lineEditor{in: startInput(strings.NewReader("\x04more\r")), out: io.Discard}
	if _, err := e.readLine(context.Background(), nil, "> "); err != io.EOF {
		t.Errorf("Ctrl-D: %v, want EOF", err)
	}
}

func TestLineEditorDraws(t *testing.T) {
	var out bytes.Buffer
	e := &lineEditor{in: startInput(strings.NewReader("ab\x1b[D\r")), out: &out}
	if _, err := e.readLine(context.Background(), nil, ">>> "); err != nil {
		t.Fatal(err)
	}
	want := "\r>>> \x1b[K" + "\r>>> a\x1b[K" + "\r>>> ab\x1b[K" + "\r>>> ab\x1b[K\x1b[1D" + "\n"
	if out.String() != want {
		t.Errorf("drew %q, want %q", out.String(), want)
	}
	// The terminal is raw while a line is read, and restored after.
	var calls []string
	e = &lineEditor{in: startInput(strings.NewReader("x\r")), out: io.Discard, raw: func() (func(), error) {
		calls = append(calls, "raw")
		return func() { calls = append(calls, "restore") }, nil
	}}
	e.readLine(context.Background(), nil, "> ")
	if !slices.Equal(calls, []string{"raw", "restore"}) {
		t.Errorf("terminal modes %q", calls)
	}
}

// The editor's reader never blocks the tests when the input is slow: it
// waits for the rest of a key.
func TestLineEditorWaitsForKeys(t *testing.T) {
	pr, pw := io.Pipe()
	e := &lineEditor{in: startInput(pr), out: io.Discard}
	done := make(chan string)
	go func() {
		line, _ := e.readLine(context.Background(), nil, "> ")
		done <- line
	}()
	for _, s := range []string{"ab", "\x1b", "[", "D", "X", "\r"} {
		pw.Write([]byte(s))
	}
	select {
	case line := <-done:
		if line != "aXb" {
			t.Errorf("line %q, want aXb", line)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("readLine did not return")
	}
	pw.Close()
}
