package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/cellblock/cellblock/internal/api"
)

// MCP code mode against the real daemon: bin/cellblock-mcp with
// --mcp-config connects to a test MCP server (integration/testdata/
// mcptools, built here, over stdio), and the code run_python runs in a
// real jail calls its tools.

var (
	mcpToolsOnce sync.Once
	mcpToolsBin  string
	mcpToolsErr  error
)

// mcpToolsServer builds the test MCP server once per test binary.
func mcpToolsServer(t *testing.T) string {
	t.Helper()
	mcpToolsOnce.Do(func() {
		// go test puts its own go first in PATH.
		goCmd, err := exec.LookPath("go")
		if err != nil {
			mcpToolsErr = fmt.Errorf("build the test MCP server: %w", err)
			return
		}
		dir, err := os.MkdirTemp("", "cellblock-mcptools-")
		if err != nil {
			mcpToolsErr = err
			return
		}
		afterSuite(func() { os.RemoveAll(dir) })
		cmd := exec.Command(goCmd, "build", "-o", filepath.Join(dir, "mcptools"), "./integration/testdata/mcptools")
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			mcpToolsErr = fmt.Errorf("build the test MCP server: %v\n%s", err, out)
			return
		}
		mcpToolsBin = filepath.Join(dir, "mcptools")
	})
	if mcpToolsErr != nil {
		t.Fatal(mcpToolsErr)
	}
	return mcpToolsBin
}

// codeModeConfig writes an mcpServers JSON naming the test server
// "tools", which logs its calls to the returned file.
func codeModeConfig(t *testing.T) (config, callLog string) {
	t.Helper()
	dir := t.TempDir()
	callLog = filepath.Join(dir, "calls.log")
	config = filepath.Join(dir, "mcp.json")
	doc, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{
		"tools": map[string]any{"command": mcpToolsServer(t), "args": []string{}, "env": map[string]string{"MCPTOOLS_LOG": callLog}},
	}})
	if err := os.WriteFile(config, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	return config, callLog
}

func callLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Fields(strings.ReplaceAll(string(b), " ", "_"))
}

func TestMCPCodeMode(t *testing.T) {
	d := daemon(t)
	config, callLog := codeModeConfig(t)
	c := mcpStdioArgs(t, d.Socket, []string{"--mcp-config", config,
		"--allow-tool", "tools__s*", "--allow-tool", "tools__greet", "--allow-tool", "tools__wipe"},
		mcpclient.WithProtocolVersion(mcp.LATEST_LEGACY_PROTOCOL_VERSION))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// run_python's description lists the callable tools with their
	// Python signatures, and those that are not.
	list, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var desc string
	for _, tool := range list.Tools {
		if tool.Name == "run_python" {
			desc = tool.Description
		}
	}
	for _, want := range []string{
		"- tools__square(*, n: int): Square a whole number.",
		"- tools__stats(*, values: list[float]): Count and sum numbers.",
		"- tools__greet(*, name: str): Greet someone.",
		"tools__wipe (annotated destructive; allow it by name with --allow-destructive-tool)",
		"tools__fail (not allowed by --allow-tool)",
	} {
		if !strings.Contains(desc, want) {
			t.Errorf("run_python's description lacks %q:\n%s", want, desc)
		}
	}

	// A loop over one tool, aggregated in the code.
	res := mcpCall(t, ctx, c, "run_python", map[string]any{"code": `total = 0
for i in range(10):
    total += tools.tools__square(n=i)
(total, tools.tools__stats(values=[1, 2, 3.5]), tools.tools__greet(name="Ada"))`}, nil)
	var r api.Result
	mcpStructured(t, res, &r)
	if res.IsError || r.Value == nil || string(r.Value.JSON) != `[285,{"count":3,"sum":6.5},"hello, Ada"]` {
		t.Fatalf("result %s\n%+v", mcpText(res), r.Value)
	}
	if len(r.ToolCalls) != 12 {
		t.Fatalf("tool_calls %+v", r.ToolCalls)
	}
	for i, tc := range r.ToolCalls {
		want := "tools__square"
		if i == 10 {
			want = "tools__stats"
		} else if i == 11 {
			want = "tools__greet"
		}
		if tc.Name != want || !tc.OK {
			t.Errorf("call %d: %+v, want %s ok", i, tc, want)
		}
	}
	if !strings.Contains(mcpText(res), "(12 tool calls)") {
		t.Errorf("the text does not count the calls:\n%s", mcpText(res))
	}
	e := auditEntry(t, d, r.RunID)
	if len(e.ToolCalls) != 12 || e.ToolCalls[0].Name != "tools__square" || e.ToolCalls[0].Outcome != "ok" || e.ToolCalls[0].ArgumentSHA256 != sha(`{"n":0}`) {
		t.Errorf("audit: %+v", e.ToolCalls)
	}
	calls := callLines(t, callLog)
	if len(calls) != 12 || calls[0] != `square_{"n":0}` || calls[9] != `square_{"n":9}` {
		t.Errorf("the MCP server got %v", calls)
	}

	// Tools that are not allowed raise ToolError and never reach the
	// server: one no pattern matches, one that is destructive.
	res = mcpCall(t, ctx, c, "run_python", map[string]any{"code": `import cellblock
out = []
for name in ("tools__fail", "tools__wipe"):
    try:
        getattr(tools, name)(path="/")
    except cellblock.ToolError as e:
        out.append(str(e))
try:
    cellblock.call_tool("tools__wipe", {"path": "/"})
except cellblock.ToolError as e:
    out.append(str(e))
out`}, nil)
	mcpStructured(t, res, &r)
	want := `["no tool 'tools__fail' in this run; it declares tools__greet, tools__square, tools__stats",` +
		`"no tool 'tools__wipe' in this run; it declares tools__greet, tools__square, tools__stats",` +
		`"no tool \"tools__wipe\" in this run: its caller declared tools__greet, tools__square, tools__stats"]`
	if r.Value == nil || string(r.Value.JSON) != want {
		t.Fatalf("calls of tools not allowed: %s\n%+v", mcpText(res), r.Value)
	}
	if n := len(callLines(t, callLog)); n != 12 {
		t.Errorf("the MCP server got %d calls, want still 12: %v", n, callLines(t, callLog))
	}
}

func TestMCPCodeModeDestructiveByName(t *testing.T) {
	d := daemon(t)
	config, callLog := codeModeConfig(t)
	c := mcpStdioArgs(t, d.Socket, []string{"--mcp-config", config,
		"--allow-tool", "tools__*", "--allow-destructive-tool", "tools__wipe"}, mcpclient.WithProtocolVersion(mcp.LATEST_LEGACY_PROTOCOL_VERSION))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res := mcpCall(t, ctx, c, "run_python", map[string]any{"code": `import cellblock
r = [tools.tools__wipe(path="/tmp/x")]
try:
    tools.tools__fail()
except cellblock.ToolError as e:
    r.append(str(e))
try:
    tools.tools__square(n="seven")
except cellblock.ToolError as e:
    r.append("schema: " + str(e))
r`}, nil)
	var r api.Result
	mcpStructured(t, res, &r)
	if r.Value == nil || !strings.HasPrefix(string(r.Value.JSON), `["wiped","the tool failed on purpose","schema: the arguments of tools__square do not match its input schema: at '/n': got string, want integer"]`) {
		t.Fatalf("%s\n%+v", mcpText(res), r.Value)
	}
	if calls := callLines(t, callLog); len(calls) != 2 || calls[0] != `wipe_{"path":"/tmp/x"}` {
		t.Errorf("the MCP server got %v", calls)
	}
}
