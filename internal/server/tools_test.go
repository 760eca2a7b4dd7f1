package server_test

import (
	"bufio"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/client"
	"github.com/cellblock/cellblock/internal/server/servertest"
)

// These tests drive the tool bridge through the real server on a real
// socket; the run is a stand-in that calls its tools through the real
// relay (servertest.CallTool).

var toolInfo = api.Info{
	Version:       "test",
	Defaults:      api.Limits{TimeoutMs: 5000, MemoryBytes: 64 << 20, Pids: 16, CPUs: 1, OutputBytes: 1 << 20, TmpBytes: 1 << 20},
	Maxima:        api.Limits{TimeoutMs: 60000, MemoryBytes: 128 << 20, Pids: 64, CPUs: 2, OutputBytes: 1 << 20, TmpBytes: 8 << 20},
	MaxConcurrent: 4,
	QueueSize:     4,
}

var addTool = api.Tool{Name: "add", Description: "Add two numbers.",
	InputSchema: json.RawMessage(`{"type":"object","properties":{"x":{"type":"number"},"y":{"type":"number"}},"required":["x","y"]}`)}

// addRun calls add(x=2, y=3) and prints what came back.
func addRun(ctx context.Context, req *api.RunRequest, emit func(string, string)) (*api.Result, error) {
	res, err := servertest.CallTool(ctx, req, "add", map[string]int{"x": 2, "y": 3})
	if err != nil {
		return &api.Result{Stdout: "ToolError: " + err.Error(), ExitCode: 1, Phases: &api.Phases{}}, nil
	}
	emit("stdout", string(res)+"\n")
	return &api.Result{Stdout: string(res) + "\n", Phases: &api.Phases{}}, nil
}

func TestToolsNeedAStream(t *testing.T) {
	d := servertest.Start(t, toolInfo, addRun)
	c := client.New(d.Socket)
	res, err := c.Run(context.Background(), &api.RunRequest{Code: "x", Tools: []api.Tool{addTool}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Error == nil || res.Error.Type != api.ErrBadRequest || res.Error.Field != "tools" || !strings.Contains(res.Error.Message, "must be streamed") {
		t.Fatalf("a run with tools, not streamed: %+v", res.Error)
	}
	if len(d.Requests()) != 0 {
		t.Fatal("the run reached the executor")
	}
}

func TestToolsBadSchemaRefused(t *testing.T) {
	d := servertest.Start(t, toolInfo, addRun)
	c := client.New(d.Socket)
	bad := api.Tool{Name: "b", InputSchema: json.RawMessage(`{"type": 7}`)}
	res, err := c.RunTools(context.Background(), &api.RunRequest{Code: "x", Tools: []api.Tool{addTool, bad}}, nil,
		func(context.Context, api.ToolCall) (json.RawMessage, error) { return nil, errors.New("unused") })
	if err != nil {
		t.Fatal(err)
	}
	if res.Error == nil || res.Error.Field != "tools[1].input_schema" {
		t.Fatalf("bad schema: %+v", res.Error)
	}
}

func TestToolCallRoundTrip(t *testing.T) {
	d := servertest.Start(t, toolInfo, addRun)
	c := client.New(d.Socket)
	var got []api.ToolCall
	var mu sync.Mutex
	res, err := c.RunTools(context.Background(), &api.RunRequest{Code: "x", Tools: []api.Tool{addTool}}, nil,
		func(ctx context.Context, call api.ToolCall) (json.RawMessage, error) {
			mu.Lock()
			got = append(got, call)
			mu.Unlock()
			var a struct{ X, Y int }
			if err := json.Unmarshal(call.Arguments, &a); err != nil {
				return nil, err
			}
			return json.RawMessage(fmt.Sprint(a.X + a.Y)), nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if res.Error != nil || res.Stdout != "5\n" {
		t.Fatalf("result %+v", res)
	}
	if len(got) != 1 || got[0].Name != "add" || got[0].TimeoutMs != 30000 {
		t.Fatalf("calls %+v", got)
	}
	if len(res.ToolCalls) != 1 || !res.ToolCalls[0].OK || res.ToolCalls[0].Name != "add" || res.ToolCalls[0].Outcome != api.ToolOK {
		t.Fatalf("tool_calls %+v", res.ToolCalls)
	}
}

func TestToolErrorReachesTheCode(t *testing.T) {
	d := servertest.Start(t, toolInfo, addRun)
	c := client.New(d.Socket)
	res, err := c.RunTools(context.Background(), &api.RunRequest{Code: "x", Tools: []api.Tool{addTool}}, nil,
		func(context.Context, api.ToolCall) (json.RawMessage, error) { return nil, errors.New("adder offline") })
	if err != nil {
		t.Fatal(err)
	}
	if res.Stdout != "ToolError: adder offline" || res.ToolCalls[0].OK || res.ToolCalls[0].Outcome != api.ToolErrored || res.ToolCalls[0].Error != "adder offline" {
		t.Fatalf("result %+v", res)
	}
}

// rawStream posts a streamed run with tools and returns the events as
// they come, and a way to stop reading (closing the connection).
func rawStream(t *testing.T, socket string, req *api.RunRequest) (events <-chan api.Event, closeConn func()) {
	t.Helper()
	conn, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(req)
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAccept: %s\r\nContent-Length: %d\r\n\r\n%s",
		api.PathRuns, api.StreamContentType, len(body), body)
	ch := make(chan api.Event, 100)
	go func() {
		defer close(ch)
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var ev api.Event
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				ch <- ev
			}
		}
	}()
	return ch, func() { conn.Close() }
}

func post(t *testing.T, socket, path, body string) (int, api.Result) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}}}
	resp, err := hc.Post("http://x"+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r api.Result
	_ = json.NewDecoder(resp.Body).Decode(&r)
	return resp.StatusCode, r
}

func TestToolAnswerRoute(t *testing.T) {
	d := servertest.Start(t, toolInfo, addRun)
	events, closeConn := rawStream(t, d.Socket, &api.RunRequest{Code: "x", Tools: []api.Tool{addTool}, ToolLimits: &api.ToolLimits{ResultBytes: 64}})
	defer closeConn()
	ev := <-events
	if ev.ToolCall == nil || ev.RunID == "" || string(ev.ToolCall.Arguments) != `{"x":2,"y":3}` {
		t.Fatalf("first event %+v", ev)
	}
	path := api.ToolCallPath(ev.RunID, ev.ToolCall.ID)
	// Unknown calls and runs: 404, in the same words.
	if code, r := post(t, d.Socket, api.ToolCallPath(ev.RunID, "t0"), `{"result": 1}`); code != http.StatusNotFound || r.Error.Type != api.ErrNotFound {
		t.Fatalf("unknown call: %d %+v", code, r.Error)
	}
	if code, _ := post(t, d.Socket, api.ToolCallPath("r0", ev.ToolCall.ID), `{"result": 1}`); code != http.StatusNotFound {
		t.Fatalf("unknown run: %d", code)
	}
	// A malformed answer leaves the call waiting.
	if code, r := post(t, d.Socket, path, `{"result": 1, "error": "x"}`); code != http.StatusBadRequest || r.Error.Type != api.ErrBadRequest {
		t.Fatalf("bad answer: %d %+v", code, r.Error)
	}
	if code, r := post(t, d.Socket, path, `{"result": 5}`); code != http.StatusOK {
		t.Fatalf("answer: %d %+v", code, r.Error)
	}
	if code, _ := post(t, d.Socket, path, `{"result": 5}`); code != http.StatusNotFound {
		t.Fatalf("second answer: %d", code)
	}
	var last api.Event
	for ev := range events {
		last = ev
	}
	if last.Result == nil || last.Result.Stdout != "5\n" || last.Result.Phases.ToolsUs <= 0 {
		t.Fatalf("last event %+v", last.Result)
	}
}

func TestToolAnswerOverTheCap(t *testing.T) {
	d := servertest.Start(t, toolInfo, addRun)
	events, closeConn := rawStream(t, d.Socket, &api.RunRequest{Code: "x", Tools: []api.Tool{addTool}, ToolLimits: &api.ToolLimits{ResultBytes: 64}})
	defer closeConn()
	ev := <-events
	code, r := post(t, d.Socket, api.ToolCallPath(ev.RunID, ev.ToolCall.ID), `{"result": "`+strings.Repeat("x", 1000)+`"}`)
	if code != http.StatusRequestEntityTooLarge || r.Error.Field != "result" {
		t.Fatalf("answer over the cap: %d %+v", code, r.Error)
	}
	var last api.Event
	for ev := range events {
		last = ev
	}
	if res := last.Result; res == nil || !strings.Contains(res.Stdout, "ToolError: the answer of add was 1002 bytes, over the cap of 64") || res.ToolCalls[0].Outcome != api.ToolTooLarge {
		t.Fatalf("result %+v", last.Result)
	}
}

func TestCallerGoneCancelsTheRun(t *testing.T) {
	d := servertest.Start(t, toolInfo, addRun)
	events, closeConn := rawStream(t, d.Socket, &api.RunRequest{Code: "the pending one", Tools: []api.Tool{addTool}})
	ev := <-events
	if ev.ToolCall == nil {
		t.Fatalf("event %+v", ev)
	}
	closeConn()
	select {
	case code := <-d.Canceled():
		if code != "the pending one" {
			t.Fatalf("cancelled %q", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the run was not cancelled when its caller went away")
	}
	// The call is gone with it.
	if code, _ := post(t, d.Socket, api.ToolCallPath(ev.RunID, ev.ToolCall.ID), `{"result": 5}`); code != http.StatusNotFound {
		t.Fatalf("answer after the caller left: %d", code)
	}
}

func TestInfoHasToolCaps(t *testing.T) {
	d := servertest.Start(t, toolInfo, nil)
	info, err := client.New(d.Socket).Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.Tools == nil || info.Tools.Defaults.Calls != 256 || info.Tools.Maxima.TimeoutMs != 600000 {
		t.Fatalf("info.tools %+v", info.Tools)
	}
}

// TestSchemasCompileOnlyForAdmittedRuns: a run's input schemas cost the
// daemon time to compile, so nothing is compiled for a request refused
// for want of a stream or of a slot: it is told that, not what is wrong
// with its schema.
func TestSchemasCompileOnlyForAdmittedRuns(t *testing.T) {
	info := toolInfo
	info.MaxConcurrent, info.QueueSize = 1, 0
	release := make(chan struct{})
	defer close(release)
	busy := make(chan struct{})
	d := servertest.Start(t, info, func(ctx context.Context, req *api.RunRequest, emit func(string, string)) (*api.Result, error) {
		close(busy)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return &api.Result{Phases: &api.Phases{}}, nil
	})
	bad := []api.Tool{{Name: "t", InputSchema: json.RawMessage(`{"type": "strin"}`)}}
	res, err := client.New(d.Socket).Run(context.Background(), &api.RunRequest{Code: "x", Tools: bad})
	if err != nil || res.Error == nil || res.Error.Field != "tools" || !strings.Contains(res.Error.Message, "must be streamed") {
		t.Fatalf("not streamed: %+v %v", res.Error, err)
	}
	go func() { _, _ = client.New(d.Socket).Run(context.Background(), &api.RunRequest{Code: "hold the slot"}) }()
	<-busy
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", d.Socket)
	}}}
	hreq, _ := http.NewRequest("POST", "http://x"+api.PathRuns, strings.NewReader(`{"code": "x", "tools": [{"name": "t", "input_schema": {"type": "strin"}}]}`))
	hreq.Header.Set("Accept", api.StreamContentType)
	resp, err := hc.Do(hreq)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r api.Result
	_ = json.NewDecoder(resp.Body).Decode(&r)
	if resp.StatusCode != http.StatusTooManyRequests || r.Error == nil || r.Error.Type != api.ErrBusy {
		t.Fatalf("no slot: %d %+v", resp.StatusCode, r.Error)
	}
}

// TestRefusedResultsFailTheCallAtOnce: a result the daemon does not take
// (not UTF-8, nested too deep) is not left to time out: RunTools answers
// the call with an error saying why.
func TestRefusedResultsFailTheCallAtOnce(t *testing.T) {
	for name, result := range map[string]string{
		"not UTF-8": "\"\xff\"",
		"too deep":  strings.Repeat("[", 70) + strings.Repeat("]", 70),
	} {
		d := servertest.Start(t, toolInfo, addRun)
		res, err := client.New(d.Socket).RunTools(context.Background(), &api.RunRequest{Code: "x", Tools: []api.Tool{addTool}, ToolLimits: &api.ToolLimits{TimeoutMs: 20000}}, nil,
			func(context.Context, api.ToolCall) (json.RawMessage, error) { return json.RawMessage(result), nil })
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(res.Stdout, "ToolError: the tool's result could not be passed: ") {
			t.Errorf("%s: %q", name, res.Stdout)
		}
		t.Logf("%s: %s", name, res.Stdout)
	}
}
