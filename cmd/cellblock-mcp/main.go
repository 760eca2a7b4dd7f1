// Command cellblock-mcp is cellblock's MCP front end: it lets AI agents run
// Python in cellblockd's sandbox over the Model Context Protocol, on stdio
// (the default) or streamable HTTP (--http ADDR or --http unix:PATH,
// endpoint /mcp; a bearer token is required on TCP). It is an
// unprivileged process that only talks to the daemon's socket; all of it
// is in package mcpserver.
package main

import (
	"os"

	"github.com/cellblock/cellblock/internal/mcpserver"
)

func main() {
	os.Exit(mcpserver.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
