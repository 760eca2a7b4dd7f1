package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/server/servertest"
)

// fakeDaemon is the real API server (package servertest) with made-up
// runs.
type fakeDaemon struct {
	*servertest.Daemon
	socket string
}

// newFakeDaemon serves testInfo with run carrying out every run; nil
// answers every run with an empty result.
func newFakeDaemon(t *testing.T, run servertest.RunFunc) *fakeDaemon {
	t.Helper()
	d := servertest.Start(t, testInfo, run)
	return &fakeDaemon{Daemon: d, socket: d.Socket}
}

// lastRequest returns the last run request and whether it asked for a
// stream.
func (d *fakeDaemon) lastRequest(t *testing.T) (api.RunRequest, bool) {
	t.Helper()
	r := d.LastRequest(t)
	return r.RunRequest, r.Streamed
}

// answer carries out a run by streaming events (when the client accepts
// a stream) and returning res.
func answer(events []api.Event, res api.Result) servertest.RunFunc {
	return func(_ context.Context, _ *api.RunRequest, emit func(stream, data string)) (*api.Result, error) {
		for _, ev := range events {
			emit(ev.Stream, ev.Data)
		}
		return &res, nil
	}
}

var testInfo = api.Info{
	Version:       "0.1.0-test",
	Pythons:       []api.Python{{ID: "cpython-3.11", Version: "3.11.2"}, {ID: "cpython-3.12", Version: "3.12.3", Default: true}},
	CgroupMode:    "v2",
	UserNamespace: true,
	Seccomp:       true,
	Network:       "none",
	Defaults:      api.Limits{TimeoutMs: 30000, MemoryBytes: 256 << 20, Pids: 64, CPUs: 1, OutputBytes: 1 << 20, TmpBytes: 64 << 20},
	Maxima:        api.Limits{TimeoutMs: 300000, MemoryBytes: 4 << 30, Pids: 1024, CPUs: 4, OutputBytes: 16 << 20, TmpBytes: 1 << 30},
	MaxConcurrent: 4,
	QueueSize:     16,
	Dependencies:  &api.DependencyInfo{Installer: "uv", CacheEntries: 3, CacheBytes: 300 << 20, CacheBudget: 10 << 30},
	Tools: &api.ToolCaps{Defaults: api.ToolLimits{Calls: 256, ArgumentBytes: 1 << 20, ResultBytes: 1 << 20, TimeoutMs: 30000},
		Maxima: api.ToolLimits{Calls: 10000, ArgumentBytes: 8 << 20, ResultBytes: 8 << 20, TimeoutMs: 600000}},
}

type cliResult struct {
	stdout, stderr string
	code           int
}

// runCLI runs the command line with args against ctx and returns what it
// printed and its exit status.
func runCLI(ctx context.Context, stdin string, env map[string]string, args ...string) cliResult {
	inv, stdout, stderr := testInvocation(stdin, env)
	code := inv.main(ctx, args)
	return cliResult{stdout.String(), stderr.String(), code}
}

func (r cliResult) check(t *testing.T, stdout, stderr string, code int) {
	t.Helper()
	if r.stdout != stdout {
		t.Errorf("stdout = %q, want %q", r.stdout, stdout)
	}
	if r.stderr != stderr {
		t.Errorf("stderr = %q, want %q", r.stderr, stderr)
	}
	if r.code != code {
		t.Errorf("exit status = %d, want %d", r.code, code)
	}
}

func TestRunStreams(t *testing.T) {
	// Output arrives in chunks, interleaved, with non-ASCII text split
	// into separate chunks and the replacement character the daemon puts
	// in place of invalid bytes.
	events := []api.Event{
		{Stream: "stdout", Data: "caf\u00e9 "},
		{Stream: "stderr", Data: "warning: \ufffd\n"},
		{Stream: "stdout", Data: "\U0001F600\n"},
		{Stream: "stdout", Data: "<done> & \x01\n"},
	}
	res := api.Result{
		ExitCode: 3,
		Stdout:   "caf\u00e9 \U0001F600\n<done> & \x01\n",
		Stderr:   "warning: \ufffd\n",
		Limits:   &api.Limits{TimeoutMs: 2000},
	}
	d := newFakeDaemon(t, answer(events, res))
	env := map[string]string{"FROM_CLIENT": "v"}

	got := runCLI(context.Background(), "", env, "run", "--socket", d.socket,
		"--timeout", "2", "--memory", "128M", "--pids", "64", "--cpus", "1.5",
		"--with", "requests", "--with", "rich>=13", "--python", "3.12",
		"--env", "A=1", "--env", "FROM_CLIENT", "--env", "NOT_SET",
		"-c", "print(1)", "x", "--json")
	got.check(t, "caf\u00e9 \U0001F600\n<done> & \x01\n", "warning: \ufffd\n", 3)

	req, streamed := d.lastRequest(t)
	if !streamed {
		t.Error("the run was not asked for as a stream")
	}
	want := api.RunRequest{
		Code:         "print(1)",
		Filename:     "-c",
		Args:         []string{"x", "--json"},
		Python:       "3.12",
		Env:          map[string]string{"A": "1", "FROM_CLIENT": "v"},
		Dependencies: []string{"requests", "rich>=13"},
		TimeoutMs:    2000,
		MemoryBytes:  128 << 20,
		Pids:         64,
		CPUs:         1.5,
	}
	if !reflect.DeepEqual(req, want) {
		t.Errorf("request =\n %+v\nwant\n %+v", req, want)
	}
}

func TestRunFile(t *testing.T) {
	d := newFakeDaemon(t, answer(nil, api.Result{}))
	script := filepath.Join(t.TempDir(), "job.py")
	if err := os.WriteFile(script, []byte("import sys\nprint(sys.argv)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	runCLI(context.Background(), "", nil, "--socket", d.socket, "run", script, "-v", "--", "x").check(t, "", "", 0)
	req, _ := d.lastRequest(t)
	if req.Code != "import sys\nprint(sys.argv)\n" || req.Filename != "job.py" ||
		!reflect.DeepEqual(req.Args, []string{"-v", "--", "x"}) {
		t.Errorf("request = %+v", req)
	}

	// Code on stdin, and stdin for the program.
	runCLI(context.Background(), "print(2)\n", nil, "run", "--socket", d.socket, "-", "a").check(t, "", "", 0)
	if req, _ := d.lastRequest(t); req.Code != "print(2)\n" || req.Filename != "-" || req.Stdin != "" {
		t.Errorf("request = %+v", req)
	}
	runCLI(context.Background(), "42\n", nil, "run", "--socket", d.socket, "-i", "-c", "input()").check(t, "", "", 0)
	if req, _ := d.lastRequest(t); req.Stdin != "42\n" {
		t.Errorf("stdin = %q, want %q", req.Stdin, "42\n")
	}
}

func TestRunSocketFromEnvironment(t *testing.T) {
	d := newFakeDaemon(t, answer([]api.Event{{Stream: "stdout", Data: "ok\n"}}, api.Result{Stdout: "ok\n"}))
	t.Setenv(api.SocketEnv, d.socket)
	runCLI(context.Background(), "", nil, "run", "-c", "print('ok')").check(t, "ok\n", "", 0)
	// --socket wins over the environment.
	got := runCLI(context.Background(), "", nil, "run", "--socket", d.socket+".nope", "-c", "print('ok')")
	if got.code != 125 || !strings.Contains(got.stderr, d.socket+".nope (--socket)") {
		t.Errorf("got %+v, want the --socket path to be dialled", got)
	}
}

func TestRunNotStreamed(t *testing.T) {
	// cellblockd streams every run it carried out to a client that asked
	// for a stream; a daemon (or a proxy) that answers with one result
	// instead must work all the same. This one is not the real server,
	// which never answers so.
	res := api.Result{ExitCode: 1, Stdout: "out\n", Stderr: "Traceback...\n"}
	dir, err := os.MkdirTemp("", "cb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "d.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept") != api.StreamContentType {
			t.Errorf("Accept = %q, want a stream", r.Header.Get("Accept"))
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(res)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	runCLI(context.Background(), "", nil, "run", "--socket", socket, "-c", "x").check(t, "out\n", "Traceback...\n", 1)
}

func TestRunEndings(t *testing.T) {
	limits := &api.Limits{TimeoutMs: 1500, MemoryBytes: 64 << 20, OutputBytes: 1024}
	for _, tc := range []struct {
		name   string
		events []api.Event
		res    api.Result
		stdout string
		stderr string
		code   int
	}{{
		name:   "timed out",
		events: []api.Event{{Stream: "stdout", Data: "working"}},
		res:    api.Result{ExitCode: 137, TimedOut: true, Stdout: "working", Limits: limits},
		stdout: "working",
		stderr: "\ncellblock: timed out after 1.5s\n",
		code:   124,
	}, {
		name:   "out of memory",
		events: []api.Event{{Stream: "stderr", Data: "allocating\n"}},
		res:    api.Result{ExitCode: 137, OOMKilled: true, Stderr: "allocating\n", Limits: limits},
		stderr: "allocating\ncellblock: killed: out of memory (limit 64 MiB)\n",
		code:   137,
	}, {
		name:   "truncated",
		events: []api.Event{{Stream: "stdout", Data: "yyyy\n"}},
		res:    api.Result{StdoutTruncated: true, Stdout: "yyyy\n", Limits: limits},
		stdout: "yyyy\n",
		stderr: "cellblock: stdout truncated at 1024 bytes\n",
		code:   0,
	}, {
		name: "exit status",
		res:  api.Result{ExitCode: 42},
		code: 42,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			d := newFakeDaemon(t, answer(tc.events, tc.res))
			runCLI(context.Background(), "", nil, "run", "--socket", d.socket, "-c", "x").check(t, tc.stdout, tc.stderr, tc.code)
		})
	}
}

func TestRunRefused(t *testing.T) {
	// The server itself refuses a limit above its maximum.
	d := newFakeDaemon(t, func(context.Context, *api.RunRequest, func(string, string)) (*api.Result, error) {
		t.Error("a run over the limits reached the executor")
		return &api.Result{}, nil
	})
	runCLI(context.Background(), "", nil, "run", "--socket", d.socket, "--timeout", "10m", "-c", "x").check(t, "",
		"cellblock: over_limit: timeout_ms: 600000 is above the daemon's maximum of 300000\n", 125)

	// --json prints the object all the same, but says the run was not
	// carried out.
	got := runCLI(context.Background(), "", nil, "run", "--socket", d.socket, "--json", "--timeout", "10m", "-c", "x")
	if got.code != 125 || got.stderr != "" {
		t.Errorf("--json: exit %d, stderr %q; want 125 and nothing", got.code, got.stderr)
	}
	var res api.Result
	if err := json.Unmarshal([]byte(got.stdout), &res); err != nil || res.Error == nil || res.Error.Type != api.ErrOverLimit {
		t.Errorf("--json printed %q (%v), want the result with its error", got.stdout, err)
	}
}

func TestRunJSON(t *testing.T) {
	res := api.Result{
		ExitCode: 1, Stdout: "<b>caf\u00e9</b>\n", Stderr: "boom\n", TimedOut: true,
		DurationMs: 12, CPUMs: 10, MemoryPeakBytes: 9 << 20, RunID: "r1",
	}
	d := newFakeDaemon(t, answer([]api.Event{{Stream: "stdout", Data: "must not appear"}}, res))
	got := runCLI(context.Background(), "", nil, "run", "--json", "--socket", d.socket, "-c", "x")
	if got.code != 0 || got.stderr != "" {
		t.Errorf("exit %d, stderr %q; want 0 and nothing", got.code, got.stderr)
	}
	if strings.Count(got.stdout, "\n") != 1 || !strings.HasSuffix(got.stdout, "}\n") {
		t.Errorf("stdout %q is not one JSON object on one line", got.stdout)
	}
	if !strings.Contains(got.stdout, `"stdout":"<b>caf\u00e9</b>\n"`) && !strings.Contains(got.stdout, `"stdout":"<b>café</b>\n"`) {
		t.Errorf("stdout %q: output mangled", got.stdout)
	}
	var back map[string]any
	if err := json.Unmarshal([]byte(got.stdout), &back); err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"exit_code", "stdout", "stderr", "stdout_truncated", "stderr_truncated",
		"timed_out", "oom_killed", "duration_ms", "cpu_ms", "memory_peak_bytes", "error"} {
		if _, ok := back[field]; !ok {
			t.Errorf("result object lacks %q", field)
		}
	}
	if _, streamed := d.lastRequest(t); streamed {
		t.Error("--json asked for a stream")
	}
}

func TestRunInterrupted(t *testing.T) {
	for _, tc := range []struct {
		sig  syscall.Signal
		json bool
		want int
	}{
		{syscall.SIGINT, false, 130},
		{syscall.SIGTERM, false, 143},
		{syscall.SIGINT, true, 130},
	} {
		started := make(chan struct{})
		gone := make(chan struct{})
		d := newFakeDaemon(t, func(ctx context.Context, _ *api.RunRequest, emit func(string, string)) (*api.Result, error) {
			emit("stdout", "tick\n")
			close(started)
			select {
			case <-ctx.Done():
				close(gone)
				return nil, ctx.Err()
			case <-time.After(10 * time.Second):
				return &api.Result{}, nil
			}
		})
		ctx, cancel := context.WithCancelCause(context.Background())
		go func() {
			<-started
			cancel(&interrupted{sig: tc.sig})
		}()
		args := []string{"run", "--socket", d.socket, "-c", "while True: pass"}
		if tc.json {
			args = append(args, "--json")
		}
		got := runCLI(ctx, "", nil, args...)
		if got.code != tc.want || !strings.Contains(got.stderr, "interrupted") {
			t.Errorf("%v: exit %d, stderr %q; want %d and a note", tc.sig, got.code, got.stderr, tc.want)
		}
		select {
		case <-gone:
		case <-time.After(5 * time.Second):
			t.Errorf("%v: the daemon did not see the client go away", tc.sig)
		}
	}
}

func TestSignalsCancel(t *testing.T) {
	sig := watchSignals(context.Background())
	defer sig.stop()
	<-sig.ready
	ctx := sig.ctx
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("SIGINT did not cancel the context")
	}
	if got := interruptedStatus(ctx); got != 130 {
		t.Errorf("status after SIGINT = %d, want 130", got)
	}
}

// An interactive command takes SIGINT for itself; SIGTERM still cancels.
func TestSignalsTaken(t *testing.T) {
	sig := watchSignals(context.Background())
	defer sig.stop()
	ints, release := sig.takeInterrupts()
	for range 2 {
		if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ints:
		case <-time.After(5 * time.Second):
			t.Fatal("SIGINT did not reach the command that took it")
		}
	}
	if sig.ctx.Err() != nil {
		t.Fatal("a SIGINT taken by the command cancelled the context")
	}
	release()
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sig.ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("SIGTERM did not cancel the context")
	}
	if got := interruptedStatus(sig.ctx); got != 143 {
		t.Errorf("status after SIGTERM = %d, want 143", got)
	}
}

func TestUnreachable(t *testing.T) {
	dir, err := os.MkdirTemp("", "cb")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)

	missing := filepath.Join(dir, "missing.sock")
	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()

	for _, tc := range []struct {
		socket string
		want   []string
	}{
		{missing, []string{"cellblock: cannot reach cellblockd at " + missing + ": there is no socket there",
			"systemctl status cellblockd", "--socket PATH or $CELLBLOCK_SOCKET"}},
		{stale, []string{"nothing is listening", "systemctl status cellblockd"}},
	} {
		for _, args := range [][]string{
			{"run", "--socket", tc.socket, "-c", "x"},
			{"run", "--socket", tc.socket, "--json", "-c", "x"},
			{"info", "--socket", tc.socket},
		} {
			got := runCLI(context.Background(), "", nil, args...)
			if got.code != 125 || got.stdout != "" {
				t.Errorf("%q: exit %d, stdout %q; want 125 and nothing", args, got.code, got.stdout)
			}
			for _, w := range tc.want {
				if !strings.Contains(got.stderr, w) {
					t.Errorf("%q: stderr %q lacks %q", args, got.stderr, w)
				}
			}
		}
	}
	if got := runCLI(context.Background(), "", nil, "health", "--socket", missing); got.code != 1 {
		t.Errorf("health: exit %d, want 1", got.code)
	}

	if os.Geteuid() == 0 {
		t.Log("skipping the permission check: root may open any socket")
		return
	}
	d := newFakeDaemon(t, answer(nil, api.Result{}))
	if err := os.Chmod(d.socket, 0); err != nil {
		t.Fatal(err)
	}
	got := runCLI(context.Background(), "", nil, "run", "--socket", d.socket, "-c", "x")
	if got.code != 125 || !strings.Contains(got.stderr, "permission denied") || !strings.Contains(got.stderr, `"cellblock" group`) {
		t.Errorf("exit %d, stderr %q; want 125 and a word about the group", got.code, got.stderr)
	}
}

func TestInfo(t *testing.T) {
	d := newFakeDaemon(t, nil)
	got := runCLI(context.Background(), "", nil, "info", "--json", "--socket", d.socket)
	if got.code != 0 || got.stderr != "" || strings.Count(got.stdout, "\n") != 1 {
		t.Fatalf("info --json: %+v", got)
	}
	var info api.Info
	if err := json.Unmarshal([]byte(got.stdout), &info); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(info, testInfo) {
		t.Errorf("info --json = %+v, want %+v", info, testInfo)
	}

	got = runCLI(context.Background(), "", nil, "--socket", d.socket, "info")
	if got.code != 0 || got.stderr != "" {
		t.Fatalf("info: %+v", got)
	}
	for _, want := range []string{"0.1.0-test", "3.11.2, 3.12.3 (default)", "v2", "user namespace", "yes",
		"256 MiB", "4 GiB", "30s", "5m", "1024", "4 at once", "uv", "tool calls per run  256", "tool answer"} {
		if !strings.Contains(got.stdout, want) {
			t.Errorf("info lacks %q:\n%s", want, got.stdout)
		}
	}
}

func TestCommandLine(t *testing.T) {
	d := newFakeDaemon(t, answer(nil, api.Result{}))
	for _, tc := range []struct {
		args       []string
		code       int
		stdoutHas  string
		stderrHas  string
		noDaemonOK bool
	}{
		{args: nil, code: 2, stderrHas: "Commands:"},
		{args: []string{"bogus"}, code: 2, stderrHas: `unknown command "bogus"`},
		{args: []string{"env"}, code: 2, stderrHas: `missing subcommand`},
		{args: []string{"env", "frob"}, code: 2, stderrHas: `unknown subcommand "frob"`},
		{args: []string{"env", "build"}, code: 2, stderrHas: `at least one --with`},
		{args: []string{"env", "build", "--with", "pandas", "--preload", "pandas,scikit-learn"}, code: 2, stderrHas: `--preload "scikit-learn": "scikit-learn" is not a module name`},
		{args: []string{"env", "build", "--with", "pandas", "--preload", "pandas,"}, code: 2, stderrHas: `--preload "": `},
		{args: []string{"env", "build", "--with", "pandas", "--preload", "pandas", "--no-preload"}, code: 2, stderrHas: `--preload and --no-preload together`},
		{args: []string{"env", "build", "-h"}, code: 0, stdoutHas: "--preload MODULES"},
		{args: []string{"--bogus"}, code: 2, stderrHas: "-bogus"},
		{args: []string{"help"}, code: 0, stdoutHas: "run "},
		{args: []string{"-h"}, code: 0, stdoutHas: "Commands:"},
		{args: []string{"--help"}, code: 0, stdoutHas: "Commands:"},
		{args: []string{"help", "run"}, code: 0, stdoutHas: "--memory SIZE"},
		{args: []string{"help", "nope"}, code: 2, stderrHas: "unknown command"},
		{args: []string{"run", "-h"}, code: 0, stdoutHas: "--with REQUIREMENT"},
		{args: []string{"run", "--help"}, code: 0, stdoutHas: "Exit status"},
		{args: []string{"info", "-h"}, code: 0, stdoutHas: "--json"},
		{args: []string{"run"}, code: 2, stderrHas: "missing FILE, -c CODE or -"},
		{args: []string{"run", "--memory", "lots", "x.py"}, code: 2, stderrHas: "-memory"},
		{args: []string{"run", "--timeout", "soon", "x.py"}, code: 2, stderrHas: "-timeout"},
		{args: []string{"run", "--python", "latest", "-c", "x"}, code: 2, stderrHas: "--python"},
		{args: []string{"run", "/nonexistent/x.py"}, code: 2, stderrHas: "no such file"},
		{args: []string{"info", "extra"}, code: 2, stderrHas: "unexpected argument"},
		{args: []string{"version"}, code: 0, stdoutHas: "cellblock "},
		{args: []string{"--version"}, code: 0, stdoutHas: "cellblock "},
		{args: []string{"--socket", d.socket, "health"}, code: 0, stdoutHas: "ok"},
	} {
		got := runCLI(context.Background(), "", nil, tc.args...)
		if got.code != tc.code || !strings.Contains(got.stdout, tc.stdoutHas) || !strings.Contains(got.stderr, tc.stderrHas) {
			t.Errorf("cellblock %q: exit %d, stdout %q, stderr %q; want %d, %q in stdout, %q in stderr",
				tc.args, got.code, got.stdout, got.stderr, tc.code, tc.stdoutHas, tc.stderrHas)
		}
	}
}

// TestOutputBytes checks that bytes written by the program reach the
// terminal exactly, whatever the chunking.
func TestOutputBytes(t *testing.T) {
	var events []api.Event
	var want bytes.Buffer
	for i := range 1000 {
		s := strings.Repeat("\u00e9\U0001F600x", i%7) + "\n"
		events = append(events, api.Event{Stream: "stdout", Data: s})
		want.WriteString(s)
	}
	d := newFakeDaemon(t, answer(events, api.Result{Stdout: want.String()}))
	got := runCLI(context.Background(), "", nil, "run", "--socket", d.socket, "-c", "x")
	if got.stdout != want.String() || got.code != 0 {
		t.Errorf("output differs (%d bytes, want %d), exit %d", len(got.stdout), want.Len(), got.code)
	}
}
