package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/client"
)

func TestListTools(t *testing.T) {
	fd := startFakeDaemon(t)
	c := connect(t, newServer(t, fd))
	ctx := context.Background()

	res, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	tools := map[string]mcp.Tool{}
	for _, tool := range res.Tools {
		tools[tool.Name] = tool
	}
	for _, name := range []string{ToolRunPython, ToolCheckEnvironment, ToolValidatePython, ToolResetSession} {
		tool, ok := tools[name]
		if !ok {
			t.Fatalf("tool %s is not listed (got %v)", name, res.Tools)
		}
		if tool.InputSchema.Type != "object" {
			t.Errorf("%s: input schema type %q", name, tool.InputSchema.Type)
		}
		if tool.OutputSchema.Type != "object" {
			t.Errorf("%s: no output schema", name)
		}
		if len(tool.Description) < 200 {
			t.Errorf("%s: description too short for a model to use: %q", name, tool.Description)
		}
	}

	run := tools[ToolRunPython]
	// Limits and versions come from /v1/info, not from constants.
	mustContain(t, run.Description, "123 s", "3 GiB", "7 s", "200 MiB", "3.12.7 (default)", "3.11.9",
		"No network", "/tmp", "working directory", "dependencies", "PEP 723", "Example", "isError",
		"local wheel directory", "Up to 6 runs",
		"notebook cell", "value comes back", `"inputs"`, "matplotlib", "as images", "DataFrames", "as HTML", "cellblock.display(obj)",
		"image content", "embedded resources", "1 MiB of base64", "4 MiB and 16 in all", "256 KiB", `"(sent as image content 1)"`)
	if got := run.InputSchema.Required; !reflect.DeepEqual(got, []string{"code"}) {
		t.Errorf("run_python required = %v", got)
	}
	props := run.InputSchema.Properties
	// Sessions: what persists, what does not, expiry and reset.
	mustContain(t, run.Description, `Without "session", every call starts from a clean slate`,
		`"session": "NAME"`, "variables, functions, imports and files in /work persist across calls with the same name",
		"expires after 10 minutes without a call", "one call at a time", "private to this MCP connection", "8 at once",
		"reset_session", `"session": "sales"`)
	mustContain(t, fmt.Sprint(props["session"]), "persist across calls", "10 minutes", "fixed", "reset_session", "One call at a time")
	mustContain(t, tools[ToolResetSession].Description, "fresh", "expired (after 10 minutes", "lost", "Example")
	if got := tools[ToolResetSession].InputSchema.Required; !reflect.DeepEqual(got, []string{"session"}) {
		t.Errorf("reset_session required = %v", got)
	}
	if _, ok := run.OutputSchema.Properties["session"]; !ok {
		t.Error("run_python output schema lacks session")
	}
	for _, p := range []string{"code", "dependencies", "timeout_seconds", "python", "env", "memory_mb", "inputs", "session"} {
		if _, ok := props[p]; !ok {
			t.Errorf("run_python has no %q parameter", p)
		}
	}
	schemaField := func(prop, field string) any {
		m, _ := props[prop].(map[string]any)
		return m[field]
	}
	if got := schemaField("timeout_seconds", "maximum"); got != float64(123) {
		t.Errorf("timeout_seconds maximum = %v, want 123", got)
	}
	if got := schemaField("memory_mb", "maximum"); got != float64(3072) {
		t.Errorf("memory_mb maximum = %v, want 3072", got)
	}
	if got := schemaField("dependencies", "type"); got != "array" {
		t.Errorf("dependencies type = %v", got)
	}
	if got := schemaField("env", "type"); got != "object" {
		t.Errorf("env type = %v", got)
	}
	if got := schemaField("inputs", "type"); got != "object" {
		t.Errorf("inputs type = %v", got)
	}
	mustContain(t, fmt.Sprint(schemaField("python", "description")), "3.12.7 (default)")
	out := run.OutputSchema
	for _, f := range []string{"exit_code", "stdout", "stderr", "timed_out", "oom_killed", "duration_ms", "cpu_ms", "memory_peak_bytes", "error"} {
		if _, ok := out.Properties[f]; !ok {
			t.Errorf("run_python output schema lacks %q", f)
		}
	}
	mustContain(t, tools[ToolValidatePython].Description, "without running", "3.12.7 (default)", "Example")
	mustContain(t, tools[ToolCheckEnvironment].Description, "Python versions", "limits", "network")
}

func TestRunGoodCode(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			fd := startFakeDaemon(t)
			want := api.Result{
				Stdout: "hello\n", Stderr: "note\n", DurationMs: 42, CPUMs: 30, MemoryPeakBytes: 9 << 20,
				Python: "3.11.9",
				Limits: &api.Limits{TimeoutMs: 2500, MemoryBytes: 100 << 20},
			}
			fd.run = func(_ context.Context, req *api.RunRequest, emit func(string, string)) *api.Result {
				emit("stdout", "hello\n")
				emit("stderr", "note\n")
				r := want
				return &r
			}
			c := connect(t, newServer(t, fd), p.opts...)
			res := callTool(t, context.Background(), c, ToolRunPython, map[string]any{
				"code":            "print('hello')",
				"dependencies":    []string{" numpy ", "numpy", "rich"},
				"timeout_seconds": 2.5,
				"memory_mb":       100,
				"python":          "3.11",
				"env":             map[string]string{"GREETING": "hi"},
				"inputs":          map[string]any{"n": 3, "names": []string{"a", "b"}, "cfg": map[string]any{"deep": nil}},
			})
			if res.IsError {
				t.Fatalf("isError for a clean run: %s", resultText(res))
			}
			text := resultText(res)
			mustContain(t, text, "exited normally", "--- stdout ---\nhello", "--- stderr ---\nnote", "Python 3.11.9", "42 ms wall")
			if got := resultOf(t, res); !reflect.DeepEqual(got, asServed(t, want, got)) {
				t.Errorf("structured content = %+v, want %+v", got, asServed(t, want, got))
			}

			req := fd.lastRequest(t)
			if req.Code != "print('hello')" || req.TimeoutMs != 2500 || req.MemoryBytes != 100<<20 ||
				req.Python != "3.11" || req.Env["GREETING"] != "hi" || req.Env["PYTHONUNBUFFERED"] != "1" ||
				!reflect.DeepEqual(req.Dependencies, []string{"numpy", "rich"}) {
				t.Errorf("the daemon got %+v", req)
			}
			if req.Mode != api.ModeCell {
				t.Errorf("the daemon got mode %q, want %q", req.Mode, api.ModeCell)
			}
			wantInputs := map[string]string{"n": `3`, "names": `["a","b"]`, "cfg": `{"deep":null}`}
			if len(req.Inputs) != len(wantInputs) {
				t.Errorf("the daemon got inputs %s, want %v", req.Inputs, wantInputs)
			}
			for name, want := range wantInputs {
				if got := string(req.Inputs[name]); got != want {
					t.Errorf("the daemon got input %s = %s, want %s", name, got, want)
				}
			}
			if fd.streamed() != 1 {
				t.Errorf("run_python did not ask for a stream")
			}
		})
	}
}

func TestRunFailures(t *testing.T) {
	const traceback = "Traceback (most recent call last):\n  File \"/work/main.py\", line 1, in <module>\n    1/0\n" +
		"ZeroDivisionError: division by zero\n"
	tests := []struct {
		name   string
		result api.Result
		wants  []string
	}{
		{
			name:   "raises",
			result: api.Result{ExitCode: 1, Stderr: traceback},
			wants:  []string{"uncaught exception", "ZeroDivisionError: division by zero", "--- stderr ---\nTraceback (most recent call last):", "--- stdout (empty) ---"},
		},
		{
			name:   "exits non-zero",
			result: api.Result{ExitCode: 3, Stdout: "partial\n"},
			wants:  []string{"exited with status 3", "partial"},
		},
		{
			name:   "timed out",
			result: api.Result{ExitCode: 137, TimedOut: true, Stdout: "tick\n", Limits: &api.Limits{TimeoutMs: 1000}},
			wants:  []string{"ran past its wall-clock timeout of 1 s", "timeout_seconds", "tick"},
		},
		{
			name:   "killed for memory",
			result: api.Result{ExitCode: 137, OOMKilled: true, MemoryPeakBytes: 64 << 20, Limits: &api.Limits{MemoryBytes: 64 << 20}},
			wants:  []string{"went over its memory limit of 64 MiB", "memory_mb"},
		},
		{
			name:   "killed by a signal",
			result: api.Result{ExitCode: 139},
			wants:  []string{"signal 11 (SIGSEGV)"},
		},
		{
			name:   "output cut off",
			result: api.Result{ExitCode: 1, Stdout: "xxxx", StdoutTruncated: true, Limits: &api.Limits{OutputBytes: 1 << 20}},
			wants:  []string{"--- stdout (cut off at the output limit of 1 MiB) ---"},
		},
	}
	fd := startFakeDaemon(t)
	c := connect(t, newServer(t, fd))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fd.run = func(context.Context, *api.RunRequest, func(string, string)) *api.Result {
				r := tt.result
				return &r
			}
			res := callTool(t, context.Background(), c, ToolRunPython, map[string]any{"code": "1/0", "env": map[string]any{"PYTHONUNBUFFERED": ""}})
			if !res.IsError {
				t.Errorf("isError is false: %s", resultText(res))
			}
			mustContain(t, resultText(res), tt.wants...)
			if env := fd.lastRequest(t).Env; env["PYTHONUNBUFFERED"] != "" {
				t.Errorf("env PYTHONUNBUFFERED was not left as the caller set it: %v", env)
			}
			if got := resultOf(t, res); !reflect.DeepEqual(got, asServed(t, tt.result, got)) {
				t.Errorf("structured content = %+v, want %+v", got, asServed(t, tt.result, got))
			}
		})
	}
}

func TestRunRefused(t *testing.T) {
	fd := startFakeDaemon(t)
	c := connect(t, newServer(t, fd))
	tests := []struct {
		err   api.Error
		wants []string
	}{
		{
			err:   api.Error{Type: api.ErrOverLimit, Field: "timeout_ms", Message: "500000 is above the daemon's maximum of 123000"},
			wants: []string{"did not run", "over_limit", "timeout_seconds", "above the daemon's maximum", "timeout_seconds 123, memory_mb 3072"},
		},
		{
			err:   api.Error{Type: api.ErrUnknownPython, Field: "python", Message: "no interpreter matches 2.7"},
			wants: []string{"unknown_python", "2.7", "3.12.7 (default), 3.11.9"},
		},
		{
			err:   api.Error{Type: api.ErrDependency, Message: "no matching distribution for nosuchpkg"},
			wants: []string{"dependency_error", "nosuchpkg"},
		},
		{
			err:   api.Error{Type: api.ErrBusy, Message: "the run queue is full"},
			wants: []string{"busy", "call again"},
		},
	}
	for _, tt := range tests {
		t.Run(string(tt.err.Type), func(t *testing.T) {
			fd.run = func(context.Context, *api.RunRequest, func(string, string)) *api.Result {
				e := tt.err
				return &api.Result{Error: &e}
			}
			res := callTool(t, context.Background(), c, ToolRunPython, map[string]any{"code": "print(1)"})
			if !res.IsError {
				t.Error("isError is false for a refused run")
			}
			mustContain(t, resultText(res), tt.wants...)
			got := resultOf(t, res)
			if got.Error == nil || *got.Error != tt.err {
				t.Errorf("structured error = %+v, want %+v", got.Error, tt.err)
			}
		})
	}
}

func TestRunBadArguments(t *testing.T) {
	fd := startFakeDaemon(t)
	c := connect(t, newServer(t, fd))
	tests := []struct {
		name string
		args map[string]any
		want string
	}{
		{"no code", map[string]any{}, `"code" is required`},
		{"empty code", map[string]any{"code": "   "}, `"code" is required`},
		{"code not a string", map[string]any{"code": 42}, `"code" must be a string holding the whole program, such as "print(1)", not a number`},
		{"negative timeout", map[string]any{"code": "1", "timeout_seconds": -1}, `"timeout_seconds" must be a positive number of seconds`},
		{"zero timeout", map[string]any{"code": "1", "timeout_seconds": 0}, `"timeout_seconds" must be a positive number`},
		{"timeout not a number", map[string]any{"code": "1", "timeout_seconds": "10s"}, `"timeout_seconds" must be a number of seconds, such as 10, not a string`},
		{"timeout over the maximum", map[string]any{"code": "1", "timeout_seconds": 124}, `"timeout_seconds" is 124; the most this sandbox allows is 123 (the default is 7)`},
		{"memory over the maximum", map[string]any{"code": "1", "memory_mb": 5000}, `"memory_mb" is 5000; the most this sandbox allows is 3072 (the default is 200)`},
		{"dependencies not a list", map[string]any{"code": "1", "dependencies": "numpy"}, `"dependencies" must be an array of requirement strings`},
		{"env value not a string", map[string]any{"code": "1", "env": map[string]any{"A": 1}}, `"env" must be an object mapping names to string values`},
		{"bad env name", map[string]any{"code": "1", "env": map[string]any{"1A": "x"}}, `bad_request (env): "1A" is not a valid variable name`},
		{"reserved env name", map[string]any{"code": "1", "env": map[string]any{"LD_PRELOAD": "x"}}, "set by the sandbox"},
		{"unknown argument", map[string]any{"code": "1", "stdin": "x"}, `unknown argument "stdin": this tool takes code, dependencies, timeout_seconds, python, env, memory_mb, inputs`},
		{"python not a version", map[string]any{"code": "1", "python": "latest"}, `"python" must be a version such as "3.12", not "latest"; available: 3.12.7 (default), 3.11.9`},
		{"inputs not an object", map[string]any{"code": "1", "inputs": []any{1, 2}}, `"inputs" must be an object mapping names to JSON values, such as {"n": 3`},
		{"input name not an identifier", map[string]any{"code": "1", "inputs": map[string]any{"1x": 1}}, `"inputs": "1x" is not a name a global can have`},
		{"input name a keyword", map[string]any{"code": "1", "inputs": map[string]any{"class": 1}}, `"inputs": "class" is not a name a global can have`},
		{"input name a dunder", map[string]any{"code": "1", "inputs": map[string]any{"__builtins__": 1}}, `"inputs": "__builtins__" is not a name`},
		{"too many inputs", map[string]any{"code": "1", "inputs": manyInputs(api.MaxInputs + 1)}, `"inputs": has 65 entries; the maximum is 64`},
		{"inputs too large", map[string]any{"code": "1", "inputs": map[string]any{"big": strings.Repeat("x", api.MaxInputsBytes)}}, `"inputs": are more than 1048576 bytes`},
		{"input nested too deep", map[string]any{"code": "1", "inputs": map[string]any{"deep": nested(api.MaxInputDepth + 1)}}, `"inputs": the value of "deep" nests 65 deep; the maximum is 64`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := callTool(t, context.Background(), c, ToolRunPython, tt.args)
			if !res.IsError {
				t.Errorf("isError is false for %v: %s", tt.args, resultText(res))
			}
			mustContain(t, resultText(res), tt.want)
		})
	}
	if reqs := fd.Requests(); len(reqs) != 0 {
		t.Errorf("bad arguments reached the daemon: %+v", reqs)
	}
}

// manyInputs is n inputs named x0, x1, ...
func manyInputs(n int) map[string]any {
	m := make(map[string]any, n)
	for i := range n {
		m[fmt.Sprintf("x%d", i)] = i
	}
	return m
}

// nested is a list nested depth deep.
func nested(depth int) any {
	var v any = []any{}
	for range depth - 1 {
		v = []any{v}
	}
	return v
}

// TestConcurrentCalls makes 8 calls at once and checks that each gets its
// own result and its own progress notifications.
func TestConcurrentCalls(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			const n = 8
			info := testInfo()
			info.MaxConcurrent = n // all of them at once
			fd := startFakeDaemonFor(t, info)
			var arrived sync.WaitGroup
			arrived.Add(n)
			allIn := make(chan struct{})
			go func() { arrived.Wait(); close(allIn) }()
			fd.run = func(ctx context.Context, req *api.RunRequest, emit func(string, string)) *api.Result {
				emit("stdout", "out of "+req.Code+"\n")
				arrived.Done()
				// Every run waits for all the others: the calls really
				// are in flight together.
				select {
				case <-allIn:
				case <-time.After(10 * time.Second):
					return &api.Result{ExitCode: 99, Stderr: "not concurrent"}
				}
				return &api.Result{Stdout: "out of " + req.Code + "\n"}
			}
			c := connect(t, newServer(t, fd), p.opts...)
			ns := collect(c)

			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					code := fmt.Sprintf("print(%d)", i)
					res, err := c.CallTool(context.Background(), toolRequest(ToolRunPython, map[string]any{"code": code}, fmt.Sprintf("tok-%d", i)))
					switch {
					case err != nil:
						errs <- fmt.Errorf("call %d: %v", i, err)
					case res.IsError:
						errs <- fmt.Errorf("call %d: isError: %s", i, resultText(res))
					case !strings.Contains(resultText(res), "out of "+code):
						errs <- fmt.Errorf("call %d got someone else's output: %s", i, resultText(res))
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}

			for i := range n {
				want := fmt.Sprintf("out of print(%d)\n", i)
				var msgs []string
				ns.await(t, "progress of call "+fmt.Sprint(i), 5*time.Second, func() bool {
					msgs, _ = ns.progress(fmt.Sprintf("tok-%d", i))
					return len(msgs) > 0
				})
				if got := strings.Join(msgs, ""); got != want {
					t.Errorf("progress of call %d = %q, want %q", i, got, want)
				}
			}
		})
	}
}

func TestNotificationsDuringRun(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			fd := startFakeDaemon(t)
			c := connect(t, newServer(t, fd), p.opts...)
			ns := collect(c)
			var req mcp.SetLevelRequest
			req.Params.Level = mcp.LoggingLevelInfo
			//lint:ignore SA1019 the server still offers logging/setLevel to clients of earlier protocol versions, and this client asks for it
			if err := c.SetLevel(context.Background(), req); err != nil {
				t.Fatal(err)
			}

			// The run does not end until the first chunk has reached the
			// client as a notification: they arrive while it goes on.
			fd.run = func(ctx context.Context, _ *api.RunRequest, emit func(string, string)) *api.Result {
				emit("stdout", "line 1\n")
				if !ns.wait(5*time.Second, func() bool { msgs, _ := ns.progress("tok"); return len(msgs) > 0 }) {
					return &api.Result{ExitCode: 99, Stderr: "no notification during the run"}
				}
				emit("stderr", "line 2\n")
				emit("stdout", strings.Repeat("é", maxNotifyBytes)) // split in pieces, on rune boundaries
				return &api.Result{Stdout: "line 1\n", Stderr: "line 2\n"}
			}
			res, err := c.CallTool(context.Background(), toolRequest(ToolRunPython, map[string]any{"code": "long()"}, "tok"))
			if err != nil {
				t.Fatal(err)
			}
			if res.IsError {
				t.Fatalf("isError: %s", resultText(res))
			}

			var msgs []string
			var values []float64
			ns.await(t, "all progress notifications", 5*time.Second, func() bool {
				msgs, values = ns.progress("tok")
				return len(strings.Join(msgs, "")) == len("line 1\nline 2\n")+2*maxNotifyBytes
			})
			if !strings.HasPrefix(strings.Join(msgs, ""), "line 1\nline 2\n") {
				t.Errorf("progress messages = %q", msgs)
			}
			for i, m := range msgs {
				if len(m) > maxNotifyBytes || !utf8Valid(m) {
					t.Errorf("progress message %d is %d bytes, valid UTF-8 %v", i, len(m), utf8Valid(m))
				}
				if i > 0 && values[i] <= values[i-1] {
					t.Errorf("progress does not increase: %v", values)
				}
			}
			if p.name == "legacy" {
				// Logging notifications, for clients that asked for info logs.
				ns.await(t, "log notifications", 5*time.Second, func() bool {
					return len(ns.logs("stderr")) > 0 && len(ns.logs("stdout")) > 0
				})
				if got := strings.Join(ns.logs("stderr"), ""); got != "line 2\n" {
					t.Errorf("stderr log = %q", got)
				}
			}
		})
	}
}

func TestNoNotificationsWithoutToken(t *testing.T) {
	fd := startFakeDaemon(t)
	fd.run = func(_ context.Context, _ *api.RunRequest, emit func(string, string)) *api.Result {
		emit("stdout", "x\n")
		return &api.Result{Stdout: "x\n"}
	}
	c := connect(t, newServer(t, fd), protocols[0].opts...)
	ns := collect(c)
	callTool(t, context.Background(), c, ToolRunPython, map[string]any{"code": "print('x')"})
	time.Sleep(3 * flushInterval)
	if got := ns.count(string(mcp.MethodNotificationProgress)); got != 0 {
		t.Errorf("%d progress notifications without a progress token", got)
	}
	if got := ns.count(string(mcp.MethodNotificationMessage)); got != 0 {
		t.Errorf("%d log notifications without logging/setLevel", got)
	}
}

func TestCancel(t *testing.T) {
	fd := startFakeDaemon(t)
	started := make(chan string, 1)
	fd.run = blockUntilCanceled(started)
	c := connect(t, newServer(t, fd))

	ctx, cancel := context.WithCancel(context.Background())
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	answers := make(chan answer, 1)
	go func() {
		res, err := c.CallTool(ctx, toolRequest(ToolRunPython, map[string]any{"code": "while True: pass"}, nil))
		answers <- answer{res, err}
	}()
	<-started
	cancel()
	expectCanceled(t, fd, "while True: pass")
	// The in-process transport hands the handler's answer back even after
	// the caller's context ended; other transports fail the call instead.
	switch a := <-answers; {
	case a.err != nil:
		if !isCanceled(a.err) {
			t.Errorf("CallTool after cancel = %v, want a cancellation error", a.err)
		}
	case !a.res.IsError || !strings.Contains(resultText(a.res), "cancelled"):
		t.Errorf("CallTool after cancel = %+v (%s), want a cancellation", a.res, resultText(a.res))
	}
}

func TestCheckEnvironment(t *testing.T) {
	fd := startFakeDaemon(t)
	c := connect(t, newServer(t, fd))
	// Load the daemon for real: every slot taken and one run queued.
	// The daemon's load is asked afresh on every call.
	release := make(chan struct{})
	started := make(chan struct{}, fd.info.MaxConcurrent+1)
	fd.run = func(ctx context.Context, _ *api.RunRequest, _ func(string, string)) *api.Result {
		started <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return &api.Result{}
	}
	var runs sync.WaitGroup
	defer runs.Wait()
	defer close(release)
	dc := client.New(fd.socket)
	for range fd.info.MaxConcurrent + 1 {
		runs.Add(1)
		go func() {
			defer runs.Done()
			_, _ = dc.Run(context.Background(), &api.RunRequest{Code: "pass"})
		}()
	}
	for range fd.info.MaxConcurrent {
		<-started
	}
	fd.WaitLoad(t, fd.info.MaxConcurrent, 1, 10*time.Second)
	want := fd.info
	want.Running, want.Queued = fd.info.MaxConcurrent, 1

	res := callTool(t, context.Background(), c, ToolCheckEnvironment, nil)
	if res.IsError {
		t.Fatalf("isError: %s", resultText(res))
	}
	mustContain(t, resultText(res), "9.9.9-test", fd.socket, "3.12.7 (default), 3.11.9",
		"7 s / 123 s", "200 MiB / 3 GiB", "48 / 512", "No network", "cgroup mode v2", "user namespace yes",
		"seccomp filter yes", "up to 6 runs at once, 17 more may queue; now 6 running, 1 queued",
		"installed with pip", "local wheel directories only", "wheels only", "2 environment(s), 5 MiB of a 1 GiB budget")
	var got api.Info
	structured(t, res, &got)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("structured content = %+v, want %+v", got, want)
	}
}

// TestDaemonUpLater starts the front end while the daemon is down, then
// brings the daemon up: check_environment reaches it, and the tools are
// rebuilt with its limits and announced with tools/list_changed.
func TestDaemonUpLater(t *testing.T) {
	dir, err := os.MkdirTemp("", "cbmcp")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	socket := filepath.Join(dir, "d.sock")
	cl := client.New(socket)
	_, startErr := cl.Info(context.Background())
	if startErr == nil {
		t.Fatal("info from a socket that does not exist")
	}
	srv := New(Config{Client: cl, InfoErr: startErr})
	c := connect(t, srv, protocols[0].opts...)
	ns := collect(c)

	tools, err := c.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		if tool.Name == ToolRunPython {
			mustContain(t, tool.Description, "check_environment reports them")
		}
	}
	res := callTool(t, context.Background(), c, ToolCheckEnvironment, nil)
	if !res.IsError {
		t.Error("check_environment is not isError with the daemon down")
	}
	mustContain(t, resultText(res), "not reachable", "when cellblock-mcp started either")

	// Now the daemon comes up on that socket.
	fd := startFakeDaemon(t)
	if err := os.Rename(fd.socket, socket); err != nil {
		t.Fatal(err)
	}
	res = callTool(t, context.Background(), c, ToolCheckEnvironment, nil)
	if res.IsError {
		t.Fatalf("isError: %s", resultText(res))
	}
	mustContain(t, resultText(res), "9.9.9-test", "was not reachable when cellblock-mcp started", "rebuilt")
	ns.await(t, "tools/list_changed", 5*time.Second, func() bool {
		return ns.count(string(mcp.MethodNotificationToolsListChanged)) > 0
	})
	tools, err = c.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		if tool.Name == ToolRunPython {
			mustContain(t, tool.Description, "123 s", "3.12.7 (default)")
		}
	}
}

func TestUnreachableDaemon(t *testing.T) {
	dir, err := os.MkdirTemp("", "cbmcp")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// A socket left behind by a daemon that has stopped.
	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()

	tests := []struct {
		socket string
		cause  string
	}{
		{filepath.Join(dir, "missing.sock"), "The socket does not exist"},
		{stale, "nothing is listening on it"},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.socket), func(t *testing.T) {
			cl := client.New(tt.socket)
			_, startErr := cl.Info(context.Background())
			c := connect(t, New(Config{Client: cl, InfoErr: startErr}))
			ctx := context.Background()

			res := callTool(t, ctx, c, ToolRunPython, map[string]any{"code": "print(1)"})
			if !res.IsError {
				t.Error("run_python is not isError with the daemon down")
			}
			mustContain(t, resultText(res), "is not reachable", tt.socket, tt.cause,
				"Is cellblockd running?", "systemctl status cellblockd", "$CELLBLOCK_SOCKET", "group", "Nothing was run")

			res = callTool(t, ctx, c, ToolValidatePython, map[string]any{
				"code": "# /// script\n# dependencies = [\"rich\"]\n# ///\nprint(1)\n",
			})
			if !res.IsError {
				t.Error("validate_python is not isError with the daemon down")
			}
			mustContain(t, resultText(res), "Syntax: not checked", "is not reachable", "dependencies rich")
			var v validation
			structured(t, res, &v)
			if v.Syntax.Checked || v.Valid || !v.Metadata.Present {
				t.Errorf("validation = %+v", v)
			}
		})
	}
}

func TestUnreachableText(t *testing.T) {
	// EACCES is hard to provoke as root; check the wording directly.
	err := fmt.Errorf("%w at /x.sock: %w", client.ErrUnreachable, &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", errPermission())})
	text := unreachableText("/x.sock", err, "run the program")
	mustContain(t, text, "permission denied", "Permission denied: the user cellblock-mcp runs as", "usermod -aG cellblock")
}

func TestValidatePython(t *testing.T) {
	fd := startFakeDaemon(t)
	c := connect(t, newServer(t, fd))
	ctx := context.Background()

	report := func(r checkReport) func(context.Context, *api.RunRequest, func(string, string)) *api.Result {
		return func(context.Context, *api.RunRequest, func(string, string)) *api.Result {
			data, _ := json.Marshal(r)
			return &api.Result{Stdout: string(data) + "\n", Python: "3.12.7"}
		}
	}

	t.Run("valid", func(t *testing.T) {
		fd.run = report(checkReport{OK: true, Python: "3.12.7"})
		code := "# /// script\n# requires-python = \">=3.11\"\n# dependencies = [\"rich\", \"attrs<24\"]\n# [tool.uv]\n# index-url = \"http://x\"\n# ///\nprint(1)\n"
		res := callTool(t, ctx, c, ToolValidatePython, map[string]any{"code": code})
		if res.IsError {
			t.Fatalf("isError: %s", resultText(res))
		}
		mustContain(t, resultText(res), "Syntax: OK (compiled by Python 3.12.7", "dependencies rich, attrs<24", "requires-python >=3.11", "Verdict: valid")
		var v validation
		structured(t, res, &v)
		want := validation{
			Valid:    true,
			Syntax:   syntaxVerdict{Checked: true, OK: true, Python: "3.12.7"},
			Metadata: metadataReport{Present: true, Dependencies: []string{"rich", "attrs<24"}, RequiresPython: ">=3.11"},
		}
		if !reflect.DeepEqual(v, want) {
			t.Errorf("validation = %+v, want %+v", v, want)
		}
		// The code travels as the checker's stdin, never as code to run;
		// the checker asks for the Python the code's metadata requires.
		req := fd.lastRequest(t)
		if req.Stdin != code {
			t.Errorf("stdin = %q, want the code", req.Stdin)
		}
		if !strings.HasSuffix(req.Code, checkerScript) || !strings.Contains(req.Code, "# requires-python = \">=3.11\"\n") {
			t.Errorf("checker code = %q", req.Code)
		}
		if len(req.Dependencies) != 0 {
			t.Errorf("the check asked for dependencies %v", req.Dependencies)
		}
	})

	t.Run("syntax error", func(t *testing.T) {
		fd.run = report(checkReport{Python: "3.12.7", Error: &syntaxError{
			Type: "SyntaxError", Message: "Missing parentheses in call to 'print'", Line: 2, Column: 1, Text: "print 'x'",
		}, Warnings: []syntaxAlert{{Category: "SyntaxWarning", Message: "invalid escape sequence '\\d'", Line: 1}}})
		res := callTool(t, ctx, c, ToolValidatePython, map[string]any{"code": "s = '\\d'\nprint 'x'\n", "python": "3.12"})
		if res.IsError {
			t.Fatalf("isError for invalid code (the check itself worked): %s", resultText(res))
		}
		mustContain(t, resultText(res), "SyntaxError at line 2, column 1: Missing parentheses", "    print 'x'\n    ^",
			"Warning at line 1: SyntaxWarning", "none (no '# /// script' block)", "not valid")
		var v validation
		structured(t, res, &v)
		if v.Valid || !v.Syntax.Checked || v.Syntax.OK || v.Syntax.Error == nil || v.Syntax.Error.Line != 2 {
			t.Errorf("validation = %+v", v)
		}
		req := fd.lastRequest(t)
		if req.Code != checkerScript || req.Python != "3.12" {
			t.Errorf("request = code %q python %q", req.Code, req.Python)
		}
	})

	t.Run("bad metadata", func(t *testing.T) {
		fd.run = report(checkReport{OK: true, Python: "3.12.7"})
		res := callTool(t, ctx, c, ToolValidatePython, map[string]any{"code": "# /// script\n# dependencies = \"rich\"\n# ///\n"})
		mustContain(t, resultText(res), "block is invalid: line 2:", "must be an array of strings", "not valid")
		var v validation
		structured(t, res, &v)
		if v.Valid || v.Metadata.Error == "" || !v.Syntax.OK {
			t.Errorf("validation = %+v", v)
		}
	})

	t.Run("bad arguments", func(t *testing.T) {
		for args, want := range map[string]string{
			`{}`:                             `"code" is required`,
			`{"code": "x", "timeout": 3}`:    `unknown argument "timeout": this tool takes code, python`,
			`{"code": "x", "python": "3.x"}`: `"python" must be a version such as "3.12"`,
			`{"code": ["x"]}`:                `"code" must be a string`,
		} {
			var m map[string]any
			if err := json.Unmarshal([]byte(args), &m); err != nil {
				t.Fatal(err)
			}
			res := callTool(t, ctx, c, ToolValidatePython, m)
			if !res.IsError {
				t.Errorf("%s: isError is false", args)
			}
			mustContain(t, resultText(res), "Nothing was checked", want)
		}
	})

	t.Run("checker refused", func(t *testing.T) {
		fd.run = func(context.Context, *api.RunRequest, func(string, string)) *api.Result {
			return &api.Result{Error: &api.Error{Type: api.ErrUnknownPython, Field: "python", Message: "no interpreter matches 2.7"}}
		}
		res := callTool(t, ctx, c, ToolValidatePython, map[string]any{"code": "print(1)", "python": "2.7"})
		if !res.IsError {
			t.Error("isError is false when the check could not run")
		}
		mustContain(t, resultText(res), "not checked", "unknown_python", "3.11.9")
	})

	t.Run("checker crashed", func(t *testing.T) {
		fd.run = func(context.Context, *api.RunRequest, func(string, string)) *api.Result {
			return &api.Result{ExitCode: 1, Stderr: "Traceback (most recent call last):\nMemoryError\n"}
		}
		res := callTool(t, ctx, c, ToolValidatePython, map[string]any{"code": "print(1)"})
		if !res.IsError {
			t.Error("isError is false when the checker failed")
		}
		mustContain(t, resultText(res), "did not finish", "MemoryError")
	})
}

func TestLongOutputElided(t *testing.T) {
	fd := startFakeDaemon(t)
	var long strings.Builder
	for i := range 20000 {
		fmt.Fprintf(&long, "line %d\n", i)
	}
	want := api.Result{ExitCode: 1, Stdout: long.String(), Stderr: "Traceback (most recent call last):\n  File \"main.py\"\nKeyError: 'x'\n"}
	fd.run = func(context.Context, *api.RunRequest, func(string, string)) *api.Result { r := want; return &r }
	c := connect(t, newServer(t, fd))
	res := callTool(t, context.Background(), c, ToolRunPython, map[string]any{"code": "..."})
	text := resultText(res)
	if len(text) > 40<<10 {
		t.Errorf("text is %d bytes", len(text))
	}
	mustContain(t, text, "line 0\n", "line 19999", "bytes left out here; structuredContent.stdout has all of it", "KeyError: 'x'")
	if got := resultOf(t, res); got.Stdout != want.Stdout {
		t.Error("the structured content does not have the whole stdout")
	}
}

func TestUncaughtException(t *testing.T) {
	tests := []struct{ stderr, want string }{
		{"Traceback (most recent call last):\n  File \"main.py\", line 1\nValueError: bad\n", "ValueError: bad"},
		{"Traceback (most recent call last):\n  File \"main.py\", line 1\nKeyboardInterrupt\n", "KeyboardInterrupt"},
		{"  File \"main.py\", line 1\n    print 'x'\n    ^\nSyntaxError: Missing parentheses\n", "SyntaxError: Missing parentheses"},
		{"Traceback (most recent call last):\n  File \"main.py\", line 1\nmypkg.errors.Boom: x: y\n", "mypkg.errors.Boom: x: y"},
		{"just some output\n", ""},
		{"", ""},
		{"Traceback (most recent call last):\n  File \"x\"\n  what is this\n", ""},
	}
	for _, tt := range tests {
		if got := uncaughtException(tt.stderr); got != tt.want {
			t.Errorf("uncaughtException(%q) = %q, want %q", tt.stderr, got, tt.want)
		}
	}
}

func TestFormatting(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 512: "512 B", 1536: "1.5 KiB", 1 << 20: "1 MiB", 3 << 30: "3 GiB", 1536 << 20: "1.5 GiB"} {
		if got := fmtBytes(n); got != want {
			t.Errorf("fmtBytes(%d) = %q, want %q", n, got, want)
		}
	}
	for ms, want := range map[int64]string{500: "500 ms", 1000: "1 s", 1500: "1.5 s", 600000: "600 s"} {
		if got := fmtMs(ms); got != want {
			t.Errorf("fmtMs(%d) = %q, want %q", ms, got, want)
		}
	}
	if got := redactURL("https://user:secret@pypi.example/simple?token=x"); got != "https://pypi.example/simple" {
		t.Errorf("redactURL = %q", got)
	}
}
