package runner

import (
	"encoding/binary"
	"encoding/json"
	"strings"
	"testing"
)

func TestParseToolCall(t *testing.T) {
	c, err := ParseToolCall([]byte(`{"type":"tool_call","id":"c1","name":"add","arguments":{"x":2,"y":"\udcff"}}`))
	if err != nil || c.ID != "c1" || c.Name != "add" || string(c.Arguments) != `{"x":2,"y":"\ufffd"}` {
		t.Fatalf("%+v %v", c, err)
	}
	for _, p := range []struct{ payload, id string }{
		{`{"type":"tool_call","id":"a b","name":"x","arguments":{}}`, ""},
		{`{"type":"tool_call","id":1,"name":"x","arguments":{}}`, ""},
		{`{"type":"tool_call","id":"` + strings.Repeat("i", MaxToolCallID+1) + `","name":"x","arguments":{}}`, ""},
		{`{"type":"tool_call","id":"c1","name":"x","arguments":{},"extra":1}`, ""},
		{"{\"type\":\"tool_call\",\"id\":\"c1\",\"name\":\"x\xff\",\"arguments\":{}}", ""},
		{`{"type":"tool_call","id":"c1","name":"","arguments":{}}`, "c1"},
		{`{"type":"tool_call","id":"c1","name":"a\u0001","arguments":{}}`, "c1"},
		{`{"type":"tool_call","id":"c1","name":"x","arguments":[1]}`, "c1"},
		{`{"type":"tool_call","id":"c1","name":"x"}`, "c1"},
		{`{"type":"tool_call","id":"c1","name":"x","arguments":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}`, "c1"},
	} {
		c, err := ParseToolCall([]byte(p.payload))
		if err == nil || c.ID != p.id {
			t.Errorf("%.80s: %+v %v, want an error and id %q", p.payload, c, err, p.id)
		}
	}
}

func TestEncodeToolResult(t *testing.T) {
	for _, c := range []struct {
		ok     bool
		result string
		err    string
		want   string
	}{
		{true, `{"a":1}`, "", `{"type":"tool_result","id":"c1","ok":true,"result":{"a":1}}`},
		{true, ``, "", `{"type":"tool_result","id":"c1","ok":true,"result":null}`},
		{false, ``, "no", `{"type":"tool_result","id":"c1","ok":false,"error":"no"}`},
	} {
		f, err := EncodeToolResult("c1", c.ok, json.RawMessage(c.result), c.err)
		if err != nil || int(binary.BigEndian.Uint32(f)) != len(f)-4 || string(f[4:]) != c.want {
			t.Errorf("%s: %q %v", c.want, f, err)
		}
	}
}

func TestCollectorHandsOverToolCalls(t *testing.T) {
	c := NewCollector(DefaultLimits())
	c.Handle([]byte(`{"type":"tool_call","id":"c1","name":"x","arguments":{}}`)) // no hook: ignored
	var got []string
	c.OnToolCall = func(p []byte) { got = append(got, string(p)) }
	c.Handle([]byte(`{"type":"tool_call","id":"c2","name":"x","arguments":{}}`))
	c.Handle([]byte(`{"type":"tool_result","id":"c2","ok":true}`)) // a forged answer: ignored
	if len(got) != 1 || !strings.Contains(got[0], `"c2"`) {
		t.Fatalf("handed over %v", got)
	}
	if r := c.Result(); len(r.Notes) != 0 || r.Done {
		t.Errorf("result %+v", r)
	}
}

// TestFramesDoNotEscapeHTML: "<", ">" and "&" go as they are: escaped
// for HTML, a 3 MiB string of them would be a frame over the runner's
// bound.
func TestFramesDoNotEscapeHTML(t *testing.T) {
	big := `"` + strings.Repeat("<&>", 1<<20) + `"`
	f, err := EncodeToolResult("c1", true, json.RawMessage(big), "")
	if err != nil || len(f) > 4+MaxDaemonFrame || !strings.Contains(string(f), `"result":"<&><&>`) {
		t.Fatalf("%d bytes: %v", len(f), err)
	}
	f, err = EncodeToolResult("c1", false, nil, "a <b> & c")
	if err != nil || !strings.Contains(string(f), `"error":"a <b> & c"`) {
		t.Fatalf("%q: %v", f, err)
	}
	var b strings.Builder
	if err := WriteRun(&b, Run{Code: strings.Repeat("<", 6<<20)}); err != nil || b.Len() > 4+MaxDaemonFrame {
		t.Fatalf("run message of %d bytes: %v", b.Len(), err)
	}
	var m Run
	if err := json.Unmarshal([]byte(b.String()[4:]), &m); err != nil || m.Code != strings.Repeat("<", 6<<20) {
		t.Fatalf("run message: %v", err)
	}
}
