package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/toolschema"
	"github.com/cellblock/cellblock/nsjail/runner/wire"
)

// MCP "code mode": cellblock-mcp --mcp-config FILE connects to the MCP
// servers FILE lists (the mcpServers JSON MCP clients use) and lets the
// code run_python runs call their tools as cellblock.tools.SERVER__TOOL(),
// those the operator allows with --allow-tool. A call goes from the jail
// through the daemon (which checks it against the tool's input schema and
// the run's caps) to this process, which calls the server's tool and
// answers. The model gets a loop's worth of tool calls for one round trip,
// and only what the code returns comes back into its context.

// CodeToolsConfig is what the command line says of code mode.
type CodeToolsConfig struct {
	// ConfigFile holds {"mcpServers": {NAME: {...}}}: a stdio server has
	// "command", "args" and "env"; a streamable HTTP one "url" and
	// "headers".
	ConfigFile string
	// Allow are glob patterns (path.Match) over SERVER__TOOL: a tool is
	// callable only when one matches it.
	Allow []string
	// AllowDestructive names, exactly, the tools annotated destructive
	// that may be called; a pattern never allows them.
	AllowDestructive []string
	// Version is cellblock-mcp's, sent to the servers.
	Version string
}

// mcpServerConfig is one server of the mcpServers JSON.
type mcpServerConfig struct {
	Type    string            `json:"type"`
	Command string            `json:"command"`
	Args    []string          `json:"args"`
	Env     map[string]string `json:"env"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
}

// connectTimeout bounds connecting to one server and listing its tools.
const connectTimeout = 30 * time.Second

// Bounds of what a server says of its tools, for the description and the
// daemon's checks.
const (
	maxCodeTools = api.MaxTools
	// maxDeclaredBytes bounds the declared tools' descriptions and schemas
	// together, well within a run request (api.MaxRequestBytes).
	maxDeclaredBytes      = 2 << 20
	maxToolsText          = 24 << 10
	maxToolErrorText      = api.MaxToolError
	toolNameSeparator     = "__"
	destructiveNotAllowed = "annotated destructive; allow it by name with --allow-destructive-tool"
)

// CodeTools are the tools of the configured MCP servers, and which of
// them run_python's code may call. Safe for concurrent use; Close it.
type CodeTools struct {
	log     *slog.Logger
	servers []*codeServer
	// tools are the callable tools, by their names in the code, sorted.
	tools  []*codeTool
	byName map[string]*codeTool
	// refused are the tools the code may not call, with why.
	refused []refusedTool
	// failed are the servers that could not be reached, with why.
	failed []string
	// declaredBytes is the size of the callable tools' descriptions and
	// schemas.
	declaredBytes int
	// schemaBytes is the size of their schemas (api.MaxToolSchemasBytes
	// bounds it: past it, tools are declared without theirs).
	schemaBytes int
}

type codeServer struct {
	name   string
	client *mcpclient.Client
}

type codeTool struct {
	name        string // SERVER__TOOL, as the code calls it
	server      *codeServer
	remote      string // the tool's name on its server
	description string
	schema      json.RawMessage // nil when it could not be used
}

type refusedTool struct{ name, why string }

// LoadMCPConfig reads the mcpServers JSON at file.
func LoadMCPConfig(file string) (map[string]mcpServerConfig, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var doc struct {
		MCPServers map[string]mcpServerConfig `json:"mcpServers"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s: not the mcpServers JSON of MCP clients: %w", file, err)
	}
	if len(doc.MCPServers) == 0 {
		return nil, fmt.Errorf("%s: no servers under \"mcpServers\"", file)
	}
	for name, s := range doc.MCPServers {
		switch {
		case s.Type == "sse":
			return nil, fmt.Errorf("%s: server %q: the SSE transport is not supported; use its streamable HTTP endpoint", file, name)
		case s.Command != "" && s.URL != "":
			return nil, fmt.Errorf("%s: server %q has both a command and a url", file, name)
		case s.Command == "" && s.URL == "":
			return nil, fmt.Errorf("%s: server %q has neither a command (stdio) nor a url (streamable HTTP)", file, name)
		}
		if codeName(name) == "" {
			return nil, fmt.Errorf("%s: server name %q has no letter or digit to call its tools by", file, name)
		}
	}
	return doc.MCPServers, nil
}

// OpenCodeTools connects to the servers cfg's file lists and lists their
// tools. A server that cannot be reached is left out, and said so in the
// log and in run_python's description; a file that cannot be read, or an
// --allow-tool pattern that is not a glob, is an error.
func OpenCodeTools(ctx context.Context, cfg CodeToolsConfig, log *slog.Logger) (*CodeTools, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for _, p := range cfg.Allow {
		if _, err := path.Match(p, ""); err != nil {
			return nil, fmt.Errorf("--allow-tool %q is not a glob pattern: %w", p, err)
		}
	}
	servers, err := LoadMCPConfig(cfg.ConfigFile)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(servers))
	for n := range servers {
		names = append(names, n)
	}
	sort.Strings(names)
	ct := &CodeTools{log: log, byName: map[string]*codeTool{}}
	for _, n := range names {
		s, listed, err := connectServer(ctx, n, servers[n], cfg.Version)
		if err != nil {
			log.Warn("an MCP server of --mcp-config could not be reached; its tools are left out", "server", n, "err", err)
			ct.failed = append(ct.failed, fmt.Sprintf("%s (%s)", n, cut(err.Error(), 200)))
			continue
		}
		ct.servers = append(ct.servers, s)
		ct.add(s, listed, cfg)
	}
	sort.Slice(ct.tools, func(i, j int) bool { return ct.tools[i].name < ct.tools[j].name })
	sort.Slice(ct.refused, func(i, j int) bool { return ct.refused[i].name < ct.refused[j].name })
	if len(ct.tools) == 0 {
		log.Warn("--mcp-config: no tool is callable from run_python's code; allow some with --allow-tool PATTERN", "refused", len(ct.refused))
	}
	log.Info("code tools ready", "servers", len(ct.servers), "callable", len(ct.tools), "not_allowed", len(ct.refused))
	return ct, nil
}

// connectServer starts or reaches one server and lists its tools.
func connectServer(ctx context.Context, name string, s mcpServerConfig, version string) (*codeServer, []mcp.Tool, error) {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	var c *mcpclient.Client
	if s.Command != "" {
		env := make([]string, 0, len(s.Env))
		for k, v := range s.Env {
			env = append(env, k+"="+v)
		}
		sort.Strings(env)
		c = mcpclient.NewClient(transport.NewStdioWithOptions(s.Command, env, s.Args))
	} else {
		tr, err := transport.NewStreamableHTTP(s.URL, transport.WithHTTPHeaders(s.Headers))
		if err != nil {
			return nil, nil, err
		}
		c = mcpclient.NewClient(tr)
	}
	// The transport (a stdio server's process) lives until Close.
	if err := c.Start(context.WithoutCancel(ctx)); err != nil {
		return nil, nil, fmt.Errorf("start: %w", err)
	}
	var init mcp.InitializeRequest
	init.Params.ClientInfo = mcp.Implementation{Name: Name, Version: version}
	init.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	if _, err := c.Initialize(ctx, init); err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("initialize: %w", err)
	}
	list, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("list tools: %w", err)
	}
	return &codeServer{name: name, client: c}, list.Tools, nil
}

// add takes s's tools: the callable ones and the others, with why.
func (ct *CodeTools) add(s *codeServer, listed []mcp.Tool, cfg CodeToolsConfig) {
	prefix := codeName(s.name) + toolNameSeparator
	for _, t := range listed {
		name := prefix + codeName(t.Name)
		if len(name) > api.MaxToolName || !api.ValidToolName(name) || codeName(t.Name) == "" {
			ct.log.Warn("an MCP tool's name cannot be called from Python; left out", "server", s.name, "tool", cut(t.Name, 100))
			continue
		}
		if ct.byName[name] != nil || slices.ContainsFunc(ct.refused, func(r refusedTool) bool { return r.name == name }) {
			ct.log.Warn("two MCP tools have the same name in the code; the second is left out", "server", s.name, "tool", cut(t.Name, 100), "name", name)
			continue
		}
		if why := allowed(name, t, cfg); why != "" {
			ct.refused = append(ct.refused, refusedTool{name: name, why: why})
			continue
		}
		if len(ct.tools) >= maxCodeTools {
			ct.refused = append(ct.refused, refusedTool{name: name, why: fmt.Sprintf("a run may declare at most %d tools", maxCodeTools)})
			continue
		}
		desc := strings.ToValidUTF8(strings.ReplaceAll(strings.TrimSpace(t.Description), "\x00", ""), "\ufffd")
		tool := &codeTool{name: name, server: s, remote: t.Name, description: cut(desc, api.MaxToolDescription)}
		tool.schema = usableSchema(t)
		if tool.schema != nil && ct.schemaBytes+len(tool.schema) > api.MaxToolSchemasBytes {
			// A run's schemas are bounded together.
			tool.schema = nil
		}
		if tool.schema == nil {
			ct.log.Info("an MCP tool's input schema cannot be checked here; its server checks the arguments", "tool", name)
		}
		if size := len(tool.description) + len(tool.schema); ct.declaredBytes+size > maxDeclaredBytes {
			ct.refused = append(ct.refused, refusedTool{name: name, why: "its description and schema would take the runs' requests past their size"})
			continue
		} else {
			ct.declaredBytes += size
			ct.schemaBytes += len(tool.schema)
		}
		ct.tools = append(ct.tools, tool)
		ct.byName[name] = tool
	}
}

// allowed says why the code may not call tool name ("" when it may): no
// --allow-tool pattern matches it, or it is annotated destructive and
// not named by --allow-destructive-tool.
func allowed(name string, t mcp.Tool, cfg CodeToolsConfig) string {
	matched := false
	for _, p := range cfg.Allow {
		if ok, _ := path.Match(p, name); ok {
			matched = true
			break
		}
	}
	if !matched {
		return "not allowed by --allow-tool"
	}
	if destructive(t) && !slices.Contains(cfg.AllowDestructive, name) {
		return destructiveNotAllowed
	}
	return ""
}

// destructive: the tool says it may destroy (destructiveHint true, and
// not read-only). A tool that says nothing is taken at its --allow-tool.
func destructive(t mcp.Tool) bool {
	a := t.Annotations
	return a.DestructiveHint != nil && *a.DestructiveHint && (a.ReadOnlyHint == nil || !*a.ReadOnlyHint)
}

// codeName is s with every character that cannot be in a Python
// identifier replaced by "_", runs of them by one, starting with a letter.
func codeName(s string) string {
	var b strings.Builder
	under := false
	for _, r := range s {
		ok := r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
		if !ok {
			if !under && b.Len() > 0 {
				b.WriteByte('_')
			}
			under = true
			continue
		}
		if b.Len() == 0 && !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			if r == '_' {
				continue
			}
			b.WriteByte('t')
		}
		b.WriteRune(r)
		under = r == '_'
	}
	return strings.TrimRight(b.String(), "_")
}

// usableSchema is t's input schema when the daemon takes it (it refuses
// a run whose schema does not compile, or could cost it too much to
// check arguments against: toolschema.Compile), else nil: the server
// checks the arguments anyway.
func usableSchema(t mcp.Tool) json.RawMessage {
	raw := t.RawInputSchema
	if raw == nil {
		b, err := json.Marshal(t.InputSchema)
		if err != nil {
			return nil
		}
		raw = b
	}
	if len(raw) > api.MaxToolSchema || !json.Valid(raw) || wire.JSONDepth(raw) > api.MaxToolSchemaDepth {
		return nil
	}
	if _, err := toolschema.Compile(raw); err != nil {
		return nil
	}
	return raw
}

// Close ends the connections (and the stdio servers' processes).
func (ct *CodeTools) Close() {
	if ct == nil {
		return
	}
	var wg sync.WaitGroup
	for _, s := range ct.servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = s.client.Close()
		}()
	}
	wg.Wait()
}

// has reports whether any tool is callable.
func (ct *CodeTools) has() bool { return ct != nil && len(ct.tools) > 0 }

// declared are the callable tools, for a run request.
func (ct *CodeTools) declared() []api.Tool {
	out := make([]api.Tool, 0, len(ct.tools))
	for _, t := range ct.tools {
		out = append(out, api.Tool{Name: t.name, Description: t.description, InputSchema: t.schema})
	}
	return out
}

// call carries out one call of the code: the server's tool, with the
// arguments as they came. It is a client.ToolFunc.
func (ct *CodeTools) call(ctx context.Context, call api.ToolCall) (json.RawMessage, error) {
	t := ct.byName[call.Name]
	if t == nil {
		return nil, fmt.Errorf("%s is not a tool of cellblock-mcp's MCP servers", call.Name)
	}
	var req mcp.CallToolRequest
	req.Params.Name = t.remote
	req.Params.Arguments = call.Arguments
	res, err := t.server.client.CallTool(ctx, req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s: no answer from MCP server %q in time", call.Name, t.server.name)
		}
		return nil, fmt.Errorf("%s: MCP server %q: %s", call.Name, t.server.name, cut(err.Error(), maxToolErrorText))
	}
	return toolResultValue(call.Name, res)
}

// toolResultValue is what a call of the code returns for an MCP tool's
// result: its structured content; else its text, as JSON when it is JSON;
// else (images, resources) its content items as MCP sends them. A result
// with isError is a ToolError with its text.
func toolResultValue(name string, res *mcp.CallToolResult) (json.RawMessage, error) {
	var texts []string
	allText := true
	for _, c := range res.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			texts = append(texts, tc.Text)
		} else {
			allText = false
		}
	}
	if res.IsError {
		msg := strings.TrimSpace(strings.Join(texts, "\n"))
		if msg == "" {
			msg = name + " failed"
		}
		return nil, errors.New(cut(msg, maxToolErrorText))
	}
	if res.StructuredContent != nil {
		return json.Marshal(res.StructuredContent)
	}
	if allText {
		text := strings.Join(texts, "\n")
		if trimmed := bytes.TrimSpace([]byte(text)); len(trimmed) > 0 && json.Valid(trimmed) {
			return trimmed, nil
		}
		return json.Marshal(text)
	}
	return json.Marshal(res.Content)
}

// cut is s cut to at most n bytes on a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

// withTools is run_python's definition with the code tools in its
// description.
func (ct *CodeTools) withTools(t mcp.Tool) mcp.Tool {
	t.Description += ct.describe()
	return t
}

// stream carries out a run of run_python: with the code tools declared
// (their calls answered by their servers) when there are any.
func (h *handler) stream(ctx context.Context, rr *api.RunRequest, onOutput func(stream, data string)) (*api.Result, error) {
	if !h.code.has() {
		return h.client.RunStream(ctx, rr, onOutput)
	}
	run := *rr
	run.Tools = h.code.declared()
	return h.client.RunTools(ctx, &run, onOutput, h.code.call)
}
