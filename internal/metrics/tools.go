package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/record"
)

// Bounds on the label values of the tool metrics: tool names are the
// callers' choice, so only the first maxToolLabels distinct declared names
// get a series of their own; later ones count as "other", and calls of
// names no run declared as "undeclared".
const (
	maxToolLabels   = 64
	otherTool       = "other"
	undeclaredTool  = "undeclared"
	toolOutcomeOver = "over_cap"
)

// toolOutcomes are the outcomes of a tool call (api's Tool* outcomes) and
// over_cap for the calls refused past a run's cap.
var toolOutcomes = []string{api.ToolOK, api.ToolErrored, api.ToolRefused, api.ToolTimeout, api.ToolTooLarge, api.ToolCanceled, toolOutcomeOver}

// toolMetrics counts tool calls by tool and outcome, and times them.
type toolMetrics struct {
	calls    *prometheus.CounterVec
	duration *prometheus.HistogramVec

	mu    sync.Mutex
	names map[string]bool
}

func newToolMetrics() *toolMetrics {
	t := &toolMetrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cellblock_tool_calls_total",
			Help: "Tool calls of runs by tool and outcome: ok, error (the tool failed), refused (undeclared, bad arguments), timeout, too_large (the answer), canceled (the run ended first), over_cap (past the run's cap; tool \"other\"). Tools past the first 64 names count as \"other\", names no run declared as \"undeclared\".",
		}, []string{"tool", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cellblock_tool_call_duration_seconds",
			Help:    "Time from a tool call to its answer (or its end), by outcome.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10), // 1 ms to about 4 min
		}, []string{"outcome"}),
		names: map[string]bool{},
	}
	for _, o := range toolOutcomes {
		t.duration.WithLabelValues(o)
	}
	return t
}

// label is the tool label of a call.
func (t *toolMetrics) label(c record.ToolCall) string {
	if !c.Declared {
		return undeclaredTool
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.names[c.Name] {
		return c.Name
	}
	if len(t.names) >= maxToolLabels || c.Name == otherTool || c.Name == undeclaredTool {
		return otherTool
	}
	t.names[c.Name] = true
	return c.Name
}

// observe counts the tool calls of one run.
func (t *toolMetrics) observe(rec record.Run) {
	for _, c := range rec.ToolCalls {
		t.calls.WithLabelValues(t.label(c), c.Outcome).Inc()
		t.duration.WithLabelValues(c.Outcome).Observe(c.Duration.Seconds())
	}
	if rec.ToolCallsOverCap > 0 {
		t.calls.WithLabelValues(otherTool, toolOutcomeOver).Add(float64(rec.ToolCallsOverCap))
	}
}
