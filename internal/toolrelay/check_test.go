package toolrelay

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/toolschema"
	"github.com/cellblock/cellblock/nsjail/runner"
)

func TestDepthIsTheRunners(t *testing.T) {
	if toolschema.MaxDepth != runner.MaxJSONDepth {
		t.Errorf("toolschema.MaxDepth %d, runner.MaxJSONDepth %d", toolschema.MaxDepth, runner.MaxJSONDepth)
	}
}

// exponential is a schema of a few hundred bytes whose checks double at
// each level of the arguments.
const exponential = `{"$defs": {"a": {"anyOf": [{"items": {"$ref": "#/$defs/a"}}, {"items": {"$ref": "#/$defs/a"}, "minItems": 1}]}}, "properties": {"x": {"$ref": "#/$defs/a"}}}`

func TestCostlySchemasAreRefused(t *testing.T) {
	for _, schema := range []string{exponential, `{"properties": {"n": {"minimum": 1e999999}}}`} {
		req := &api.RunRequest{Tools: []api.Tool{{Name: "ok"}, {Name: "t", InputSchema: json.RawMessage(schema)}}}
		_, aerr := Prepare(req, DefaultConfig())
		if aerr == nil || aerr.Field != "tools[1].input_schema" || aerr.Type != api.ErrBadRequest || !strings.HasPrefix(aerr.Message, "the daemon will not check arguments against it: ") {
			t.Errorf("%s: %v", schema, aerr)
		}
	}
}

func TestCheckWorkIsBounded(t *testing.T) {
	// 100 subschemas for every item: a call of 50,000 items is too
	// much to check, one of 1,000 is not.
	var subs []string
	for range 100 {
		subs = append(subs, `{"items": {"type": "number"}}`)
	}
	req := &api.RunRequest{Tools: []api.Tool{{Name: "t", InputSchema: json.RawMessage(`{"properties": {"a": {"allOf": [` + strings.Join(subs, ",") + `]}}}`)}}}
	j := newJail(t, req, DefaultConfig())
	j.call("big", "t", `{"a": [`+strings.TrimSuffix(strings.Repeat("1,", 50000), ",")+`]}`)
	if m := j.result("big"); m["ok"] != false || !strings.HasPrefix(m["error"].(string), "the arguments of t: they are too much to check against the input schema") {
		t.Fatalf("%v", m)
	}
	j.noEvent()
	j.call("small", "t", `{"a": [`+strings.TrimSuffix(strings.Repeat("1,", 1000), ",")+`]}`)
	j.event()
}

// TestHugeNumbersAreRefusedAtOnce: a megabyte of numbers that would each
// cost the schema library 20 ms is refused before it sees them.
func TestHugeNumbersAreRefusedAtOnce(t *testing.T) {
	req := &api.RunRequest{Tools: []api.Tool{{Name: "t", InputSchema: json.RawMessage(`{"properties": {"n": {"type": "array", "items": {"type": "integer"}}}}`)}}}
	j := newJail(t, req, DefaultConfig())
	args := `{"n": [` + strings.TrimSuffix(strings.Repeat("1e999999,", 110000), ",") + `]}`
	start := time.Now()
	j.call("c1", "t", args)
	m := j.result("c1")
	if m["ok"] != false || !strings.Contains(m["error"].(string), "the number 1e999999 is beyond what the daemon checks") {
		t.Fatalf("%v", m)
	}
	t.Logf("refused in %v", time.Since(start))
	j.noEvent()
}

// stallChecks makes every check wait until the returned func is called.
func stallChecks(t *testing.T) (started <-chan struct{}, release func()) {
	gate := make(chan struct{})
	begun := make(chan struct{}, 100)
	old := validateArgs
	validateArgs = func(s *toolschema.Schema, args []byte) error {
		begun <- struct{}{}
		<-gate
		return old(s, args)
	}
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(func() { release(); validateArgs = old })
	return begun, release
}

// TestSlowChecksHoldNothing: a check that does not end holds neither the
// call past its timeout, nor the reader of the runner's channel, nor the
// end of the run.
func TestSlowChecksHoldNothing(t *testing.T) {
	begun, release := stallChecks(t)
	req := addReq()
	req.ToolLimits = &api.ToolLimits{TimeoutMs: 300}
	j := newJail(t, req, DefaultConfig())
	j.call("c1", "add", `{"x": 1, "y": 2}`) // Call returns: the check is not its
	<-begun
	m := j.result("c1")
	if m["ok"] != false || !strings.Contains(m["error"].(string), "checking its arguments against the tool's input schema took longer than the call may take") {
		t.Fatalf("%v", m)
	}
	j.noEvent()
	j.call("c2", "add", `{"x": 1, "y": 2}`)
	<-begun
	stopped := make(chan struct{})
	go func() { j.relay.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop waited for a check")
	}
	calls, _, _, _ := j.relay.Report()
	if len(calls) != 2 || calls[0].Outcome != api.ToolRefused || calls[1].Outcome != api.ToolCanceled {
		t.Errorf("%+v", calls)
	}
	// The checks end on their own and give their checkers back.
	release()
	j2 := newJail(t, req, DefaultConfig())
	for i := range cap(checkers) + 1 {
		j2.call(fmt.Sprint("d", i), "add", `{"x": 1, "y": 2}`)
		j2.event()
	}
}
