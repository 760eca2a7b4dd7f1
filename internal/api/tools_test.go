package api

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestValidateTools(t *testing.T) {
	for _, c := range []struct {
		tools  []Tool
		limits *ToolLimits
		field  string
		typ    ErrorType
	}{
		{[]Tool{{Name: "2x"}}, nil, "tools[0].name", ErrBadRequest},
		{[]Tool{{Name: "_x"}}, nil, "tools[0].name", ErrBadRequest},
		{[]Tool{{Name: "lambda"}}, nil, "tools[0].name", ErrBadRequest},
		{[]Tool{{Name: "a-b"}}, nil, "tools[0].name", ErrBadRequest},
		{[]Tool{{Name: strings.Repeat("a", MaxToolName+1)}}, nil, "tools[0].name", ErrBadRequest},
		{[]Tool{{Name: "a"}, {Name: "a"}}, nil, "tools[1].name", ErrBadRequest},
		{[]Tool{{Name: "a", Description: "x\x00"}}, nil, "tools[0].description", ErrBadRequest},
		{[]Tool{{Name: "a", Description: strings.Repeat("d", MaxToolDescription+1)}}, nil, "tools[0].description", ErrTooLarge},
		{[]Tool{{Name: "a", InputSchema: json.RawMessage(`{`)}}, nil, "tools[0].input_schema", ErrBadRequest},
		{[]Tool{{Name: "a", InputSchema: json.RawMessage(`[1]`)}}, nil, "tools[0].input_schema", ErrBadRequest},
		{[]Tool{{Name: "a", InputSchema: json.RawMessage(strings.Repeat(`{"a":`, 40) + "1" + strings.Repeat("}", 40))}}, nil, "tools[0].input_schema", ErrBadRequest},
		{fiveSchemas(), nil, "tools[4].input_schema", ErrTooLarge},
		{nil, &ToolLimits{Calls: 1}, "tool_limits", ErrBadRequest},
		{[]Tool{{Name: "a"}}, &ToolLimits{TimeoutMs: -1}, "tool_limits.timeout_ms", ErrBadRequest},
	} {
		r := RunRequest{Code: "x", Tools: c.tools, ToolLimits: c.limits}
		err := r.Validate()
		if err == nil || err.Field != c.field || err.Type != c.typ {
			t.Errorf("%+v %+v: %v, want %s on %s", c.tools, c.limits, err, c.typ, c.field)
		}
	}
	many := make([]Tool, MaxTools+1)
	for i := range many {
		many[i] = Tool{Name: "t" + strings.Repeat("x", i%50) + string(rune('a'+i%26)) + string(rune('a'+i/26%26))}
	}
	if err := (&RunRequest{Code: "x", Tools: many}).Validate(); err == nil || err.Field != "tools" {
		t.Errorf("too many tools: %v", err)
	}
	ok := RunRequest{Code: "x", Tools: []Tool{{Name: "add", Description: "Add.", InputSchema: json.RawMessage(`{"type": "object"}`)},
		{Name: "files__read_file"}, {Name: "any", InputSchema: json.RawMessage(`true`)}}, ToolLimits: &ToolLimits{Calls: 3}}
	if err := ok.Validate(); err != nil {
		t.Errorf("valid tools refused: %v", err)
	}
}

// fiveSchemas are tools whose schemas are each within MaxToolSchema, but
// over MaxToolSchemasBytes together.
func fiveSchemas() []Tool {
	var out []Tool
	for i := range 5 {
		out = append(out, Tool{Name: "t" + string(rune('a'+i)), InputSchema: json.RawMessage(`{"description": "` + strings.Repeat("d", MaxToolSchema-100) + `"}`)})
	}
	return out
}

func TestResolveToolLimits(t *testing.T) {
	def := ToolLimits{Calls: 10, ArgumentBytes: 100, ResultBytes: 100, TimeoutMs: 1000}
	max := ToolLimits{Calls: 20, ArgumentBytes: 200, ResultBytes: 200, TimeoutMs: 2000}
	if got, err := (*ToolLimits)(nil).Resolve(def, max); err != nil || got != def {
		t.Errorf("nil: %+v %v", got, err)
	}
	got, err := (&ToolLimits{Calls: 20, TimeoutMs: 5}).Resolve(def, max)
	if err != nil || got != (ToolLimits{Calls: 20, ArgumentBytes: 100, ResultBytes: 100, TimeoutMs: 5}) {
		t.Errorf("lower and equal: %+v %v", got, err)
	}
	if _, err := (&ToolLimits{ResultBytes: 201}).Resolve(def, max); err == nil || err.Type != ErrOverLimit || err.Field != "tool_limits.result_bytes" {
		t.Errorf("over the maximum: %v", err)
	}
}
