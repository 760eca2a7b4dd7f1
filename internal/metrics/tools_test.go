package metrics

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/record"
)

func TestToolMetrics(t *testing.T) {
	m := New("v-test")
	calls := []record.ToolCall{
		{Name: "add", Declared: true, Outcome: api.ToolOK, Duration: time.Millisecond},
		{Name: "add", Declared: true, Outcome: api.ToolErrored},
		{Name: "rm_rf_everything", Outcome: api.ToolRefused},
	}
	m.Observe(record.Run{Result: &api.Result{RunID: "r1"}, ToolCalls: calls, ToolCallsOverCap: 5})
	// More declared names than get a label of their own.
	var many []record.ToolCall
	for i := range maxToolLabels + 10 {
		many = append(many, record.ToolCall{Name: fmt.Sprintf("t%d", i), Declared: true, Outcome: api.ToolOK})
	}
	m.Observe(record.Run{Result: &api.Result{RunID: "r2"}, ToolCalls: many})
	out := scrape(t, m)
	for _, want := range []string{
		`cellblock_tool_calls_total{outcome="ok",tool="add"} 1`,
		`cellblock_tool_calls_total{outcome="error",tool="add"} 1`,
		`cellblock_tool_calls_total{outcome="refused",tool="undeclared"} 1`,
		`cellblock_tool_calls_total{outcome="over_cap",tool="other"} 5`,
		`cellblock_tool_calls_total{outcome="ok",tool="other"} 11`,
		`cellblock_tool_call_duration_seconds_count{outcome="ok"} 75`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %s in:\n%s", want, grep(out, "cellblock_tool"))
		}
	}
	if strings.Contains(out, "rm_rf_everything") || strings.Contains(out, fmt.Sprintf(`tool="t%d"`, maxToolLabels)) {
		t.Errorf("an unbounded label:\n%s", grep(out, "cellblock_tool_calls"))
	}
}

func grep(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
