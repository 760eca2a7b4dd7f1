package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/client"
)

const zeroDivision = "Traceback (most recent call last):\n  File \"<stdin>\", line 1, in <module>\nZeroDivisionError: division by zero\n"

// fakePython answers the runs of the REPL tests as the session's
// interpreter would. A run of "while True: pass" sends on started (when
// not nil) and lasts until it is cancelled.
func fakePython(d *fakeDaemon, started chan<- struct{}) func(ctx context.Context, req *api.RunRequest, emit func(string, string)) (*api.Result, error) {
	return func(ctx context.Context, req *api.RunRequest, emit func(string, string)) (*api.Result, error) {
		switch strings.TrimSuffix(req.Code, "\n") {
		case "x + 1", "f(21)":
			return &api.Result{Value: &api.Value{Type: "int", Repr: "42"}}, nil
		case "print('hi')":
			emit("stdout", "hi\n")
			return &api.Result{Stdout: "hi\n"}, nil
		case "print('no newline', end='')":
			emit("stdout", "no newline")
			return &api.Result{Stdout: "no newline"}, nil
		case "1/0":
			emit("stderr", zeroDivision)
			return &api.Result{ExitCode: 1, Stderr: zeroDivision,
				Exception: &api.Exception{Type: "ZeroDivisionError", Message: "division by zero", Traceback: zeroDivision}}, nil
		case "quiet()":
			// An exception whose traceback came in the result only.
			return &api.Result{ExitCode: 1, Exception: &api.Exception{Type: "ValueError", Traceback: "Traceback...\nValueError: quiet\n"}}, nil
		case "slow()":
			return &api.Result{ExitCode: 137, TimedOut: true, Limits: &api.Limits{TimeoutMs: 1500}}, nil
		case "plot()":
			return &api.Result{Display: []api.DisplayItem{{Data: map[string]json.RawMessage{
				"text/plain": json.RawMessage(`"<Figure>"`), "image/png": json.RawMessage(`"AAAA"`)}}}}, nil
		case "boom()":
			d.LoseSession(req.Session)
			return &api.Result{ExitCode: 137, OOMKilled: true, Limits: &api.Limits{MemoryBytes: 64 << 20}}, nil
		case "forget()":
			// As if it expired after this run.
			if err := client.New(d.socket).DeleteSession(ctx, req.Session); err != nil {
				return nil, err
			}
			return &api.Result{}, nil
		case "while True: pass":
			if started != nil {
				started <- struct{}{}
			}
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return &api.Result{}, nil
	}
}

// codes are the codes of the runs that reached d, each without its final
// newline, after checking that they ran in session id as cells.
func codes(t *testing.T, d *fakeDaemon, id string) []string {
	t.Helper()
	var list []string
	for _, r := range d.Requests() {
		if r.Session != id || r.Mode != api.ModeCell || r.Filename != "-" || !r.Streamed || !strings.HasSuffix(r.Code, "\n") {
			t.Errorf("request %+v: want a streamed cell run in session %s, named -, ending in a newline", r.RunRequest, id)
		}
		list = append(list, strings.TrimSuffix(r.Code, "\n"))
	}
	return list
}

func TestReplPiped(t *testing.T) {
	d := newFakeDaemon(t, nil)
	d.SetRun(fakePython(d, nil))
	input := strings.Join([]string{
		"x = 41",
		"x + 1",
		"",
		"print('hi')",
		"def f(a):",
		"    if a:",
		"        return a * 2",
		"",
		"f(21)",
		"1/0",
		`s = """a`,
		"",
		`b"""`,
		"# a comment alone",
		"quiet()",
		"print('no newline', end='')",
		"exit()",
		"print('never')",
	}, "\n") + "\n"
	got := runCLI(context.Background(), input, nil, "repl", "--socket", d.socket)
	if got.code != 0 {
		t.Errorf("exit %d; stderr:\n%s", got.code, got.stderr)
	}
	if want := "42\nhi\n42\nno newline"; got.stdout != want {
		t.Errorf("stdout %q, want %q", got.stdout, want)
	}
	wantErr := "cellblock repl: Python in session s-test-1 (deleted at exit; --keep keeps it)\n" +
		"Ctrl-D or exit() leaves; Ctrl-C stops a run.\n" +
		">>> >>> >>> >>> >>> ... ... ... >>> >>> " + zeroDivision +
		">>> ... ... >>> >>> Traceback...\nValueError: quiet\n>>> \n>>> "
	if got.stderr != wantErr {
		t.Errorf("stderr\n%q\nwant\n%q", got.stderr, wantErr)
	}
	want := []string{"x = 41", "x + 1", "print('hi')", "def f(a):\n    if a:\n        return a * 2", "f(21)", "1/0",
		"s = \"\"\"a\n\nb\"\"\"", "quiet()", "print('no newline', end='')"}
	if c := codes(t, d, "s-test-1"); !reflect.DeepEqual(c, want) {
		t.Errorf("codes run\n%q\nwant\n%q", c, want)
	}
	if ids := sessionIDs(t, d); len(ids) != 0 {
		t.Errorf("the session repl made is left: %q", ids)
	}
}

func TestReplEndOfInput(t *testing.T) {
	d := newFakeDaemon(t, nil)
	d.SetRun(fakePython(d, nil))
	// A block still open at the end of the input runs; exit and quit
	// alone leave.
	got := runCLI(context.Background(), "def g():\n    return 5", nil, "repl", "-q", "--socket", d.socket)
	if got.code != 0 || got.stderr != ">>> ... ... \n" {
		t.Errorf("exit %d, stderr %q", got.code, got.stderr)
	}
	if c := codes(t, d, "s-test-1"); !reflect.DeepEqual(c, []string{"def g():\n    return 5"}) {
		t.Errorf("codes run %q", c)
	}
	for _, in := range []string{"", "quit", "exit ", "quit( )\nx + 1\n", "if x:\n    exit()\n"} {
		got := runCLI(context.Background(), in, nil, "repl", "-q", "--socket", d.socket)
		if got.code != 0 || got.stdout != "" {
			t.Errorf("input %q: %+v", in, got)
		}
	}
	// exit() inside a block is Python's.
	if c := d.LastRequest(t).Code; c != "if x:\n    exit()\n" {
		t.Errorf("last code %q", c)
	}
}

func TestReplNotes(t *testing.T) {
	d := newFakeDaemon(t, nil)
	d.SetRun(fakePython(d, nil))
	got := runCLI(context.Background(), "slow()\nplot()\nprint('no newline', end='')\nslow()\nx = '\xff'\nx = 1\n", nil,
		"repl", "-q", "--timeout", "1.5s", "--socket", d.socket)
	want := ">>> cellblock: timed out after 1.5s\n" +
		">>> cellblock: display[0]: <Figure> (image/png, 3 B; not shown here; cellblock run --json returns it)\n" +
		">>> \n>>> cellblock: timed out after 1.5s\n" +
		">>> cellblock: the input is not UTF-8 text; it is dropped\n>>> >>> \n"
	if got.code != 0 || got.stderr != want || got.stdout != "no newline" {
		t.Errorf("exit %d, stdout %q, stderr\n%q\nwant\n%q", got.code, got.stdout, got.stderr, want)
	}
	for _, r := range d.Requests() {
		if r.TimeoutMs != 1500 {
			t.Errorf("request %+v: want timeout_ms 1500", r.RunRequest)
		}
	}
}

func TestReplSessions(t *testing.T) {
	d := newFakeDaemon(t, nil)
	d.SetRun(fakePython(d, nil))

	// The flags of session new make the session; --keep keeps it.
	got := runCLI(context.Background(), "x = 41\n", nil, "repl", "--socket", d.socket, "--keep",
		"--python", "3.12", "--with", "pandas", "--memory", "512M", "--idle-timeout", "30m")
	if got.code != 0 || !strings.HasPrefix(got.stderr, "cellblock repl: Python 3.12 in session s-test-1 (kept at exit)\n") ||
		!strings.HasSuffix(got.stderr, "cellblock: session s-test-1 is kept: cellblock repl --session s-test-1\n") {
		t.Errorf("repl --keep: %+v", got)
	}
	want := api.SessionRequest{Python: "3.12", Dependencies: []string{"pandas"}, MemoryBytes: 512 << 20, IdleTimeoutMs: 30 * 60 * 1000}
	if reqs := d.SessionRequests(); len(reqs) != 1 || !reflect.DeepEqual(reqs[0], want) {
		t.Errorf("session requests %+v, want [%+v]", reqs, want)
	}

	// --session uses it, and keeps it.
	got = runCLI(context.Background(), "x + 1\n", nil, "repl", "--socket", d.socket, "--session", "s-test-1")
	if got.code != 0 || got.stdout != "42\n" ||
		!strings.HasPrefix(got.stderr, "cellblock repl: Python 3.12 in session s-test-1 (1 runs so far; kept at exit)\n") {
		t.Errorf("repl --session: %+v", got)
	}
	if ids := sessionIDs(t, d); !reflect.DeepEqual(ids, []string{"s-test-1"}) {
		t.Errorf("sessions %q", ids)
	}
	if c := codes(t, d, "s-test-1"); !reflect.DeepEqual(c, []string{"x = 41", "x + 1"}) {
		t.Errorf("codes run %q", c)
	}

	// Refused before anything is sent.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--session", "s-test-1", "--memory", "1G"}, "--memory cannot be used with --session"},
		{[]string{"--session", "s-test-1", "--idle-timeout", "1h"}, "--idle-timeout cannot be used with --session"},
		{[]string{"--session", ""}, "--session: want a session ID"},
		{[]string{"--idle-timeout", "1ms"}, "--idle-timeout: must be at least"},
		{[]string{"--python", "latest"}, "--python:"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		got := runCLI(context.Background(), "x\n", nil, append([]string{"repl", "--socket", d.socket}, tc.args...)...)
		if got.code != 2 || got.stdout != "" || !strings.Contains(got.stderr, "cellblock repl: "+tc.want) {
			t.Errorf("repl %q: %+v; want exit 2 and %q", tc.args, got, tc.want)
		}
	}
	if n := len(d.Requests()); n != 2 {
		t.Errorf("%d runs, want 2", n)
	}

	// Refused by the daemon.
	runCLI(context.Background(), "x\n", nil, "repl", "--socket", d.socket, "--session", "s-nope").check(t, "",
		`cellblock: session_not_found: session: no session "s-nope": it never existed, has expired or been deleted, ended when cellblockd restarted, or belongs to another user`+"\n", 125)
	got = runCLI(context.Background(), "x\n", nil, "repl", "--socket", d.socket, "--memory", "64G")
	if got.code != 125 || !strings.Contains(got.stderr, "cellblock: over_limit: memory_bytes:") {
		t.Errorf("repl --memory 64G: %+v", got)
	}
}

func TestReplSessionEnds(t *testing.T) {
	d := newFakeDaemon(t, nil)
	d.SetRun(fakePython(d, nil))

	// Its interpreter dies: the console says so and ends.
	got := runCLI(context.Background(), "boom()\nx = 1\n", nil, "repl", "-q", "--socket", d.socket)
	want := ">>> cellblock: killed: out of memory (limit 64 MiB)\n" +
		"cellblock: session s-test-1 lost its interpreter: its state is gone, and it refuses runs until deleted (cellblock session rm s-test-1)\n" +
		"cellblock: the console ends with session s-test-1\n"
	got.check(t, "", want, 125)
	if ids := sessionIDs(t, d); len(ids) != 0 {
		t.Errorf("the lost session is left: %q", ids)
	}
	// A lost session cannot be used.
	id := newSession(t, d)
	d.LoseSession(id)
	got = runCLI(context.Background(), "x = 1\n", nil, "repl", "-q", "--socket", d.socket, "--session", id)
	if got.code != 125 || !strings.Contains(got.stderr, "lost its interpreter") {
		t.Errorf("repl in a lost session: %+v", got)
	}

	// Deleted (or expired) while the console waits.
	id = newSession(t, d)
	got = runCLI(context.Background(), "forget()\nx + 1\nx + 2\n", nil, "repl", "-q", "--socket", d.socket, "--session", id)
	if got.code != 125 || !strings.Contains(got.stderr, "cellblock: session_not_found: session: no session \""+id+"\"") ||
		!strings.HasSuffix(got.stderr, "cellblock: the console ends with session "+id+"\n") {
		t.Errorf("repl in a deleted session: %+v", got)
	}
}

// lockedBuffer is a bytes.Buffer that a test reads while the console
// writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor waits until b holds s n times.
func (b *lockedBuffer) waitFor(t *testing.T, s string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(b.String(), s) < n {
		if time.Now().After(deadline) {
			t.Fatalf("waited for %q (%d times) in %q", s, n, b.String())
		}
		time.Sleep(time.Millisecond)
	}
}

// interactiveRepl starts cellblock repl args with a pipe for its input
// and ints for its Ctrl-C, and returns what the test needs to drive it.
func interactiveRepl(t *testing.T, args ...string) (stdin io.WriteCloser, ints chan struct{}, stdout, stderr *lockedBuffer, done chan int) {
	pr, pw := io.Pipe()
	ints = make(chan struct{}, 1)
	stdout, stderr = &lockedBuffer{}, &lockedBuffer{}
	inv := &invocation{stdin: pr, stdout: stdout, stderr: stderr, lookupEnv: func(string) (string, bool) { return "", false },
		takeInterrupts: func() (<-chan struct{}, func()) { return ints, func() {} }}
	done = make(chan int, 1)
	go func() { done <- inv.main(context.Background(), args) }()
	t.Cleanup(func() { pw.Close() })
	return pw, ints, stdout, stderr, done
}

func TestReplCtrlC(t *testing.T) {
	d := newFakeDaemon(t, nil)
	started := make(chan struct{}, 1)
	d.SetRun(fakePython(d, started))
	stdin, ints, stdout, stderr, done := interactiveRepl(t, "repl", "-q", "--socket", d.socket)

	// Ctrl-C during a run stops it, and the console goes on in the same
	// session.
	fmt.Fprint(stdin, "while True: pass\n\n")
	<-started
	ints <- struct{}{}
	select {
	case code := <-d.Canceled():
		if code != "while True: pass\n" {
			t.Errorf("cancelled %q", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Ctrl-C did not stop the run")
	}
	stderr.waitFor(t, "KeyboardInterrupt\n>>> ", 1)

	// Ctrl-C while typing drops the input.
	fmt.Fprintln(stdin, "if x:")
	stderr.waitFor(t, "... ", 1)
	ints <- struct{}{}
	stderr.waitFor(t, "KeyboardInterrupt\n>>> ", 2)
	fmt.Fprintln(stdin, "x + 1")
	stdout.waitFor(t, "42\n", 1)
	stdin.Close()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("repl did not end at the end of its input")
	}
	want := ">>> ... \nKeyboardInterrupt\n>>> ... \nKeyboardInterrupt\n>>> >>> \n"
	if stderr.String() != want {
		t.Errorf("stderr %q, want %q", stderr.String(), want)
	}
	if c := codes(t, d, "s-test-1"); !reflect.DeepEqual(c, []string{"while True: pass", "x + 1"}) {
		t.Errorf("codes run %q", c)
	}
	if ids := sessionIDs(t, d); len(ids) != 0 {
		t.Errorf("sessions left: %q", ids)
	}
}

// A signal other than Ctrl-C ends the console, and the session it made
// with it.
func TestReplTerminated(t *testing.T) {
	d := newFakeDaemon(t, nil)
	started := make(chan struct{}, 1)
	d.SetRun(fakePython(d, started))
	pr, pw := io.Pipe()
	defer pw.Close()
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan cliResult)
	go func() {
		inv, stdout, stderr := testInvocation("", nil)
		inv.stdin = pr
		code := inv.main(ctx, []string{"repl", "-q", "--socket", d.socket})
		done <- cliResult{stdout.String(), stderr.String(), code}
	}()
	fmt.Fprint(pw, "while True: pass\n\n")
	<-started
	cancel(&interrupted{sig: syscall.SIGTERM})
	got := <-done
	if got.code != 143 {
		t.Errorf("exit %d, want 143: %+v", got.code, got)
	}
	if ids := sessionIDs(t, d); len(ids) != 0 {
		t.Errorf("sessions left: %q", ids)
	}
}

// TestReplUsageListsFlags keeps repl's usage in step with its flags.
func TestReplUsageListsFlags(t *testing.T) {
	usage := replCmd{}.usage()
	inv, _, _ := testInvocation("", nil)
	fs := inv.newFlagSet("repl")
	inv.sessionFlags(fs, &api.SessionRequest{})
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(usage, "--"+f.Name+" ") {
			t.Errorf("repl usage does not mention --%s", f.Name)
		}
	})
	for _, f := range []string{"--session ID", "--keep", "--timeout DURATION", "-q "} {
		if !strings.Contains(usage, f) {
			t.Errorf("repl usage does not mention %s", f)
		}
	}
}
