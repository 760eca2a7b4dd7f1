package mcpserver

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/client"
)

// newNetServer is newServer with cellblock-mcp's --network-allow.
func newNetServer(t *testing.T, fd *fakeDaemon, allow ...string) *server.MCPServer {
	t.Helper()
	c := client.New(fd.socket)
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return New(Config{Client: c, Info: info, Version: "test", NetworkAllow: allow})
}

// runPythonDefinition is run_python as the server lists it.
func runPythonDefinition(t *testing.T, srv *server.MCPServer) mcp.Tool {
	t.Helper()
	c := connect(t, srv)
	list, err := c.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range list.Tools {
		if tool.Name == ToolRunPython {
			return tool
		}
	}
	t.Fatal("no run_python")
	return mcp.Tool{}
}

func inputProperties(t *testing.T, tool mcp.Tool) map[string]any {
	t.Helper()
	raw, err := json.Marshal(tool.InputSchema)
	if tool.RawInputSchema != nil {
		raw, err = tool.RawInputSchema, nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties map[string]any `json:"properties"`
	}
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	return schema.Properties
}

// Without --network-allow run_python has no network_allow and says there
// is no network, even when the daemon would give other clients some.
func TestNoNetworkWithoutTheFlag(t *testing.T) {
	info := testInfo()
	info.Network = "none unless asked: a run whose network.allow is within *:443 reaches those hosts"
	fd := startFakeDaemonFor(t, info)
	srv := newServer(t, fd)
	tool := runPythonDefinition(t, srv)
	if _, ok := inputProperties(t, tool)["network_allow"]; ok {
		t.Error("run_python offers network_allow without --network-allow")
	}
	mustContain(t, tool.Description, "No network: the program cannot resolve names, open connections or reach the internet.", "(no pip, no network)")
	if strings.Contains(tool.Description, "unless asked") {
		t.Errorf("the description passes on the daemon's policy:\n%s", tool.Description)
	}
	c := connect(t, srv)
	res := callTool(t, context.Background(), c, ToolRunPython, map[string]any{"code": "1", "network_allow": []string{"api.example.org:443"}})
	if !res.IsError {
		t.Fatalf("network_allow accepted: %s", resultText(res))
	}
	mustContain(t, resultText(res), `unknown argument "network_allow"`)
}

func TestNetworkAllow(t *testing.T) {
	fd := startFakeDaemon(t)
	fd.run = func(_ context.Context, req *api.RunRequest, _ func(string, string)) *api.Result {
		return &api.Result{Stdout: "done\n", Denials: []api.Denial{{Kind: api.DenialNetwork,
			Detail: "CONNECT evil.example:443 refused: not in the network allowlist (api.example.org:443)", Host: "evil.example",
			Port: 443, Reason: api.DenyNotAllowed, Count: 2}}}
	}
	srv := newNetServer(t, fd, "api.example.org:443", "*.files.example.org:443")
	tool := runPythonDefinition(t, srv)
	prop, ok := inputProperties(t, tool)["network_allow"].(map[string]any)
	if !ok {
		t.Fatalf("no network_allow in %v", inputProperties(t, tool))
	}
	mustContain(t, prop["description"].(string), "api.example.org:443, *.files.example.org:443")
	mustContain(t, tool.Description, `Network only when asked: list in "network_allow"`, "api.example.org:443, *.files.example.org:443",
		`"network_allow": ["api.example.org:443"]`, "denials")
	if strings.Contains(tool.Description, "No network:") || strings.Contains(tool.Description, "no pip, no network") {
		t.Errorf("the description still says there is no network:\n%s", tool.Description)
	}

	c := connect(t, srv)
	ctx := context.Background()
	res := callTool(t, ctx, c, ToolRunPython, map[string]any{"code": "1", "network_allow": []string{"api.example.org:443", "a.files.example.org:443"}})
	if res.IsError {
		t.Fatalf("within the bound: %s", resultText(res))
	}
	if req := fd.lastRequest(t); req.Network == nil || strings.Join(req.Network.Allow, " ") != "api.example.org:443 a.files.example.org:443" {
		t.Errorf("the daemon got network %+v", req.Network)
	}
	mustContain(t, resultText(res), "--- denials: what the sandbox refused the program ---",
		"- CONNECT evil.example:443 refused: not in the network allowlist (api.example.org:443) (2 times)")
	if got := resultOf(t, res).Denials; len(got) != 1 || got[0].Count != 2 {
		t.Errorf("structured denials %+v", got)
	}

	before := len(fd.Requests())
	for _, tc := range []struct {
		allow []string
		want  string
	}{
		{[]string{"evil.example:443"}, `"network_allow" entry "evil.example:443" is beyond what this server allows: api.example.org:443, *.files.example.org:443`},
		{[]string{"api.example.org:80"}, "beyond what this server allows"},
		{[]string{"files.example.org:443"}, "beyond what this server allows"},
		{[]string{"api.example.org"}, `"network_allow" entry "api.example.org" needs a port`},
	} {
		res := callTool(t, ctx, c, ToolRunPython, map[string]any{"code": "1", "network_allow": tc.allow})
		if !res.IsError {
			t.Errorf("%v: ran", tc.allow)
			continue
		}
		mustContain(t, resultText(res), "Nothing was run", tc.want)
	}
	if len(fd.Requests()) != before {
		t.Errorf("refused calls reached the daemon")
	}
}

// A session's network is fixed by the call that creates it.
func TestSessionNetworkIsFixed(t *testing.T) {
	fd := startFakeDaemon(t)
	c := connect(t, newNetServer(t, fd, "*.example.org:443"))
	mustRunIn(t, c, "s", "1", map[string]any{"network_allow": []string{"a.example.org:443", "b.example.org:443"}})
	if reqs := fd.SessionRequests(); len(reqs) != 1 || reqs[0].Network == nil || len(reqs[0].Network.Allow) != 2 {
		t.Fatalf("session requests %+v", reqs)
	}
	if req := fd.lastRequest(t); req.Network != nil {
		t.Errorf("the run in the session carried network %+v", req.Network)
	}
	for _, same := range []map[string]any{nil, {"network_allow": []string{"b.example.org:443", "a.example.org:443"}}} {
		if res, _ := runIn(t, c, "s", "1", same); res.IsError {
			t.Errorf("%v: %s", same, resultText(res))
		}
	}
	res, _ := runIn(t, c, "s", "1", map[string]any{"network_allow": []string{"c.example.org:443"}})
	if !res.IsError {
		t.Fatal("another network ran in the session")
	}
	mustContain(t, resultText(res), `"network_allow" c.example.org:443 (it has a.example.org:443, b.example.org:443)`)
}

func TestCheckEnvironmentSaysWhatMayBeAsked(t *testing.T) {
	fd := startFakeDaemon(t)
	for allow, want := range map[string]string{
		"":                    "run_python cannot ask for network on this server",
		"api.example.org:443": "run_python's network_allow may ask for: api.example.org:443",
	} {
		var list []string
		if allow != "" {
			list = []string{allow}
		}
		c := connect(t, newNetServer(t, fd, list...))
		res := callTool(t, context.Background(), c, ToolCheckEnvironment, map[string]any{})
		mustContain(t, resultText(res), want)
	}
}
