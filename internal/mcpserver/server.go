// Package mcpserver is cellblock's MCP front end: it offers the tools
// run_python, check_environment, validate_python and reset_session to AI
// agents over the Model Context Protocol (github.com/mark3labs/mcp-go) and
// carries each call out through cellblockd's socket API.
//
// It owns the tool definitions (descriptions written for a language model,
// input and output schemas sized from the daemon's /v1/info), the mapping
// of daemon results onto MCP tool results, the relay of a run's output as
// MCP notifications, the named sessions of each MCP connection (and the
// daemon sessions behind them, which it ends with the connection), and the
// stdio and streamable HTTP transports.
//
// It talks to the daemon only through package client. It must not import
// anything that needs privileges, cgo or libcontainer: cellblock-mcp runs
// as an ordinary user, and a test keeps its dependency closure free of them.
package mcpserver

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/client"
)

// Name is the server name announced to MCP clients.
const Name = "cellblock-mcp"

// Tool names.
const (
	ToolRunPython        = "run_python"
	ToolCheckEnvironment = "check_environment"
	ToolValidatePython   = "validate_python"
	ToolResetSession     = "reset_session"
)

// infoRefreshTimeout bounds the /v1/info request made to fill in the tool
// descriptions when the daemon was not reachable at start-up.
const infoRefreshTimeout = 2 * time.Second

// Config is what New needs.
type Config struct {
	// Client reaches the daemon. Required.
	Client *client.Client
	// Info is the daemon's /v1/info, fetched at start-up. The tools'
	// descriptions and parameter limits are built from it. Nil means the
	// daemon was not reachable: the tools start with generic descriptions
	// and are rebuilt (with a tools/list_changed notification) once a later
	// call reaches it.
	Info *api.Info
	// InfoErr is why Info is nil; check_environment reports it.
	InfoErr error
	// Version is cellblock-mcp's own version, sent to clients.
	Version string
	// Logger receives the front end's own log; nil discards it.
	Logger *slog.Logger
	// Warm is the environment cellblock-mcp has the daemon build at
	// start (BuildWarmEnv), which run_python's description names; nil
	// for none.
	Warm *WarmEnv
	// NetworkAllow is the most run_python may ask of the network
	// (network.allow patterns, checked by the caller); empty leaves
	// run_python without a network_allow parameter.
	NetworkAllow []string
	// Secrets are the daemon's secrets every run and session gets
	// (--secret NAME), which run_python's description names.
	Secrets []string
	// CodeTools are other MCP servers' tools that run_python's code may
	// call (OpenCodeTools); nil for none.
	CodeTools *CodeTools
}

// handler carries out the tool calls of one MCP server.
type handler struct {
	client  *client.Client
	srv     *server.MCPServer
	log     *slog.Logger
	version string
	// sessions maps run_python's session names onto daemon sessions.
	sessions *sessionTable
	// artifacts are the files each connection's runs returned.
	artifacts *artifactTable

	mu sync.Mutex
	// info is what the registered tool definitions were built from; nil
	// while they are generic.
	info *api.Info
	// startErr is why the daemon could not be reached at start-up.
	startErr error
	// warm is Config.Warm.
	warm *WarmEnv
	// netAllow is Config.NetworkAllow, parsed.
	netAllow []api.NetPattern
	// secrets is Config.Secrets.
	secrets []string
	// code is Config.CodeTools.
	code *CodeTools
}

// New returns an MCP server offering cellblock's tools. Serve it with
// ServeStdio or ServeHTTP, or connect to it in-process (as the tests do).
func New(cfg Config) *server.MCPServer {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	version := cfg.Version
	if version == "" {
		version = "dev"
	}
	h := &handler{
		client:    cfg.Client,
		log:       log,
		version:   version,
		info:      cfg.Info,
		startErr:  cfg.InfoErr,
		warm:      cfg.Warm,
		netAllow:  parseNetworkAllow(cfg.NetworkAllow),
		secrets:   cfg.Secrets,
		code:      cfg.CodeTools,
		sessions:  &sessionTable{client: cfg.Client, log: log},
		artifacts: &artifactTable{},
	}
	// A connection's named sessions live as long as mcp-go's session.
	hooks := &server.Hooks{}
	hooks.AddOnRegisterSession(h.sessions.connected)
	hooks.AddOnRegisterSession(h.artifacts.connected)
	hooks.AddOnUnregisterSession(h.sessions.disconnected)
	hooks.AddOnUnregisterSession(h.artifacts.disconnected)
	h.srv = server.NewMCPServer(Name, version,
		server.WithHooks(hooks),
		server.WithToolCapabilities(true),
		server.WithLogging(),
		server.WithRecovery(),
		// Arguments are checked by the handlers (see decodeArgs), whose
		// messages a model can act on; results are checked against the
		// declared output schemas.
		server.WithOutputSchemaValidation(),
		server.WithInstructions(instructionsFor(h.netAllow)),
	)
	h.srv.AddTools(h.tools(cfg.Info)...)
	h.srv.AddResourceTemplate(mcp.NewResourceTemplate(artifactTemplate, "cellblock run file",
		mcp.WithTemplateDescription("A file a run_python call's code wrote under /work/out, by its SHA-256 and its path there; readable by the connection that made the call, until it expires.")),
		h.readArtifact)
	return h.srv
}

// instructions is the server-level hint sent at initialisation.
const instructions = "cellblock runs Python programs in a locked-down Linux sandbox: no network, " +
	"a read-only filesystem except /tmp and the working directory, and limits on time, memory and processes. " +
	"Use run_python to execute code, validate_python to check syntax and PEP 723 metadata without running it, " +
	"and check_environment to see the Python versions, limits and policies in force. " +
	"Pass input files in run_python's \"files\"; have the code write what the user should get under /work/out, which comes back as resources. " +
	"Give run_python a \"session\" name to keep variables, imports and files between calls; reset_session starts that session afresh."

// instructionsFor is instructions, saying what run_python may ask of the
// network when allow lets it.
func instructionsFor(allow []api.NetPattern) string {
	if len(allow) == 0 {
		return instructions
	}
	return strings.Replace(instructions, "no network, ", "no network unless run_python's network_allow asks for an allowed host, ", 1)
}

// tools builds the tool definitions and binds them to their handlers.
func (h *handler) tools(info *api.Info) []server.ServerTool {
	return []server.ServerTool{
		{Tool: h.code.withTools(withSecrets(withNetwork(runPythonTool(info, h.warm), info, h.netAllow), info, h.secrets)), Handler: h.runPython},
		{Tool: checkEnvironmentTool(info), Handler: h.checkEnvironment},
		{Tool: validatePythonTool(info), Handler: h.validatePython},
		{Tool: resetSessionTool(), Handler: h.resetSession},
	}
}

// currentInfo returns the info the tool definitions were built from.
func (h *handler) currentInfo() *api.Info {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.info
}

// adoptInfo rebuilds the tool definitions from info if they are still
// generic. Registering them again makes mcp-go send
// notifications/tools/list_changed to every connected client.
func (h *handler) adoptInfo(info *api.Info) {
	h.mu.Lock()
	if h.info != nil || info == nil {
		h.mu.Unlock()
		return
	}
	h.info = info
	h.mu.Unlock()
	h.log.Info("cellblockd is reachable now; tool descriptions updated", "daemon_version", info.Version)
	h.srv.AddTools(h.tools(info)...)
}

// refreshInfo fetches /v1/info when the tool definitions are still generic,
// so that they pick up the daemon's limits as soon as it can be reached.
func (h *handler) refreshInfo(ctx context.Context) {
	if h.currentInfo() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, infoRefreshTimeout)
	defer cancel()
	if info, err := h.client.Info(ctx); err == nil {
		h.adoptInfo(info)
	}
}

// textResult is a tool result with one text content.
func textResult(text string, isError bool) *mcp.CallToolResult {
	return &mcp.CallToolResult{
		Content: []mcp.Content{mcp.NewTextContent(text)},
		IsError: isError,
	}
}
