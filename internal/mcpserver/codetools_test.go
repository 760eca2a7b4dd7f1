package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/client"
	"github.com/cellblock/cellblock/internal/server/servertest"
)

// toolServer is an MCP server, served over streamable HTTP in the test,
// whose tools code mode connects to. calls records what reached it.
type toolServer struct {
	url   string
	mu    sync.Mutex
	calls []string
}

func startToolServer(t *testing.T) *toolServer {
	t.Helper()
	ts := &toolServer{}
	s := server.NewMCPServer("tools", "1", server.WithToolCapabilities(false))
	note := func(req mcp.CallToolRequest) {
		args, _ := json.Marshal(req.GetArguments())
		ts.mu.Lock()
		ts.calls = append(ts.calls, req.Params.Name+" "+string(args))
		ts.mu.Unlock()
	}
	s.AddTool(mcp.NewTool("square", mcp.WithDescription("Square a whole number.\n\nMore text."),
		mcp.WithInteger("n", mcp.Required()), mcp.WithReadOnlyHintAnnotation(true)),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			note(req)
			n, _ := req.RequireInt("n")
			return mcp.NewToolResultText(fmt.Sprint(n * n)), nil
		})
	// mcp-go's tools say they are destructive unless told otherwise.
	safe := mcp.WithDestructiveHintAnnotation(false)
	s.AddTool(mcp.NewTool("greet", mcp.WithString("name", mcp.Required()), mcp.WithString("style", mcp.Enum("warm", "cold")), safe),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			note(req)
			name, _ := req.RequireString("name")
			return mcp.NewToolResultText("hello, " + name), nil
		})
	s.AddTool(mcp.NewTool("stats", mcp.WithArray("values", mcp.Required(), mcp.WithNumberItems()), safe),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			note(req)
			v, _ := req.RequireFloatSlice("values")
			return mcp.NewToolResultStructured(map[string]any{"count": len(v)}, "x"), nil
		})
	s.AddTool(mcp.NewTool("fail", safe), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		note(req)
		return mcp.NewToolResultError("broken on purpose"), nil
	})
	s.AddTool(mcp.NewTool("wipe", mcp.WithString("path", mcp.Required()), mcp.WithDestructiveHintAnnotation(true)),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			note(req)
			return mcp.NewToolResultText("wiped"), nil
		})
	s.AddTool(mcp.NewTool("other-thing", safe), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		note(req)
		return mcp.NewToolResultText("x"), nil
	})
	hs := httptest.NewServer(server.NewStreamableHTTPServer(s))
	t.Cleanup(hs.Close)
	ts.url = hs.URL + "/mcp"
	return ts
}

func (ts *toolServer) seen() []string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return append([]string(nil), ts.calls...)
}

// openTools connects code mode to ts as server "my-tools" (in the code:
// my_tools) with allow and destructive.
func openTools(t *testing.T, ts *toolServer, allow, destructive []string) *CodeTools {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "mcp.json")
	doc := fmt.Sprintf(`{"mcpServers": {"my-tools": {"url": %q}, "gone": {"command": "/nonexistent/server"}}}`, ts.url)
	if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	ct, err := OpenCodeTools(context.Background(), CodeToolsConfig{ConfigFile: cfg, Allow: allow, AllowDestructive: destructive}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ct.Close)
	return ct
}

func TestCodeToolsAllowAndDescribe(t *testing.T) {
	ts := startToolServer(t)
	ct := openTools(t, ts, []string{"my_tools__s*", "my_tools__g*", "my_tools__fail", "my_tools__wipe"}, nil)
	var names []string
	for _, d := range ct.declared() {
		names = append(names, d.Name)
	}
	if strings.Join(names, " ") != "my_tools__fail my_tools__greet my_tools__square my_tools__stats" {
		t.Fatalf("callable %v", names)
	}
	desc := ct.describe()
	mustContain(t, desc,
		"- my_tools__square(*, n: int): Square a whole number.\n",
		"- my_tools__greet(*, name: str, style: Literal['warm', 'cold'] = ...)\n",
		"- my_tools__stats(*, values: list[float])",
		"my_tools__wipe (annotated destructive; allow it by name with --allow-destructive-tool)",
		"my_tools__other_thing (not allowed by --allow-tool)",
		"MCP servers that could not be reached: gone (",
		"cellblock.ToolError")
	// A destructive tool needs its name too.
	ct = openTools(t, ts, []string{"my_tools__*"}, []string{"my_tools__wipe"})
	if len(ct.declared()) != 6 {
		t.Fatalf("declared %+v", ct.declared())
	}
	// Nothing is callable without --allow-tool.
	ct = openTools(t, ts, nil, nil)
	if ct.has() || !strings.Contains(ct.describe(), "none is allowed here") {
		t.Fatalf("without --allow-tool: %s", ct.describe())
	}
}

func TestCodeToolsCalls(t *testing.T) {
	ts := startToolServer(t)
	ct := openTools(t, ts, []string{"my_tools__*"}, nil)
	call := func(name, args string) (string, error) {
		res, err := ct.call(context.Background(), api.ToolCall{Name: name, Arguments: json.RawMessage(args), TimeoutMs: 5000})
		return string(res), err
	}
	for _, c := range []struct{ name, args, want, err string }{
		{"my_tools__square", `{"n": 7}`, "49", ""},
		{"my_tools__greet", `{"name": "Ada"}`, `"hello, Ada"`, ""},
		{"my_tools__stats", `{"values": [1, 2.5]}`, `{"count":2}`, ""},
		{"my_tools__fail", `{}`, "", "broken on purpose"},
		{"my_tools__wipe", `{"path": "/"}`, "", "my_tools__wipe is not a tool of cellblock-mcp's MCP servers"},
	} {
		got, err := call(c.name, c.args)
		if c.err != "" {
			if err == nil || err.Error() != c.err {
				t.Errorf("%s: %v, want the error %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: %s %v, want %s", c.name, got, err, c.want)
		}
	}
	for _, s := range ts.seen() {
		if strings.HasPrefix(s, "wipe") {
			t.Errorf("a tool not allowed reached its server: %s", s)
		}
	}
}

// TestRunPythonDeclaresCodeTools: run_python's runs declare the callable
// tools, and their calls (made by the stand-in run through the real
// relay) reach the MCP server and come back.
func TestRunPythonDeclaresCodeTools(t *testing.T) {
	ts := startToolServer(t)
	fd := startFakeDaemon(t)
	fd.run = func(ctx context.Context, req *api.RunRequest, emit func(string, string)) *api.Result {
		sum := 0
		for i := range 10 {
			res, err := servertest.CallTool(ctx, req, "my_tools__square", map[string]int{"n": i})
			if err != nil {
				return &api.Result{ExitCode: 1, Stderr: err.Error()}
			}
			var n int
			_ = json.Unmarshal(res, &n)
			sum += n
		}
		_, err := servertest.CallTool(ctx, req, "my_tools__wipe", map[string]string{"path": "/"})
		var te *servertest.ToolError
		if !errors.As(err, &te) {
			return &api.Result{ExitCode: 1, Stderr: fmt.Sprint("wipe: ", err)}
		}
		return &api.Result{Value: &api.Value{Type: "int", Repr: fmt.Sprint(sum)}, Stdout: te.Message + "\n"}
	}
	c := client.New(fd.socket)
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	srv := New(Config{Client: c, Info: info, Version: "test", CodeTools: openTools(t, ts, []string{"my_tools__*"}, nil)})
	mc := connect(t, srv)
	list, err := mc.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var desc string
	for _, tool := range list.Tools {
		if tool.Name == ToolRunPython {
			desc = tool.Description
		}
	}
	mustContain(t, desc, "my_tools__square(*, n: int)", "my_tools__wipe (annotated destructive")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res := callTool(t, ctx, mc, ToolRunPython, map[string]any{"code": "sum(tools.my_tools__square(n=i) for i in range(10))"})
	r := resultOf(t, res)
	if res.IsError || r.Value == nil || r.Value.Repr != "285" {
		t.Fatalf("result %s: %+v", resultText(res), r)
	}
	if !strings.Contains(r.Stdout, `no tool "my_tools__wipe" in this run`) {
		t.Errorf("the call of a tool not allowed: %q", r.Stdout)
	}
	if len(r.ToolCalls) != 11 || !r.ToolCalls[0].OK || r.ToolCalls[10].OK || r.ToolCalls[10].Outcome != api.ToolRefused {
		t.Errorf("tool_calls %+v", r.ToolCalls)
	}
	mustContain(t, resultText(res), "(11 tool calls, 1 failed; the first: my_tools__wipe")
	req := fd.lastRequest(t)
	if len(req.Tools) != 5 || req.Tools[0].Name != "my_tools__fail" {
		t.Errorf("declared %+v", req.Tools)
	}
	if n := len(ts.seen()); n != 10 {
		t.Errorf("%d calls reached the MCP server, want 10: %v", n, ts.seen())
	}
}

func TestCodeName(t *testing.T) {
	for in, want := range map[string]string{
		"files":      "files",
		"my-files":   "my_files",
		"read.file":  "read_file",
		"__private":  "private",
		"9lives":     "t9lives",
		"a--b__c":    "a_b__c",
		"emoji😀tool": "emoji_tool",
		"-":          "",
	} {
		if got := codeName(in); got != want {
			t.Errorf("codeName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPySignature(t *testing.T) {
	for _, c := range []struct{ schema, want string }{
		{``, "f(**arguments)"},
		{`{"type": "object"}`, "f(**arguments)"},
		{`{"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "string"}}, "required": ["a"]}`, "f(*, a: str, b: int = ...)"},
		{`{"type": "object", "properties": {"x": {}}, "additionalProperties": true}`, "f(*, x: Any = ..., **arguments)"},
		{`{"properties": {"odd-name": {"type": "string"}, "ok": {"type": ["string", "null"]}}}`, "f(*, ok: str | None = ..., **arguments)"},
		{`{"properties": {"v": {"anyOf": [{"type": "integer"}, {"type": "array", "items": {"type": "string"}}]}}}`, "f(*, v: int | list[str] = ...)"},
		{`{"properties": {"class": {"type": "string"}}}`, "f(**arguments)"},
	} {
		if got := pySignature("f", json.RawMessage(c.schema)); got != c.want {
			t.Errorf("%s: %s, want %s", c.schema, got, c.want)
		}
	}
}

func TestLoadMCPConfig(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ doc, want string }{
		{`{}`, "no servers"},
		{`not json`, "not the mcpServers JSON"},
		{`{"mcpServers": {"a": {}}}`, "neither a command"},
		{`{"mcpServers": {"a": {"command": "x", "url": "http://y"}}}`, "both a command and a url"},
		{`{"mcpServers": {"a": {"type": "sse", "url": "http://y"}}}`, "SSE transport is not supported"},
		{`{"mcpServers": {"--": {"command": "x"}}}`, "no letter or digit"},
	} {
		p := filepath.Join(dir, "c.json")
		os.WriteFile(p, []byte(c.doc), 0o600)
		if _, err := LoadMCPConfig(p); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.doc, err, c.want)
		}
	}
	if _, err := OpenCodeTools(context.Background(), CodeToolsConfig{ConfigFile: filepath.Join(dir, "c.json"), Allow: []string{"[x"}}, nil); err == nil || !strings.Contains(err.Error(), "not a glob") {
		t.Errorf("bad pattern: %v", err)
	}
}

// TestDeclaredToolsPassValidation: whatever a server says of its tools,
// the run requests that declare them are valid: no NUL in descriptions,
// schemas the daemon cannot check left out, the total bounded.
func TestDeclaredToolsPassValidation(t *testing.T) {
	ct := &CodeTools{log: slog.New(slog.DiscardHandler), byName: map[string]*codeTool{}}
	deep := strings.Repeat(`{"items":`, 40) + `{}` + strings.Repeat(`}`, 40)
	big := `{"type":"object","description":"` + strings.Repeat("d", 200<<10) + `"}`
	listed := []mcp.Tool{
		{Name: "nul", Description: "a\x00b\xff", RawInputSchema: json.RawMessage(`{"type":"object"}`)},
		{Name: "deep", RawInputSchema: json.RawMessage(deep)},
		{Name: "remote", RawInputSchema: json.RawMessage(`{"$ref":"https://example.org/s.json"}`)},
		// Its checks would double at each level of the arguments.
		{Name: "costly", RawInputSchema: json.RawMessage(`{"$defs": {"a": {"anyOf": [{"items": {"$ref": "#/$defs/a"}}, {"items": {"$ref": "#/$defs/a"}}]}}, "$ref": "#/$defs/a"}`)},
	}
	for i := range 150 {
		listed = append(listed, mcp.Tool{Name: fmt.Sprintf("big%d", i), Description: strings.Repeat("x", 20000), RawInputSchema: json.RawMessage(big)})
	}
	ct.add(&codeServer{name: "s"}, listed, CodeToolsConfig{Allow: []string{"*"}})
	req := api.RunRequest{Code: "x", Tools: ct.declared()}
	if e := req.Validate(); e != nil {
		t.Fatalf("declared tools refused: %v", e)
	}
	body, _ := json.Marshal(req)
	if len(body) > api.MaxRequestBytes {
		t.Errorf("the request is %d bytes", len(body))
	}
	if ct.byName["s__deep"].schema != nil || ct.byName["s__remote"].schema != nil || ct.byName["s__costly"].schema != nil || ct.byName["s__nul"].description != "ab\ufffd" {
		t.Errorf("tools %+v %+v %+v %+v", ct.byName["s__deep"], ct.byName["s__remote"], ct.byName["s__costly"], ct.byName["s__nul"])
	}
	if len(ct.refused) == 0 {
		t.Error("nothing refused past the size bound")
	}
	// The schemas past their bound together are left out, not the tools.
	if ct.byName["s__big0"].schema == nil || ct.byName["s__big5"].schema != nil || ct.byName["s__big50"] == nil {
		t.Errorf("big tools: %v %v %v", ct.byName["s__big0"], ct.byName["s__big5"], ct.byName["s__big50"])
	}
}
