package toolrelay

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/peercred"
)

// jail stands in for the jail's side of a relay: it sends tool_call
// frames (Call) and collects the tool_result frames the relay replies.
type jail struct {
	t       *testing.T
	mu      sync.Mutex
	results map[string]map[string]any
	got     chan string // ids as results come
	events  chan api.ToolCall
	relay   *Relay
	reg     *Registry
}

var owner = peercred.Peer{UID: 1000, GID: 1000, PID: 1}

func newJail(t *testing.T, req *api.RunRequest, cfg Config) *jail {
	t.Helper()
	tools, aerr := Prepare(req, cfg)
	if aerr != nil {
		t.Fatalf("Prepare: %v", aerr)
	}
	j := &jail{t: t, results: map[string]map[string]any{}, got: make(chan string, 1000), events: make(chan api.ToolCall, 1000), reg: NewRegistry()}
	j.relay = j.reg.Open(tools, "r1", owner, func(_ context.Context, c api.ToolCall) error { j.events <- c; return nil }, nil)
	j.relay.Start(j.reply)
	t.Cleanup(j.relay.Close)
	return j
}

func (j *jail) reply(frame []byte) {
	n := binary.BigEndian.Uint32(frame)
	var m map[string]any
	if err := json.Unmarshal(frame[4:4+n], &m); err != nil {
		j.t.Errorf("reply frame: %v", err)
		return
	}
	if m["type"] != "tool_result" {
		j.t.Errorf("reply of type %v", m["type"])
	}
	id, _ := m["id"].(string)
	j.mu.Lock()
	j.results[id] = m
	j.mu.Unlock()
	j.got <- id
}

func (j *jail) call(id, name, args string) {
	j.relay.Call(fmt.Appendf(nil, `{"type":"tool_call","id":%q,"name":%q,"arguments":%s}`, id, name, args))
}

// result waits for the result of call id.
func (j *jail) result(id string) map[string]any {
	j.t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		j.mu.Lock()
		m, ok := j.results[id]
		j.mu.Unlock()
		if ok {
			return m
		}
		select {
		case <-j.got:
		case <-timeout:
			j.t.Fatalf("no result for %s", id)
		}
	}
}

func (j *jail) event() api.ToolCall {
	j.t.Helper()
	select {
	case e := <-j.events:
		return e
	case <-time.After(10 * time.Second):
		j.t.Fatal("no tool call reached the caller")
	}
	return api.ToolCall{}
}

func (j *jail) answer(p peercred.Peer, id, body string) *api.Error {
	r, aerr := j.reg.Lookup(p, "r1", id)
	if aerr != nil {
		return aerr
	}
	return r.Answer(p, id, []byte(body), false)
}

func (j *jail) noEvent() {
	j.t.Helper()
	select {
	case e := <-j.events:
		j.t.Fatalf("a call reached the caller: %+v", e)
	default:
	}
}

var addSchema = json.RawMessage(`{"type":"object","properties":{"x":{"type":"number"},"y":{"type":"number"}},"required":["x","y"],"additionalProperties":false}`)

func addReq() *api.RunRequest {
	return &api.RunRequest{Code: "x", Tools: []api.Tool{{Name: "add", Description: "Add.", InputSchema: addSchema}, {Name: "any"}}}
}

func TestCallAndAnswer(t *testing.T) {
	j := newJail(t, addReq(), DefaultConfig())
	j.call("c1", "add", `{"x": 2, "y": 3}`)
	e := j.event()
	if e.Name != "add" || string(e.Arguments) != `{"x": 2, "y": 3}` || e.TimeoutMs != DefaultTimeout.Milliseconds() || len(e.ID) != 33 {
		t.Fatalf("event %+v", e)
	}
	if aerr := j.answer(owner, e.ID, `{"result": 5}`); aerr != nil {
		t.Fatal(aerr)
	}
	if m := j.result("c1"); m["ok"] != true || m["result"] != float64(5) {
		t.Fatalf("result %v", m)
	}
	// Once: a second answer finds nothing.
	if aerr := j.answer(owner, e.ID, `{"result": 6}`); aerr == nil || aerr.Type != api.ErrNotFound {
		t.Fatalf("second answer: %v", aerr)
	}
	j.relay.Stop()
	calls, recs, over, _ := j.relay.Report()
	if len(calls) != 1 || !calls[0].OK || calls[0].Name != "add" || calls[0].Outcome != api.ToolOK || over != 0 {
		t.Fatalf("report %+v", calls)
	}
	if r := recs[0]; r.ID != e.ID || !r.Declared || r.ArgumentBytes != len(`{"x": 2, "y": 3}`) || r.ResultBytes != 1 || len(r.ResultSHA256) != 64 || r.Arguments != nil || r.Result != nil {
		t.Fatalf("record %+v", r)
	}
}

func TestErrorAnswer(t *testing.T) {
	j := newJail(t, addReq(), DefaultConfig())
	j.call("c1", "any", `{}`)
	e := j.event()
	if aerr := j.answer(owner, e.ID, `{"error": "disk full"}`); aerr != nil {
		t.Fatal(aerr)
	}
	if m := j.result("c1"); m["ok"] != false || m["error"] != "disk full" {
		t.Fatalf("result %v", m)
	}
	j.relay.Stop()
	calls, _, _, _ := j.relay.Report()
	if calls[0].OK || calls[0].Outcome != api.ToolErrored || calls[0].Error != "disk full" {
		t.Fatalf("report %+v", calls)
	}
}

func TestRefusedCallsNeverReachTheCaller(t *testing.T) {
	cfg := DefaultConfig()
	req := addReq()
	req.ToolLimits = &api.ToolLimits{ArgumentBytes: 100}
	j := newJail(t, req, cfg)
	for _, c := range []struct{ id, name, args, want string }{
		{"c1", "rm", `{}`, `no tool "rm" in this run: its caller declared add, any`},
		{"c2", "add", `{"x": "2", "y": 3}`, "do not match its input schema: at '/x': got string, want number"},
		{"c3", "add", `{"x": 2}`, "missing property 'y'"},
		{"c4", "any", `{"pad": "` + strings.Repeat("z", 200) + `"}`, "bytes; a call may pass at most 100 (tool_limits.argument_bytes)"},
		{"c5", "any", `[1, 2]`, "arguments must be a JSON object"},
	} {
		j.call(c.id, c.name, c.args)
		m := j.result(c.id)
		if m["ok"] != false || !strings.Contains(fmt.Sprint(m["error"]), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.id, m, c.want)
		}
	}
	j.noEvent()
	j.relay.Stop()
	calls, recs, _, _ := j.relay.Report()
	if len(calls) != 5 {
		t.Fatalf("%d calls reported", len(calls))
	}
	for i, c := range calls {
		if c.OK || c.Outcome != api.ToolRefused || c.Error == "" {
			t.Errorf("call %d: %+v", i, c)
		}
	}
	if recs[0].Declared || !recs[1].Declared || recs[0].Name != "rm" {
		t.Errorf("records %+v", recs[:2])
	}
}

func TestMalformedFramesAreDropped(t *testing.T) {
	j := newJail(t, addReq(), DefaultConfig())
	for _, p := range []string{
		`{"type":"tool_call","id":"bad id!","name":"any","arguments":{}}`,
		`{"type":"tool_call","id":"` + strings.Repeat("a", 65) + `","name":"any","arguments":{}}`,
		`{"type":"tool_call","name":"any","arguments":{}}`,
		`{"type":"tool_call","id":"c1","name":"any","arguments":{},"more":1}`,
		`not json`,
	} {
		j.relay.Call([]byte(p))
	}
	// A good call after them is served.
	j.call("ok", "any", `{}`)
	e := j.event()
	j.answer(owner, e.ID, `{"result": null}`)
	if m := j.result("ok"); m["ok"] != true || m["result"] != nil {
		t.Fatalf("result %v", m)
	}
	j.mu.Lock()
	n := len(j.results)
	j.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d results, want only the good call's", n)
	}
}

func TestCallCap(t *testing.T) {
	req := addReq()
	req.ToolLimits = &api.ToolLimits{Calls: 3}
	j := newJail(t, req, DefaultConfig())
	for i := range 10 {
		j.call(fmt.Sprintf("c%d", i), "rm", `{}`)
	}
	for i := range 10 {
		m := j.result(fmt.Sprintf("c%d", i))
		want := "no tool"
		if i >= 3 {
			want = "this run has made 3 tool calls, the most it may (tool_limits.calls)"
		}
		if !strings.Contains(fmt.Sprint(m["error"]), want) {
			t.Errorf("call %d: %v", i, m)
		}
	}
	j.relay.Stop()
	calls, _, over, _ := j.relay.Report()
	if len(calls) != 3 || over != 7 {
		t.Fatalf("%d calls listed, %d over the cap", len(calls), over)
	}
}

func TestTimeout(t *testing.T) {
	req := addReq()
	req.ToolLimits = &api.ToolLimits{TimeoutMs: 20}
	j := newJail(t, req, DefaultConfig())
	j.call("c1", "any", `{}`)
	e := j.event()
	m := j.result("c1")
	if m["ok"] != false || !strings.Contains(fmt.Sprint(m["error"]), "no answer from the run's caller within 20ms") {
		t.Fatalf("result %v", m)
	}
	if aerr := j.answer(owner, e.ID, `{"result": 1}`); aerr == nil || aerr.Type != api.ErrNotFound {
		t.Fatalf("late answer: %v", aerr)
	}
	j.relay.Stop()
	calls, _, _, _ := j.relay.Report()
	if calls[0].Outcome != api.ToolTimeout {
		t.Fatalf("%+v", calls)
	}
}

func TestAnswerOverTheCap(t *testing.T) {
	req := addReq()
	req.ToolLimits = &api.ToolLimits{ResultBytes: 10}
	j := newJail(t, req, DefaultConfig())
	j.call("c1", "any", `{}`)
	e := j.event()
	aerr := j.answer(owner, e.ID, `{"result": "0123456789abc"}`)
	if aerr == nil || aerr.Type != api.ErrTooLarge || aerr.Field != "result" {
		t.Fatalf("answer: %v", aerr)
	}
	if m := j.result("c1"); m["ok"] != false || !strings.Contains(fmt.Sprint(m["error"]), "over the cap of 10 (tool_limits.result_bytes)") {
		t.Fatalf("result %v", m)
	}
	// Cut by the server at AnswerLimit.
	j.call("c2", "any", `{}`)
	e = j.event()
	r, _ := j.reg.Lookup(owner, "r1", e.ID)
	if aerr := r.Answer(owner, e.ID, []byte("{"), true); aerr == nil || aerr.Type != api.ErrTooLarge {
		t.Fatalf("cut answer: %v", aerr)
	}
	if m := j.result("c2"); m["ok"] != false {
		t.Fatalf("result %v", m)
	}
	j.relay.Stop()
	calls, _, _, _ := j.relay.Report()
	if calls[0].Outcome != api.ToolTooLarge || calls[1].Outcome != api.ToolTooLarge {
		t.Fatalf("%+v", calls)
	}
}

func TestBadAnswersLeaveTheCallWaiting(t *testing.T) {
	j := newJail(t, addReq(), DefaultConfig())
	j.call("c1", "any", `{}`)
	e := j.event()
	for _, c := range []struct{ body, field string }{
		{`[]`, ""},
		{`{}`, ""},
		{`{"result": 1, "error": "x"}`, ""},
		{`{"error": 5}`, "error"},
		{`{"value": 1}`, "value"},
		{`{"result": ` + strings.Repeat("[", 65) + strings.Repeat("]", 65) + `}`, "result"},
		{"{\"result\": \"\xff\"}", ""},
	} {
		aerr := j.answer(owner, e.ID, c.body)
		if aerr == nil || aerr.Type != api.ErrBadRequest || aerr.Field != c.field {
			t.Errorf("%s: %v, want bad_request on %q", c.body, aerr, c.field)
		}
	}
	if aerr := j.answer(owner, e.ID, `{"result": {"a" : [1, 2]}}`); aerr != nil {
		t.Fatal(aerr)
	}
	if m := j.result("c1"); m["ok"] != true {
		t.Fatalf("result %v", m)
	}
}

func TestOnlyTheOwnerAnswers(t *testing.T) {
	j := newJail(t, addReq(), DefaultConfig())
	j.call("c1", "any", `{}`)
	e := j.event()
	other := peercred.Peer{UID: 1001}
	_, foreign := j.reg.Lookup(other, "r1", e.ID)
	_, unknown := j.reg.Lookup(other, "r1", "t00000000000000000000000000000000")
	_, unknownRun := j.reg.Lookup(owner, "r2", e.ID)
	if foreign == nil || foreign.Type != api.ErrNotFound {
		t.Fatalf("another uid: %v", foreign)
	}
	if strings.ReplaceAll(foreign.Message, e.ID, "ID") != strings.ReplaceAll(unknown.Message, "t00000000000000000000000000000000", "ID") {
		t.Errorf("another uid is told %q, an unknown id %q", foreign.Message, unknown.Message)
	}
	if unknownRun == nil || unknownRun.Type != api.ErrNotFound {
		t.Errorf("unknown run: %v", unknownRun)
	}
	// Answer with another uid through a relay found by the owner: still no.
	r, _ := j.reg.Lookup(owner, "r1", e.ID)
	if aerr := r.Answer(other, e.ID, []byte(`{"result": 1}`), false); aerr == nil || aerr.Type != api.ErrNotFound {
		t.Fatalf("answer by another uid: %v", aerr)
	}
	// Root may.
	if aerr := j.answer(peercred.Peer{UID: 0}, e.ID, `{"result": 1}`); aerr != nil {
		t.Fatal(aerr)
	}
	j.result("c1")
}

func TestDuplicateJailIDs(t *testing.T) {
	j := newJail(t, addReq(), DefaultConfig())
	j.call("c1", "any", `{"n": 1}`)
	e := j.event()
	j.call("c1", "any", `{"n": 2}`)
	if m := j.result("c1"); m["ok"] != false || !strings.Contains(fmt.Sprint(m["error"]), "already waiting") {
		t.Fatalf("duplicate: %v", m)
	}
	j.noEvent()
	j.mu.Lock()
	delete(j.results, "c1")
	j.mu.Unlock()
	j.answer(owner, e.ID, `{"result": 1}`)
	if m := j.result("c1"); m["ok"] != true {
		t.Fatalf("first call: %v", m)
	}
}

func TestStopCancelsWaitingCalls(t *testing.T) {
	j := newJail(t, addReq(), DefaultConfig())
	j.call("c1", "any", `{}`)
	e := j.event()
	j.relay.Stop()
	if aerr := j.answer(owner, e.ID, `{"result": 1}`); aerr == nil {
		t.Fatal("an answer after the relay stopped was taken")
	}
	j.mu.Lock()
	n := len(j.results)
	j.mu.Unlock()
	if n != 0 {
		t.Fatalf("a result after stop: %v", j.results)
	}
	calls, _, _, _ := j.relay.Report()
	if calls[0].Outcome != api.ToolCanceled {
		t.Fatalf("%+v", calls)
	}
	// Calls after Stop are dropped.
	j.call("c2", "any", `{}`)
	if calls, _, _, _ := j.relay.Report(); len(calls) != 1 {
		t.Fatalf("a call after stop was taken: %+v", calls)
	}
}

func TestEmitFailureFailsTheCall(t *testing.T) {
	tools, _ := Prepare(addReq(), DefaultConfig())
	reg := NewRegistry()
	r := reg.Open(tools, "r1", owner, func(context.Context, api.ToolCall) error { return errors.New("broken pipe") }, nil)
	got := make(chan []byte, 1)
	r.Start(func(f []byte) { got <- f })
	r.Call([]byte(`{"type":"tool_call","id":"c1","name":"any","arguments":{}}`))
	select {
	case f := <-got:
		if !strings.Contains(string(f), `"ok":false`) {
			t.Fatalf("frame %s", f)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no result")
	}
	r.Close()
}

func TestKeepContent(t *testing.T) {
	cfg := DefaultConfig()
	cfg.KeepContent = true
	j := newJail(t, addReq(), cfg)
	j.call("c1", "add", `{"x":1,"y":2}`)
	e := j.event()
	j.answer(owner, e.ID, `{"result": 3}`)
	j.result("c1")
	j.relay.Stop()
	_, recs, _, _ := j.relay.Report()
	if string(recs[0].Arguments) != `{"x":1,"y":2}` || string(recs[0].Result) != "3" {
		t.Fatalf("%+v", recs[0])
	}
}

func TestPrepare(t *testing.T) {
	cfg := DefaultConfig()
	for _, c := range []struct {
		req   api.RunRequest
		field string
		typ   api.ErrorType
	}{
		{api.RunRequest{Tools: []api.Tool{{Name: "a"}, {Name: "b", InputSchema: json.RawMessage(`{"type": "strin"}`)}}}, "tools[1].input_schema", api.ErrBadRequest},
		{api.RunRequest{Tools: []api.Tool{{Name: "a", InputSchema: json.RawMessage(`{"$ref": "file:///etc/passwd"}`)}}}, "tools[0].input_schema", api.ErrBadRequest},
		{api.RunRequest{Tools: []api.Tool{{Name: "a", InputSchema: json.RawMessage(`{"$ref": "http://127.0.0.1:1/x.json"}`)}}}, "tools[0].input_schema", api.ErrBadRequest},
		{api.RunRequest{Tools: []api.Tool{{Name: "a", InputSchema: json.RawMessage(`{"properties": {"p": {"pattern": "(?=x)"}}}`)}}}, "tools[0].input_schema", api.ErrBadRequest},
		{api.RunRequest{Tools: []api.Tool{{Name: "a"}}, ToolLimits: &api.ToolLimits{Calls: cfg.Maxima.Calls + 1}}, "tool_limits.calls", api.ErrOverLimit},
		{api.RunRequest{Tools: []api.Tool{{Name: "a"}}, ToolLimits: &api.ToolLimits{TimeoutMs: cfg.Maxima.TimeoutMs + 1}}, "tool_limits.timeout_ms", api.ErrOverLimit},
	} {
		_, aerr := Prepare(&c.req, cfg)
		if aerr == nil || aerr.Field != c.field || aerr.Type != c.typ {
			t.Errorf("%+v: %v, want %s on %s", c.req.Tools, aerr, c.typ, c.field)
		}
	}
	tools, aerr := Prepare(&api.RunRequest{Tools: []api.Tool{{Name: "a", InputSchema: json.RawMessage(`{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "definitions": {"n": {"type": "integer"}}, "properties": {"n": {"$ref": "#/definitions/n"}}}`)}},
		ToolLimits: &api.ToolLimits{Calls: 5}}, cfg)
	if aerr != nil {
		t.Fatal(aerr)
	}
	if c := tools.Caps(); c.Calls != 5 || c.TimeoutMs != cfg.Defaults.TimeoutMs {
		t.Errorf("caps %+v", c)
	}
	if tools, aerr := Prepare(&api.RunRequest{}, cfg); tools != nil || aerr != nil {
		t.Errorf("no tools: %v %v", tools, aerr)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	c := DefaultConfig()
	c.Defaults.Calls = c.Maxima.Calls + 1
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--default-tool-calls") {
		t.Errorf("default over maximum: %v", err)
	}
	c = DefaultConfig()
	c.Maxima.ResultBytes = MaxResultBytes + 1
	if err := c.Validate(); err == nil {
		t.Error("a maximum over the bound was taken")
	}
}

func TestUnsentArgumentsAreBounded(t *testing.T) {
	tools, _ := Prepare(addReq(), DefaultConfig())
	reg := NewRegistry()
	stuck := make(chan struct{})
	// A caller that does not read its stream: every call stays unsent.
	r := reg.Open(tools, "r1", owner, func(context.Context, api.ToolCall) error { <-stuck; return errors.New("gone") }, nil)
	var mu sync.Mutex
	var refused []string
	r.Start(func(f []byte) {
		mu.Lock()
		refused = append(refused, string(f))
		mu.Unlock()
	})
	pad := strings.Repeat("z", 1000000)
	for i := range 40 {
		r.Call(fmt.Appendf(nil, `{"type":"tool_call","id":"c%d","name":"any","arguments":{"pad":%q}}`, i, pad))
	}
	mu.Lock()
	n := len(refused)
	first := ""
	if n > 0 {
		first = refused[0]
	}
	mu.Unlock()
	if n != 40-33 || !strings.Contains(first, `"id":"c33"`) || !strings.Contains(first, "too many waiting to be sent") {
		t.Errorf("%d refused; the first: %.200s", n, first)
	}
	close(stuck)
	r.Close()
}

// TestAnswerOrTimeoutNotBoth: an answer that comes when the call's time
// is up, before the call ended, either ends the call (the caller is told
// it was answered, the code gets it) or is refused like any late one
// (the code is told of the timeout): never acknowledged and dropped.
func TestAnswerOrTimeoutNotBoth(t *testing.T) {
	req := addReq()
	req.ToolLimits = &api.ToolLimits{TimeoutMs: 50}
	j := newJail(t, req, DefaultConfig())
	late := make(chan *api.Error, 1)
	testHookTimedOut = func(id string) {
		r, aerr := j.reg.Lookup(owner, "r1", id)
		if aerr == nil {
			aerr = r.Answer(owner, id, []byte(`{"result": 3}`), false)
		}
		late <- aerr
	}
	t.Cleanup(func() { testHookTimedOut = nil })
	j.call("c1", "add", `{"x": 1, "y": 2}`)
	j.event()
	m := j.result("c1")
	aerr := <-late
	j.relay.Stop()
	calls, _, _, _ := j.relay.Report()
	answered := aerr == nil && m["ok"] == true && m["result"] == float64(3) && calls[0].Outcome == api.ToolOK
	timedOut := aerr != nil && aerr.Type == api.ErrNotFound && m["ok"] == false && calls[0].Outcome == api.ToolTimeout
	if !answered && !timedOut {
		t.Errorf("the answer got %v; the code got %v; the report says %+v", aerr, m, calls)
	}
}

// TestStuckWritesHoldNothing: a call whose write to the caller does not
// return times out on its own, and the relay's end does not wait for the
// write.
func TestStuckWritesHoldNothing(t *testing.T) {
	req := addReq()
	req.ToolLimits = &api.ToolLimits{TimeoutMs: 100}
	tools, aerr := Prepare(req, DefaultConfig())
	if aerr != nil {
		t.Fatal(aerr)
	}
	stuck := make(chan struct{})
	t.Cleanup(func() { close(stuck) })
	writing := make(chan struct{}, 2)
	r := NewRegistry().Open(tools, "r1", owner, func(context.Context, api.ToolCall) error {
		writing <- struct{}{}
		<-stuck
		return errors.New("gone")
	}, nil)
	replies := make(chan string, 2)
	r.Start(func(f []byte) { replies <- string(f) })
	r.Call([]byte(`{"type":"tool_call","id":"c1","name":"add","arguments":{"x":1,"y":2}}`))
	if f := <-replies; !strings.Contains(f, `the run's caller did not take the call within 100ms`) {
		t.Errorf("reply %s", f)
	}
	r.Call([]byte(`{"type":"tool_call","id":"c2","name":"add","arguments":{"x":1,"y":2}}`))
	<-writing
	<-writing
	stopped := make(chan struct{})
	go func() { r.Close(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the relay's end waited for a write to the caller")
	}
	calls, _, _, _ := r.Report()
	if len(calls) != 2 || calls[0].Outcome != api.ToolTimeout || calls[1].Outcome != api.ToolCanceled {
		t.Errorf("%+v", calls)
	}
}

// TestAnswersReachTheCodeWhole: an answer of 3 MiB of "<" is a frame of
// 3 MiB, which the code gets; an answer whose frame would still be over
// the runner's bound fails the call in the code, and the caller is told.
func TestAnswersReachTheCodeWhole(t *testing.T) {
	req := addReq()
	req.ToolLimits = &api.ToolLimits{ResultBytes: 8 << 20}
	j := newJail(t, req, DefaultConfig())
	j.call("c1", "any", `{}`)
	e := j.event()
	big := strings.Repeat("<", 3<<20)
	if aerr := j.answer(owner, e.ID, `{"result": "`+big+`"}`); aerr != nil {
		t.Fatal(aerr)
	}
	if m := j.result("c1"); m["ok"] != true || m["result"] != big {
		t.Fatalf("the code got ok %v and %d bytes", m["ok"], len(fmt.Sprint(m["result"])))
	}
	old := maxReplyFrame
	maxReplyFrame = 1000
	t.Cleanup(func() { maxReplyFrame = old })
	j.call("c2", "any", `{}`)
	e = j.event()
	if aerr := j.answer(owner, e.ID, `{"result": "`+strings.Repeat("x", 2000)+`"}`); aerr == nil || aerr.Type != api.ErrTooLarge || aerr.Field != "result" {
		t.Errorf("the caller was told %v", aerr)
	}
	if m := j.result("c2"); m["ok"] != false || !strings.Contains(m["error"].(string), "could not be passed to the code") {
		t.Errorf("the code got %v", m)
	}
	j.relay.Stop()
	calls, _, _, _ := j.relay.Report()
	if calls[0].Outcome != api.ToolOK || calls[1].Outcome != api.ToolTooLarge {
		t.Errorf("%+v", calls)
	}
}

// TestKeptContentIsBounded: with KeepContent, the records keep no content
// of calls refused before the caller heard of them, and at most
// contentBudget of a run's calls in all.
func TestKeptContentIsBounded(t *testing.T) {
	cfg := DefaultConfig()
	cfg.KeepContent = true
	j := newJail(t, addReq(), cfg)
	args := `{"pad": "` + strings.Repeat("p", 60<<10) + `"}`
	for i := range 20 {
		j.call(fmt.Sprint("r", i), "nope", args)
		j.call(fmt.Sprint("s", i), "add", args)
	}
	for i := range 100 {
		id := fmt.Sprint("c", i)
		j.call(id, "any", args)
		e := j.event()
		if aerr := j.answer(owner, e.ID, `{"result": "`+strings.Repeat("r", 1000)+`"}`); aerr != nil {
			t.Fatal(aerr)
		}
		j.result(id)
	}
	j.relay.Stop()
	_, recs, _, _ := j.relay.Report()
	kept, first := 0, true
	for i, r := range recs {
		if r.Outcome == api.ToolRefused && (r.Arguments != nil || r.Result != nil) {
			t.Fatalf("record %d, refused, kept its content", i)
		}
		kept += len(r.Arguments) + len(r.Result)
		if r.Outcome == api.ToolOK && r.Arguments == nil && first {
			first = false
			t.Logf("content kept up to call %d", i)
		}
	}
	if kept > contentBudget || first {
		t.Errorf("kept %d bytes; the budget is %d", kept, contentBudget)
	}
	if r := recs[len(recs)-1]; r.ArgumentBytes != len(args) || r.ArgumentSHA256 == "" {
		t.Errorf("the last record: %+v", r)
	}
}
