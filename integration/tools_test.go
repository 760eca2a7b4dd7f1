package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/audit"
	"github.com/cellblock/cellblock/internal/client"
)

// The tool bridge against the real daemon: code in a real jail calls
// tools through the runner's channel; the test is the run's caller and
// answers them (or the real CLI does, with --tool).

// addCommand is the example tool: the sum of x and y.
const addCommand = `add=python3 -c 'import json,sys; a=json.load(sys.stdin); print(a["x"] + a["y"])'`

var addTool = api.Tool{Name: "add", Description: "Add two numbers.",
	InputSchema: json.RawMessage(`{"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}}, "required": ["x", "y"], "additionalProperties": false}`)}

var echoTool = api.Tool{Name: "echo", Description: "Return the arguments."}

// toolRun carries out req on d, answering its tool calls with tool, and
// fails the test if the daemon cannot be reached.
func toolRun(t *testing.T, d *Daemon, req *api.RunRequest, tool client.ToolFunc) *api.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := d.Client.RunTools(ctx, req, nil, tool)
	if err != nil {
		t.Fatalf("run with tools: %v\n%s", err, d.Log())
	}
	return res
}

// goRun is toolRun for another goroutine than the test's: it sends the
// result, or a result whose Error says why there is none.
func goRun(d *Daemon, req *api.RunRequest, tool client.ToolFunc, out chan<- *api.Result) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := d.Client.RunTools(ctx, req, nil, tool)
	if err != nil {
		res = &api.Result{Error: api.Errorf(api.ErrInternal, "", "run with tools: %v", err)}
	}
	out <- res
}

// adder answers add and echo, and counts the calls it gets.
type adder struct{ calls atomic.Int64 }

func (a *adder) tool(ctx context.Context, call api.ToolCall) (json.RawMessage, error) {
	a.calls.Add(1)
	switch call.Name {
	case "add":
		var args struct{ X, Y float64 }
		if err := json.Unmarshal(call.Arguments, &args); err != nil {
			return nil, err
		}
		return json.RawMessage(fmt.Sprint(args.X + args.Y)), nil
	case "echo":
		return call.Arguments, nil
	}
	return nil, fmt.Errorf("no tool %s here", call.Name)
}

func TestToolsCLIExample(t *testing.T) {
	d := daemon(t)
	out, errs, code := cli(t, d, "", "run", "--tool", addCommand, "-c", "import cellblock; print(cellblock.tools.add(x=2, y=3))")
	if code != 0 || out != "5\n" || errs != "" {
		t.Fatalf("exit %d stdout %q stderr %q, want 5", code, out, errs)
	}
	// A tool that fails, one that prints text, and --json.
	out, errs, code = cli(t, d, "", "run", "--json", "--tool", "fail=echo 'no disk' >&2; exit 2", "--tool", "text=echo plain words",
		"-c", `import cellblock
print(repr(cellblock.tools.text()))
try:
    cellblock.tools.fail(what="x")
except cellblock.ToolError as e:
    print("ToolError:", e)`)
	var res api.Result
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil {
		t.Fatalf("--json: exit %d stdout %q stderr %q", code, out, errs)
	}
	if res.Stdout != "'plain words'\nToolError: no disk\n" || len(res.ToolCalls) != 2 || !res.ToolCalls[0].OK || res.ToolCalls[1].OK {
		t.Fatalf("result: stdout %q tool_calls %+v stderr %q", res.Stdout, res.ToolCalls, res.Stderr)
	}
}

func TestToolsCLISession(t *testing.T) {
	d := daemon(t)
	id, errs, code := cli(t, d, "", "session", "new")
	if code != 0 {
		t.Fatalf("session new: %s", errs)
	}
	id = strings.TrimSpace(id)
	defer cli(t, d, "", "session", "rm", id)
	out, errs, code := cli(t, d, "", "run", "--session", id, "--tool", addCommand, "--cell", "-c", "total = tools.add(x=40, y=2)\ntotal")
	if code != 0 || out != "42\n" {
		t.Fatalf("exit %d stdout %q stderr %q", code, out, errs)
	}
	out, _, code = cli(t, d, "", "run", "--session", id, "--cell", "-c", "(total, repr(tools))")
	if code != 0 || out != "(42, '<cellblock tools: none in this run>')\n" {
		t.Fatalf("the next run without tools: exit %d stdout %q", code, out)
	}
}

func TestToolsResultAndAudit(t *testing.T) {
	d := daemon(t)
	var a adder
	res := toolRun(t, d, &api.RunRequest{Mode: api.ModeCell, Tools: []api.Tool{addTool, echoTool},
		Code: "import cellblock\nsecret = cellblock.tools.echo(token='tool-secret-91c')\n[tools.add(x=i, y=1) for i in range(3)]"}, a.tool)
	if res.Error != nil || res.ExitCode != 0 || res.Value == nil || string(res.Value.JSON) != "[1,2,3]" {
		t.Fatalf("result %+v stderr %q", res, res.Stderr)
	}
	if len(res.ToolCalls) != 4 || res.ToolCalls[0].Name != "echo" || res.ToolCalls[3].Name != "add" || a.calls.Load() != 4 {
		t.Fatalf("tool_calls %+v (the caller saw %d)", res.ToolCalls, a.calls.Load())
	}
	for _, c := range res.ToolCalls {
		if !c.OK || c.Outcome != api.ToolOK {
			t.Errorf("call %+v", c)
		}
	}
	if res.Phases == nil || res.Phases.ToolsUs <= 0 {
		t.Errorf("phases %+v", res.Phases)
	}
	e := auditEntry(t, d, res.RunID)
	if len(e.ToolCalls) != 4 {
		t.Fatalf("audit: %+v", e.ToolCalls)
	}
	args := `{"token":"tool-secret-91c"}`
	if c := e.ToolCalls[0]; c.Name != "echo" || c.Outcome != "ok" || c.ArgumentBytes != len(args) || c.ArgumentSHA256 != sha(args) ||
		c.ResultBytes != len(args) || c.ResultSHA256 != sha(args) || c.ID == "" || c.Arguments != nil || c.Result != nil {
		t.Errorf("audit of the echo call: %+v", c)
	}
	raw, _ := os.ReadFile(filepath.Join(d.StateDir, "audit.log"))
	if bytes.Contains(raw, []byte("tool-secret-91c")) {
		t.Error("a tool call's content is in the audit log")
	}
	// Metrics, per tool and outcome.
	if m := metricsText(t, d); !strings.Contains(m, `cellblock_tool_calls_total{outcome="ok",tool="add"}`) {
		t.Errorf("no tool metrics:\n%s", grepLines(m, "cellblock_tool"))
	}
}

func TestToolsUndeclaredName(t *testing.T) {
	d := daemon(t)
	var a adder
	res := toolRun(t, d, &api.RunRequest{Tools: []api.Tool{addTool}, Code: `import cellblock
try:
    cellblock.tools.rm
except cellblock.ToolError as e:
    print("local:", e)
try:
    cellblock.call_tool("rm", {"path": "/"})
except cellblock.ToolError as e:
    print("daemon:", e)
`}, a.tool)
	want := "local: no tool 'rm' in this run; it declares add\ndaemon: no tool \"rm\" in this run: its caller declared add\n"
	if res.Stdout != want || a.calls.Load() != 0 {
		t.Fatalf("stdout %q (want %q), the caller saw %d calls; stderr %q", res.Stdout, want, a.calls.Load(), res.Stderr)
	}
	if len(res.ToolCalls) != 1 || res.ToolCalls[0].Outcome != api.ToolRefused || res.ToolCalls[0].Name != "rm" {
		t.Errorf("tool_calls %+v", res.ToolCalls)
	}
}

func TestToolsSchemaFailure(t *testing.T) {
	d := daemon(t)
	var a adder
	res := toolRun(t, d, &api.RunRequest{Tools: []api.Tool{addTool}, Code: `import cellblock
for args in ({"x": "2", "y": 3}, {"x": 1}, {"x": 1, "y": 2, "z": 3}):
    try:
        cellblock.call_tool("add", args)
    except cellblock.ToolError as e:
        print(e)
print(cellblock.tools.add(x=1, y=2))
`}, a.tool)
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "do not match its input schema: at '/x': got string, want number") ||
		!strings.Contains(lines[1], "missing property 'y'") || !strings.Contains(lines[2], "additional properties 'z' not allowed") || lines[3] != "3" {
		t.Fatalf("stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	if a.calls.Load() != 1 {
		t.Errorf("the caller saw %d calls, want only the valid one", a.calls.Load())
	}
	// A schema that cannot be compiled is refused before the run.
	bad := api.Tool{Name: "bad", InputSchema: json.RawMessage(`{"$ref": "file:///etc/shadow"}`)}
	res = toolRun(t, d, &api.RunRequest{Code: "1", Tools: []api.Tool{addTool, bad}}, a.tool)
	if res.Error == nil || res.Error.Type != api.ErrBadRequest || res.Error.Field != "tools[1].input_schema" {
		t.Errorf("a schema that refers to a file: %+v", res.Error)
	}
}

func TestToolsNeedAStream(t *testing.T) {
	d := daemon(t)
	res := run(t, d, &api.RunRequest{Code: "1", Tools: []api.Tool{addTool}})
	if res.Error == nil || res.Error.Field != "tools" || res.Error.Type != api.ErrBadRequest {
		t.Fatalf("a run with tools, not streamed: %+v", res.Error)
	}
}

func TestToolsAnswerOverTheCap(t *testing.T) {
	d := daemon(t)
	res := toolRun(t, d, &api.RunRequest{Tools: []api.Tool{echoTool}, ToolLimits: &api.ToolLimits{ResultBytes: 100}, Code: `import cellblock
try:
    cellblock.tools.echo(pad="x" * 500)
except cellblock.ToolError as e:
    print(e)
print(cellblock.tools.echo(pad="ok"))
`}, func(ctx context.Context, call api.ToolCall) (json.RawMessage, error) { return call.Arguments, nil })
	want := "the answer of echo was 510 bytes, over the cap of 100 (tool_limits.result_bytes)\n{'pad': 'ok'}\n"
	if res.Stdout != want {
		t.Fatalf("stdout %q, want %q; stderr %q", res.Stdout, want, res.Stderr)
	}
	if res.ToolCalls[0].Outcome != api.ToolTooLarge || !res.ToolCalls[1].OK {
		t.Errorf("tool_calls %+v", res.ToolCalls)
	}
	// Arguments over their cap never leave the jail.
	res = toolRun(t, d, &api.RunRequest{Tools: []api.Tool{echoTool}, ToolLimits: &api.ToolLimits{ArgumentBytes: 100}, Code: `import cellblock
try:
    cellblock.tools.echo(pad="x" * 500)
except cellblock.ToolError as e:
    print(e)
`}, func(ctx context.Context, call api.ToolCall) (json.RawMessage, error) { return call.Arguments, nil })
	if res.Stdout != "the arguments of echo are 510 bytes as JSON; a call may pass at most 100\n" || len(res.ToolCalls) != 0 {
		t.Errorf("arguments over the cap: stdout %q tool_calls %+v", res.Stdout, res.ToolCalls)
	}
}

// TestToolsFlood: a program floods the daemon with tool calls, raw frames
// on its channel and calls from many threads; the cap stops them reaching
// the caller, and the daemon carries out another run while the flood
// goes on (the flood lasts until the caller answers a call it holds until
// the other run is over).
func TestToolsFlood(t *testing.T) {
	d := daemon(t)
	var seen atomic.Int64
	syncArrived := make(chan struct{})
	otherDone := make(chan struct{})
	tool := func(ctx context.Context, call api.ToolCall) (json.RawMessage, error) {
		seen.Add(1)
		if string(call.Arguments) == `{"sync":1}` {
			close(syncArrived)
			select {
			case <-otherDone:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return call.Arguments, nil
	}
	done := make(chan *api.Result, 1)
	go goRun(d, &api.RunRequest{Tools: []api.Tool{echoTool}, ToolLimits: &api.ToolLimits{Calls: 50}, TimeoutMs: 120000,
		Code: findRunnerChannel + `
import cellblock, json, struct, threading
from cellblock import _channel
# Know when the held call has gone out: the flood starts then.
ch = _channel.channel
send = ch.send_raw
sent = threading.Event()
def spy(text, *a, **kw):
    r = send(text, *a, **kw)
    if '"sync"' in text:
        sent.set()
    return r
ch.send_raw = spy
got = []
held = threading.Thread(target=lambda: got.append(cellblock.tools.echo(sync=1)))
held.start()
sent.wait()
n = 0
while held.is_alive() and n < 2000000:
    m = json.dumps({"type": "tool_call", "id": "f%d" % n, "name": "echo", "arguments": {"n": n}}).encode()
    os.write(fd, struct.pack(">I", len(m)) + m)
    n += 1
held.join()
refused = [0]
def work():
    for i in range(300):
        try:
            cellblock.tools.echo(i=i)
        except cellblock.ToolError:
            refused[0] += 1
ts = [threading.Thread(target=work) for _ in range(8)]
for t in ts: t.start()
for t in ts: t.join()
try:
    cellblock.tools.echo(last=1)
except cellblock.ToolError as e:
    print(e)
print(got, n > 49, refused[0])
`}, tool, done)
	select {
	case <-syncArrived:
	case res := <-done:
		t.Fatalf("the run ended before its held call reached the caller: %+v", res)
	}
	other := runOK(t, d, &api.RunRequest{Code: "print('other run')"})
	close(otherDone)
	if other.Stdout != "other run\n" {
		t.Errorf("the other run: %+v", other)
	}
	res := <-done
	if res.Error != nil || res.ExitCode != 0 || res.Stdout != "this run has made 50 tool calls, the most it may (tool_limits.calls)\n[{'sync': 1}] True 2400\n" {
		t.Fatalf("flood: %+v stdout %q stderr %q", res.Error, res.Stdout, res.Stderr)
	}
	if n := seen.Load(); n != 50 {
		t.Errorf("the caller saw %d calls; the cap is 50", n)
	}
	if len(res.ToolCalls) != 50 || res.ToolCallsOverCap < 2401 {
		t.Errorf("%d calls listed, %d over the cap", len(res.ToolCalls), res.ToolCallsOverCap)
	}
	if e := auditEntry(t, d, res.RunID); len(e.ToolCalls) != 50 || e.ToolCallsOverCap != res.ToolCallsOverCap {
		t.Errorf("audit: %d calls, %d over the cap", len(e.ToolCalls), e.ToolCallsOverCap)
	}
}

func TestToolsHang(t *testing.T) {
	d := daemon(t)
	res := toolRun(t, d, &api.RunRequest{Tools: []api.Tool{echoTool}, ToolLimits: &api.ToolLimits{TimeoutMs: 500}, Code: `import cellblock
try:
    cellblock.tools.echo(x=1)
except cellblock.ToolError as e:
    print(e)
print("the run goes on")
`}, func(ctx context.Context, call api.ToolCall) (json.RawMessage, error) {
		<-ctx.Done() // never answers; its context ends at the call's timeout
		return nil, ctx.Err()
	})
	want := "tool echo: no answer from the run's caller within 500ms (tool_limits.timeout_ms)\nthe run goes on\n"
	if res.Stdout != want || res.ExitCode != 0 {
		t.Fatalf("stdout %q, want %q; stderr %q", res.Stdout, want, res.Stderr)
	}
	if res.ToolCalls[0].Outcome != api.ToolTimeout {
		t.Errorf("tool_calls %+v", res.ToolCalls)
	}
}

// streamRun posts req as a streamed run on a connection of its own and
// returns its events as they come, and the connection.
func streamRun(t *testing.T, socket string, req *api.RunRequest) (<-chan api.Event, net.Conn) {
	t.Helper()
	conn, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(req)
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAccept: %s\r\nContent-Length: %d\r\n\r\n%s",
		api.PathRuns, api.StreamContentType, len(body), body)
	events := make(chan api.Event, 64)
	go func() {
		defer close(events)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			var ev api.Event
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				events <- ev
			}
		}
	}()
	return events, conn
}

// firstToolCall waits for the stream's first tool call.
func firstToolCall(t *testing.T, events <-chan api.Event) api.Event {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatal("the stream ended before a tool call")
			}
			if ev.ToolCall != nil {
				return ev
			}
		case <-timeout:
			t.Fatal("no tool call came")
		}
	}
}

func TestToolsCallerDisconnects(t *testing.T) {
	d := startDaemon(t)
	events, conn := streamRun(t, d.Socket, &api.RunRequest{Tools: []api.Tool{echoTool},
		Code: "import cellblock, os\nopen('/work/x', 'w').write('x')\ncellblock.tools.echo(wait=1)\nprint('never')"})
	ev := firstToolCall(t, events)
	conn.Close()
	// The run is cancelled and torn down: its audit line says so, and
	// nothing of it is left in this daemon's cgroups.
	var e *audit.Entry
	if !waitFor(30*time.Second, func() bool { e = findAudit(d, ev.RunID); return e != nil }) {
		t.Fatalf("the run did not end after its caller went away:\n%s", d.Log())
	}
	if e.Outcome != "canceled" || len(e.ToolCalls) != 1 || e.ToolCalls[0].Outcome != api.ToolCanceled {
		t.Errorf("audit %+v, tool calls %+v", e, e.ToolCalls)
	}
	mine := func(name string) bool { return name == cgroupName(t) }
	if !waitFor(10*time.Second, func() bool { return len(ownRunCgroups(mine)) == 0 && len(ownRunProcesses(mine)) == 0 }) {
		t.Errorf("left after the run: cgroups %v processes %v", ownRunCgroups(mine), ownRunProcesses(mine))
	}
	// Its call is gone with it.
	err := d.Client.AnswerToolCall(context.Background(), ev.RunID, ev.ToolCall.ID, api.ToolAnswer{Result: json.RawMessage("1")})
	var aerr *api.Error
	if !errors.As(err, &aerr) || aerr.Type != api.ErrNotFound {
		t.Errorf("answer after the run ended: %v", err)
	}
	// And the daemon carries on.
	runOK(t, d, &api.RunRequest{Code: "print(1)"})
}

// ownRunCgroups and ownRunProcesses are runCgroups and runProcesses of
// the daemon whose cgroup name match accepts.
func ownRunCgroups(match func(string) bool) []string {
	var out []string
	for _, p := range runCgroups() {
		for _, part := range strings.Split(p, "/") {
			if match(part) {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

func ownRunProcesses(match func(string) bool) []string {
	var out []string
	for _, p := range runProcesses() {
		if inCgroup(p, match) {
			out = append(out, p)
		}
	}
	return out
}

func TestToolsRecursion(t *testing.T) {
	d := daemon(t)
	// The tool's command runs cellblock itself, against the same daemon
	// (CELLBLOCK_SOCKET is passed on).
	inner := bin(t, "cellblock") + ` run --tool twice="python3 -c 'import json,sys; print(2 * json.load(sys.stdin)[\"n\"])'" -c "import cellblock, sys; print(cellblock.tools.twice(n=int(sys.stdin.read() or 0) + 21))" < /dev/null`
	out, errs, code := cli(t, d, "", "run", "--tool", "inner="+inner, "-c", "import cellblock; print(cellblock.tools.inner())")
	if code != 0 || out != "42\n" {
		t.Fatalf("exit %d stdout %q stderr %q", code, out, errs)
	}
}

func TestToolsNonJSONAnswers(t *testing.T) {
	d := daemon(t)
	// A command's output that is not JSON is a string.
	out, errs, code := cli(t, d, "", "run", "--tool", `odd=printf '{not json\n'`, "--tool", `bin=printf '\377\376'`,
		"-c", "import cellblock; print(repr(cellblock.tools.odd()), repr(cellblock.tools.bin()))")
	if code != 0 || out != "'{not json' '\ufffd\ufffd'\n" {
		t.Errorf("exit %d stdout %q stderr %q", code, out, errs)
	}
	// An answer that is not JSON is refused, and the call still waits.
	events, conn := streamRun(t, d.Socket, &api.RunRequest{Tools: []api.Tool{echoTool}, Code: "import cellblock\nprint(cellblock.tools.echo())"})
	defer conn.Close()
	ev := firstToolCall(t, events)
	for _, body := range []string{`not json`, `{"result": }`, `{"result": 1, "error": "x"}`, `{"error": 5}`, `["result", 1]`} {
		code, r := postAnswer(t, d.Socket, ev.RunID, ev.ToolCall.ID, body)
		if code != http.StatusBadRequest || r.Error == nil || r.Error.Type != api.ErrBadRequest {
			t.Errorf("answer %s: %d %+v", body, code, r.Error)
		}
	}
	if code, r := postAnswer(t, d.Socket, ev.RunID, ev.ToolCall.ID, `{"result": "fine"}`); code != http.StatusOK {
		t.Fatalf("a good answer: %d %+v", code, r.Error)
	}
	var last api.Event
	for ev := range events {
		last = ev
	}
	if last.Result == nil || last.Result.Stdout != "fine\n" {
		t.Fatalf("last event %+v", last)
	}
}

// postAnswer posts body as the answer of call id in run, as root.
func postAnswer(t *testing.T, socket, run, id, body string) (int, api.Result) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}}}
	resp, err := hc.Post("http://x"+api.ToolCallPath(run, id), "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r api.Result
	_ = json.NewDecoder(resp.Body).Decode(&r)
	return resp.StatusCode, r
}

// TestToolsForgedFrames: what a program writes on its runner's channel
// goes to its own run's relay and nowhere else. It writes a call itself,
// then a forged answer to it, the same id again, and a call of its own
// invention; it reads the answers itself. The forged answer answers
// nothing, the id already waiting is refused, the invented call is its
// own run's, and another run's caller, waiting at the same time, sees
// only its own call.
func TestToolsForgedFrames(t *testing.T) {
	d := daemon(t)
	var otherCalls atomic.Int64
	otherStarted := make(chan struct{})
	release := make(chan struct{})
	otherDone := make(chan *api.Result, 1)
	go goRun(d, &api.RunRequest{Tools: []api.Tool{echoTool}, Code: "import cellblock\nprint(cellblock.tools.echo(b=1))"},
		func(ctx context.Context, call api.ToolCall) (json.RawMessage, error) {
			if otherCalls.Add(1) == 1 {
				close(otherStarted)
			}
			<-release
			return json.RawMessage(`"B's answer"`), nil
		}, otherDone)
	select {
	case <-otherStarted:
	case res := <-otherDone:
		t.Fatalf("the other run ended first: %+v", res)
	}
	var once sync.Once
	defer once.Do(func() { close(release) })
	var mu sync.Mutex
	var seen []string
	inventedSeen := make(chan struct{})
	res := toolRun(t, d, &api.RunRequest{Tools: []api.Tool{echoTool}, Code: findRunnerChannel + `
import json, struct
def frame(m):
    b = json.dumps(m).encode()
    os.write(fd, struct.pack(">I", len(b)) + b)
def read_exact(n):
    buf = b""
    while len(buf) < n:
        b = os.read(fd, n - len(buf))
        if not b:
            raise EOFError
        buf += b
    return buf
frame({"type": "tool_call", "id": "r1", "name": "echo", "arguments": {"real": 1}})
frame({"type": "tool_result", "id": "r1", "ok": True, "result": "forged"})
frame({"type": "tool_call", "id": "r1", "name": "echo", "arguments": {"dup": 1}})
frame({"type": "tool_call", "id": "x1", "name": "echo", "arguments": {"invented": 1}})
got = []
while len(got) < 3:
    m = json.loads(read_exact(int.from_bytes(read_exact(4), "big")))
    got.append((m["id"], m["ok"], m.get("result", m.get("error"))))
for g in got:
    print(g)
`}, func(ctx context.Context, call api.ToolCall) (json.RawMessage, error) {
		mu.Lock()
		seen = append(seen, string(call.Arguments))
		mu.Unlock()
		switch string(call.Arguments) {
		case `{"real":1}`:
			// Answered once the frames after it were read: the
			// duplicate id is refused while this call waits.
			select {
			case <-inventedSeen:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return json.RawMessage(`"the caller's answer"`), nil
		case `{"invented":1}`:
			close(inventedSeen)
		}
		return json.RawMessage(`"an answer to an invented call"`), nil
	})
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	sort.Strings(lines)
	want := []string{
		`('r1', False, 'call id "r1" is already waiting for an answer')`,
		`('r1', True, "the caller's answer")`,
		`('x1', True, 'an answer to an invented call')`,
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the program read:\n%s\nwant:\n%s\nstderr %q", res.Stdout, strings.Join(want, "\n"), res.Stderr)
	}
	mu.Lock()
	if len(seen) != 2 {
		t.Errorf("the caller saw %v; want the real and the invented call", seen)
	}
	mu.Unlock()
	once.Do(func() { close(release) })
	other := <-otherDone
	if other.Stdout != "B's answer\n" || otherCalls.Load() != 1 {
		t.Errorf("the other run: stdout %q, its caller saw %d calls", other.Stdout, otherCalls.Load())
	}
}

func TestToolsThreads(t *testing.T) {
	d := daemon(t)
	// Every call waits until all 16 are in, then they are answered in
	// reverse order: each must reach its own caller.
	var mu sync.Mutex
	all := make(chan struct{})
	n := 0
	res := toolRun(t, d, &api.RunRequest{Tools: []api.Tool{echoTool}, Code: `import cellblock, threading
out = {}
def work(i):
    out[i] = cellblock.tools.echo(i=i)["i"]
ts = [threading.Thread(target=work, args=(i,)) for i in range(16)]
for t in ts: t.start()
for t in ts: t.join()
print(sorted(out.items()) == [(i, i) for i in range(16)])
`}, func(ctx context.Context, call api.ToolCall) (json.RawMessage, error) {
		mu.Lock()
		n++
		if n == 16 {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		var a struct{ I int }
		_ = json.Unmarshal(call.Arguments, &a)
		time.Sleep(time.Duration(16-a.I) * time.Millisecond) // later ones first
		return call.Arguments, nil
	})
	if res.Stdout != "True\n" || len(res.ToolCalls) != 16 {
		t.Fatalf("stdout %q stderr %q tool_calls %d", res.Stdout, res.Stderr, len(res.ToolCalls))
	}
}

func TestToolsInSession(t *testing.T) {
	d := daemon(t)
	s := newSession(t, d, &api.SessionRequest{})
	var a adder
	res := toolRun(t, d, &api.RunRequest{Session: s.ID, Tools: []api.Tool{addTool}, Code: "x = tools.add(x=1, y=2)\nx"}, a.tool)
	if res.Value == nil || res.Value.Repr != "3" || len(res.ToolCalls) != 1 {
		t.Fatalf("first run: %+v stderr %q", res, res.Stderr)
	}
	// A call that hangs past the run's timeout: the interrupt reaches the
	// code waiting for it, and the session lives on.
	res = toolRun(t, d, &api.RunRequest{Session: s.ID, Tools: []api.Tool{echoTool}, TimeoutMs: 1000, Code: `
try:
    tools.echo(n=1)
except KeyboardInterrupt:
    y = "interrupted"
y`}, func(ctx context.Context, call api.ToolCall) (json.RawMessage, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	if !res.TimedOut || res.Session == nil || res.Session.State != api.SessionAlive || res.Value == nil || res.Value.Repr != "'interrupted'" {
		t.Fatalf("interrupted run: %+v", res)
	}
	res = inSession(t, d, s.ID, "(x, y, repr(tools))")
	if res.Value == nil || res.Value.Repr != "(3, 'interrupted', '<cellblock tools: none in this run>')" {
		t.Fatalf("after: %+v", res)
	}
}

func TestToolsAnswerFromAnotherUID(t *testing.T) {
	d := startDaemon(t, "--allow-uid", "65533")
	if err := os.Chmod(filepath.Dir(d.Socket), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d.Socket, 0o666); err != nil {
		t.Fatal(err)
	}
	events, conn := streamRun(t, d.Socket, &api.RunRequest{Tools: []api.Tool{echoTool}, Code: "import cellblock\nprint(cellblock.tools.echo())"})
	defer conn.Close()
	ev := firstToolCall(t, events)
	// uid 65533 may use the daemon, but not answer root's calls: it is
	// told what it would be told of a call that does not exist.
	post := func(call string) string {
		script := fmt.Sprintf(`import http.client, socket, sys
class C(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(%q)
c = C("x")
c.request("POST", %q, '{"result": "from another uid"}', {"Content-Type": "application/json"})
r = c.getresponse()
print(r.status, r.read().decode())`, d.Socket, api.ToolCallPath(ev.RunID, call))
		cmd := exec.Command("/usr/bin/python3", "-c", script) // not a shim in root's home
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65533, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("post as uid 65533: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	foreign := post(ev.ToolCall.ID)
	const unknown = "t0123456789abcdef0123456789abcdef"
	if !strings.HasPrefix(foreign, "404 ") || strings.ReplaceAll(foreign, ev.ToolCall.ID, "ID") != strings.ReplaceAll(post(unknown), unknown, "ID") {
		t.Fatalf("another uid's answer: %s; an unknown id's: %s", foreign, post(unknown))
	}
	if code, r := postAnswer(t, d.Socket, ev.RunID, ev.ToolCall.ID, `{"result": "from root"}`); code != http.StatusOK {
		t.Fatalf("the owner's answer: %d %+v", code, r.Error)
	}
	var last api.Event
	for ev := range events {
		last = ev
	}
	if last.Result == nil || last.Result.Stdout != "from root\n" {
		t.Fatalf("last event %+v", last)
	}
}

func TestToolsCostNothingWithout(t *testing.T) {
	d := daemon(t)
	res := runOK(t, d, &api.RunRequest{Code: "import sys, cellblock\nprint('cellblock._tools' in sys.modules, repr(cellblock.tools))"})
	if res.Stdout != "False <cellblock tools: none in this run>\n" {
		t.Errorf("stdout %q", res.Stdout)
	}
}

// auditEntry waits for run's line in d's audit log.
func auditEntry(t *testing.T, d *Daemon, run string) *audit.Entry {
	t.Helper()
	var e *audit.Entry
	if !waitFor(10*time.Second, func() bool { e = findAudit(d, run); return e != nil }) {
		t.Fatalf("no audit line for run %s", run)
	}
	return e
}

func findAudit(d *Daemon, run string) *audit.Entry {
	b, err := os.ReadFile(filepath.Join(d.StateDir, "audit.log"))
	if err != nil {
		return nil
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		var e audit.Entry
		if json.Unmarshal(line, &e) == nil && e.RunID == run {
			return &e
		}
	}
	return nil
}

func metricsText(t *testing.T, d *Daemon) string {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", d.Socket)
	}}}
	resp, err := hc.Get("http://x/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return b.String()
}

func grepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// hugeNumbersCall is code that writes, on its runner's channel, a call of
// tool n whose arguments are a megabyte of numbers the schema library
// would take 20 ms each over (half an hour in all), then spins.
const hugeNumbersCall = findRunnerChannel + `
import json, struct
args = '{"n": [' + ",".join(["1e999999"] * 110000) + ']}'
b = ('{"type": "tool_call", "id": "h1", "name": "n", "arguments": ' + args + '}').encode()
os.write(fd, struct.pack(">I", len(b)) + b)
`

var numbersTool = api.Tool{Name: "n", InputSchema: json.RawMessage(`{"type": "object", "properties": {"n": {"type": "array", "items": {"type": "integer"}}}}`)}

// TestToolsHugeNumbers: such a call is refused at once, and neither the
// run's timeout nor its end waits for it, in a run of its own or in a
// session.
func TestToolsHugeNumbers(t *testing.T) {
	d := daemon(t)
	never := func(ctx context.Context, call api.ToolCall) (json.RawMessage, error) {
		t.Errorf("the caller got a call: %.100s", call.Arguments)
		return nil, errors.New("no")
	}
	res := toolRun(t, d, &api.RunRequest{Tools: []api.Tool{numbersTool}, TimeoutMs: 3000, Code: hugeNumbersCall + `
def read_exact(n):
    buf = b""
    while len(buf) < n:
        buf += os.read(fd, n - len(buf))
    return buf
m = json.loads(read_exact(int.from_bytes(read_exact(4), "big")))
print(m["id"], m["ok"], m["error"][:80], flush=True)
while True:
    pass
`}, never)
	if !res.TimedOut || res.Stdout != "h1 False the arguments of n: the number 1e999999 is beyond what the daemon checks: a numb\n" {
		t.Fatalf("timed out %v stdout %q stderr %q error %+v", res.TimedOut, res.Stdout, res.Stderr, res.Error)
	}
	if len(res.ToolCalls) != 1 || res.ToolCalls[0].Outcome != api.ToolRefused {
		t.Errorf("tool_calls %+v", res.ToolCalls)
	}
	s := newSession(t, d, &api.SessionRequest{})
	res = toolRun(t, d, &api.RunRequest{Session: s.ID, Tools: []api.Tool{numbersTool}, TimeoutMs: 3000, Code: hugeNumbersCall + `
try:
    while True:
        pass
except KeyboardInterrupt:
    print("interrupted")
`}, never)
	if !res.TimedOut || res.Stdout != "interrupted\n" || res.Session == nil || res.Session.State != api.SessionAlive {
		t.Fatalf("in a session: timed out %v stdout %q stderr %q session %+v", res.TimedOut, res.Stdout, res.Stderr, res.Session)
	}
	if len(res.ToolCalls) != 1 || res.ToolCalls[0].Outcome != api.ToolRefused {
		t.Errorf("tool_calls %+v", res.ToolCalls)
	}
}

// TestToolsStalledCaller: callers that stay connected but never read
// their streams (one whose code waits for a tool call larger than the
// socket holds, one whose code prints on and on) get their runs cancelled
// and torn down once a write to them has waited 30 seconds, whatever the
// runs' own timeouts; their slots go to the next run, and the daemon
// shuts down cleanly.
func TestToolsStalledCaller(t *testing.T) {
	d := startDaemon(t, "--max-concurrent", "2", "--queue", "0")
	long := &api.ToolLimits{TimeoutMs: 300000}
	for _, req := range []*api.RunRequest{
		{Tools: []api.Tool{echoTool}, ToolLimits: long, TimeoutMs: 300000, Code: "import cellblock\ncellblock.tools.echo(pad='x' * 900000)\nprint('answered')"},
		{Tools: []api.Tool{echoTool}, ToolLimits: long, TimeoutMs: 300000, Code: "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)"},
	} {
		conn, err := net.Dial("unix", d.Socket)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		body, _ := json.Marshal(req)
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAccept: %s\r\nContent-Length: %d\r\n\r\n%s",
			api.PathRuns, api.StreamContentType, len(body), body)
		// It never reads.
	}
	var entries []*audit.Entry
	if !waitFor(120*time.Second, func() bool {
		entries = nil
		b, _ := os.ReadFile(filepath.Join(d.StateDir, "audit.log"))
		for _, line := range bytes.Split(b, []byte("\n")) {
			var e audit.Entry
			if json.Unmarshal(line, &e) == nil && e.RunID != "" {
				entries = append(entries, &e)
			}
		}
		return len(entries) == 2
	}) {
		t.Fatalf("the runs of callers that do not read did not end: %d audit lines\n%s", len(entries), d.Log())
	}
	for _, e := range entries {
		if e.Outcome != "canceled" || e.Error == nil || !strings.Contains(e.Error.Message, "the caller stopped reading the run's stream") {
			t.Errorf("audit: outcome %s error %+v", e.Outcome, e.Error)
		}
		if len(e.ToolCalls) > 0 && e.ToolCalls[0].Outcome != api.ToolCanceled {
			t.Errorf("audit: tool calls %+v", e.ToolCalls)
		}
	}
	mine := func(name string) bool { return name == cgroupName(t) }
	if !waitFor(10*time.Second, func() bool { return len(ownRunCgroups(mine)) == 0 && len(ownRunProcesses(mine)) == 0 }) {
		t.Errorf("left after the runs: cgroups %v processes %v", ownRunCgroups(mine), ownRunProcesses(mine))
	}
	runOK(t, d, &api.RunRequest{Code: "print(1)"})
}

// TestToolsCLIResultsTheDaemonRefuses: a command that prints JSON whose
// strings are not UTF-8 gets them repaired; one that prints JSON nested
// deeper than the daemon takes fails the call at once, saying why.
func TestToolsCLIResultsTheDaemonRefuses(t *testing.T) {
	d := daemon(t)
	out, errs, code := cli(t, d, "", "run", "--tool-timeout", "60s", "--tool", `bad=printf '"\377"'`,
		"--tool", `deep=python3 -c 'print("[" * 70 + "]" * 70)'`, "-c", `import cellblock
print(repr(cellblock.tools.bad()))
try:
    cellblock.tools.deep()
except cellblock.ToolError as e:
    print(e)`)
	if code != 0 || out != "'\ufffd'\nthe tool's result could not be passed: result nests 70 deep; the most is 64\n" {
		t.Errorf("exit %d stdout %q stderr %q", code, out, errs)
	}
}
