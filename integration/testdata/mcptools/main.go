// Command mcptools is a small MCP server for the tests of cellblock-mcp's
// code mode (--mcp-config): it serves, over stdio (or streamable HTTP
// with -http ADDR), a few tools whose results the tests know, and appends
// each call it gets to the file $MCPTOOLS_LOG, if set, so that a test sees
// what reached it.
//
// Tools: square(n: integer) -> n*n as text; greet(name: string) -> a
// greeting (text that is not JSON); stats(values: list[float]) -> their
// count and sum as structured content; fail() -> an error result;
// wipe(path: string), annotated destructive, which only logs its call.
// (mcp-go's tools say they are destructive, as MCP's defaults have it,
// unless told otherwise: the others say they are not.)
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

var logMu sync.Mutex

// logCall appends one line, the tool's name and arguments, to $MCPTOOLS_LOG.
func logCall(req mcp.CallToolRequest) {
	path := os.Getenv("MCPTOOLS_LOG")
	if path == "" {
		return
	}
	args, _ := json.Marshal(req.GetArguments())
	logMu.Lock()
	defer logMu.Unlock()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s %s\n", req.Params.Name, args)
}

func main() {
	httpAddr := flag.String("http", "", "serve streamable HTTP on ADDR (endpoint /mcp) instead of stdio")
	flag.Parse()
	s := server.NewMCPServer("mcptools", "1.0", server.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool("square",
		mcp.WithDescription("Square a whole number.\n\nReturns n*n."),
		mcp.WithInteger("n", mcp.Required(), mcp.Description("the number")),
		mcp.WithReadOnlyHintAnnotation(true), mcp.WithDestructiveHintAnnotation(false),
	), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		logCall(req)
		n, err := req.RequireInt("n")
		if err != nil {
			return mcp.NewToolResultError(err.Error()), nil
		}
		return mcp.NewToolResultText(fmt.Sprint(n * n)), nil
	})
	s.AddTool(mcp.NewTool("greet",
		mcp.WithDescription("Greet someone."),
		mcp.WithString("name", mcp.Required()),
		mcp.WithReadOnlyHintAnnotation(true),
	), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		logCall(req)
		name, _ := req.RequireString("name")
		return mcp.NewToolResultText("hello, " + name), nil
	})
	s.AddTool(mcp.NewTool("stats",
		mcp.WithDescription("Count and sum numbers."),
		mcp.WithArray("values", mcp.Required(), mcp.WithNumberItems()),
		mcp.WithDestructiveHintAnnotation(false),
	), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		logCall(req)
		vals, err := req.RequireFloatSlice("values")
		if err != nil {
			return mcp.NewToolResultError(err.Error()), nil
		}
		sum := 0.0
		for _, v := range vals {
			sum += v
		}
		return mcp.NewToolResultStructured(map[string]any{"count": len(vals), "sum": sum}, fmt.Sprint(sum)), nil
	})
	s.AddTool(mcp.NewTool("fail",
		mcp.WithDescription("Always fails."),
		mcp.WithDestructiveHintAnnotation(false),
	), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		logCall(req)
		return mcp.NewToolResultError("the tool failed on purpose"), nil
	})
	s.AddTool(mcp.NewTool("wipe",
		mcp.WithDescription("Delete everything under a path (it only says so)."),
		mcp.WithString("path", mcp.Required()),
		mcp.WithDestructiveHintAnnotation(true), mcp.WithReadOnlyHintAnnotation(false),
	), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		logCall(req)
		return mcp.NewToolResultText("wiped"), nil
	})
	if *httpAddr != "" {
		h := server.NewStreamableHTTPServer(s)
		mux := http.NewServeMux()
		mux.Handle("/mcp", h)
		if err := http.ListenAndServe(*httpAddr, mux); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if err := server.ServeStdio(s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
