package audit

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/record"
)

func toolRun() record.Run {
	rec := sampleRun()
	rec.ToolCalls = []record.ToolCall{
		{ID: "t1", Name: "add", Declared: true, Outcome: "ok", Duration: 3 * time.Millisecond,
			ArgumentBytes: 13, ArgumentSHA256: "aa", ResultBytes: 1, ResultSHA256: "bb",
			Arguments: json.RawMessage(`{"secret":"s3"}`), Result: json.RawMessage(`"r3"`)},
		{Name: "rm", Outcome: "refused", Reason: `no tool "rm" in this run`, ArgumentBytes: 2, ArgumentSHA256: "cc"},
		{ID: "t2", Name: "add", Declared: true, Outcome: "error", Error: "the tool said e3"},
	}
	rec.ToolCallsOverCap = 7
	return rec
}

func TestToolCallsWithoutContent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := Open(Config{Path: path, MaxBytes: 1 << 20}, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Observe(toolRun())
	l.Close()
	raw, _ := os.ReadFile(path)
	for _, secret := range []string{"s3", "r3", "e3"} {
		if strings.Contains(string(raw), secret) {
			t.Errorf("the line holds a tool call's content (%s): %s", secret, raw)
		}
	}
	var e Entry
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatal(err)
	}
	if len(e.ToolCalls) != 3 || e.ToolCallsOverCap != 7 {
		t.Fatalf("%+v", e)
	}
	c := e.ToolCalls[0]
	if c.ID != "t1" || c.Name != "add" || !c.Declared || c.Outcome != "ok" || c.DurationMs != 3 || c.ArgumentBytes != 13 ||
		c.ArgumentSHA256 != "aa" || c.ResultBytes != 1 || c.ResultSHA256 != "bb" {
		t.Errorf("call %+v", c)
	}
	if r := e.ToolCalls[1]; r.ID != "" || r.Declared || r.Reason != `no tool "rm" in this run` {
		t.Errorf("refused call %+v", r)
	}
}

func TestToolCallsWithContent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := Open(Config{Path: path, MaxBytes: 1 << 20, IncludeToolContent: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Observe(toolRun())
	l.Close()
	raw, _ := os.ReadFile(path)
	var e Entry
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatal(err)
	}
	if string(e.ToolCalls[0].Arguments) != `{"secret":"s3"}` || string(e.ToolCalls[0].Result) != `"r3"` || e.ToolCalls[2].Error != "the tool said e3" {
		t.Errorf("content: %+v", e.ToolCalls)
	}
	if strings.Contains(string(raw), "the secret is 42") {
		t.Error("the code is in the line without IncludeCode")
	}
}
