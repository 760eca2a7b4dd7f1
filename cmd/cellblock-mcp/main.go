// Command cellblock-mcp is cellblock's MCP front end: it lets AI agents run
// Python in cellblockd's sandbox over the Model Context Protocol, on stdio
// (the default) or streamable HTTP (--http ADDR, endpoint /mcp). It is an
// unprivileged process that only talks to the daemon's socket; all of it
// but the flags is in package mcpserver.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/client"
	"github.com/cellblock/cellblock/internal/mcpserver"
)

// version is set at link time: -ldflags "-X main.version=...". Without it
// the module version Go recorded is used.
var version = ""

// startupInfoTimeout bounds the /v1/info request made at start-up.
const startupInfoTimeout = 3 * time.Second

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cellblock-mcp:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("cellblock-mcp", flag.ContinueOnError)
	socket := fs.String("socket", "", "cellblockd's socket `PATH` (default $"+api.SocketEnv+", else "+api.DefaultSocket+")")
	httpAddr := fs.String("http", "", "serve streamable HTTP on `ADDR` (such as 127.0.0.1:8808), endpoint "+mcpserver.HTTPPath+", instead of stdio")
	showVersion := fs.Bool("version", false, "print the version and exit")
	verbose := fs.Bool("v", false, "log debug messages to stderr")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: cellblock-mcp [--socket PATH] [--http ADDR]\n\n"+
			"Serves the MCP tools run_python, check_environment and validate_python, backed by cellblockd.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if err == flag.ErrHelp {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if version == "" {
		version = "devel"
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			version = bi.Main.Version
		}
	}
	if *showVersion {
		fmt.Println("cellblock-mcp", version)
		return nil
	}

	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	// stdout carries the protocol on stdio, so the log goes to stderr.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	c := client.New(client.SocketPath(*socket))
	ictx, cancel := context.WithTimeout(ctx, startupInfoTimeout)
	info, infoErr := c.Info(ictx)
	cancel()
	if infoErr != nil {
		log.Warn("cellblockd is not reachable; starting with generic tool descriptions", "socket", c.Socket(), "err", infoErr)
	}
	srv := mcpserver.New(mcpserver.Config{Client: c, Info: info, InfoErr: infoErr, Version: version, Logger: log})

	if *httpAddr == "" {
		return mcpserver.ServeStdio(ctx, srv, os.Stdin, os.Stdout, log)
	}
	ln, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		return err
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() {
		log.Warn("serving on a non-loopback address: anyone who can reach it can run code in the sandbox", "addr", ln.Addr().String())
	}
	log.Info("serving MCP over streamable HTTP", "url", "http://"+ln.Addr().String()+mcpserver.HTTPPath)
	return mcpserver.ServeHTTP(ctx, srv, ln, log)
}
