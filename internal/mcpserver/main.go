package mcpserver

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/client"
)

// Version is set at link time: -ldflags "-X
// github.com/cellblock/cellblock/internal/mcpserver.Version=...". Without it
// the module version Go recorded is used.
var Version = ""

// startupInfoTimeout bounds the /v1/info request made at start-up.
const startupInfoTimeout = 3 * time.Second

// Main runs cellblock-mcp with args (without the program name): the MCP
// protocol on stdin and stdout, or streamable HTTP with --http; the log on
// stderr. It returns the exit status.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if err := run(args, stdin, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "cellblock-mcp:", err)
		return 1
	}
	return 0
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("cellblock-mcp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", "", "cellblockd's socket `PATH` (default $"+api.SocketEnv+", else "+api.DefaultSocket+")")
	var hc HTTPListenConfig
	fs.StringVar(&hc.Addr, "http", "", "serve streamable HTTP on `ADDR` (such as 127.0.0.1:8808, with --token-file; or unix:PATH, checked by peer credentials), endpoint "+HTTPPath+", instead of stdio")
	fs.StringVar(&hc.TokenFile, "token-file", "", "with --http: the bearer token clients must send (Authorization: Bearer TOKEN) is in `FILE`; required on TCP")
	fs.Func("allow-origin", "with --http: a browser `ORIGIN` (such as https://app.example.org) allowed to call; requests from other origins get 403 (repeatable; none by default)", func(v string) error {
		hc.AllowOrigins = append(hc.AllowOrigins, v)
		return nil
	})
	fs.StringVar(&hc.TLSCert, "tls-cert", "", "with --http on TCP: serve TLS with this certificate `FILE` (PEM)")
	fs.StringVar(&hc.TLSKey, "tls-key", "", "with --http on TCP: the TLS private key `FILE` (PEM)")
	fs.BoolVar(&hc.InsecureNonLoopback, "insecure-non-loopback", false, "with --http: allow a non-loopback address without TLS (the token crosses the network in clear text)")
	fs.Func("allow-uid", "with --http unix:PATH: also admit this `UID` (repeatable; root and this process's own uid always are)", func(v string) error {
		uid, err := strconv.Atoi(v)
		if err != nil || uid < 0 {
			return fmt.Errorf("%q is not a uid", v)
		}
		hc.AllowUIDs = append(hc.AllowUIDs, uid)
		return nil
	})
	fs.StringVar(&hc.SocketGroup, "socket-group", "", "with --http unix:PATH: make the socket 0660 for `GROUP` and admit its members")
	fs.DurationVar(&hc.Sessions.Idle, "http-session-idle", DefaultHTTPSessionIdle, "with --http: end an MCP session (and its named sessions) that has had no request for this `DURATION`, as if its client had sent DELETE")
	fs.IntVar(&hc.Sessions.Max, "http-max-sessions", DefaultHTTPMaxSessions, "with --http: the most MCP sessions live at once; past it an initialize is refused (503) until one ends")
	statusAddr := fs.String("status-listen", "", "with --http: serve "+ReadyPath+" (200 while this node takes new MCP sessions, 404 while it drains or cellblockd is unhealthy) and "+MetricsPath+" (cellblockd's, relayed) on `ADDR` (such as :9464), without a token: for a router's health checks, Kubernetes probes and Prometheus")
	drain := fs.Duration("drain-timeout", 0, "with --http: on SIGTERM, take no new MCP sessions and wait up to `DURATION` (such as 5m) for clients to close theirs before stopping (0: stop at once)")
	var warm WarmEnv
	fs.Func("preload-env", "at start, have cellblockd build the dependency environment of this `REQUIREMENT` (repeatable, one requirement each, as run_python's dependencies): run_python calls with exactly these dependencies then find it built", func(v string) error {
		warm.Dependencies = append(warm.Dependencies, v)
		return nil
	})
	fs.Func("preload", "with --preload-env: `MODULES` (comma list, repeatable, such as pandas,numpy) that the environment's prestarted jails import while they wait, so that the run's own import of them is free; sets the environment's preload list in cellblockd", func(v string) error {
		for _, m := range strings.Split(v, ",") {
			warm.Preload = append(warm.Preload, strings.TrimSpace(m))
		}
		return nil
	})
	var netAllow []string
	fs.Func("network-allow", "let run_python ask for network within this `PATTERN` (host:port, *.example.org:443, *:443; repeatable); without it run_python has no network_allow parameter and no network. cellblockd's own --network-allow bounds it too", func(v string) error {
		if _, err := api.ParseNetPattern(v); err != nil {
			return err
		}
		netAllow = append(netAllow, v)
		return nil
	})
	var secrets []string
	fs.Func("secret", "give every run_python call (and session) cellblockd's secret `NAME` (repeatable): the code reads a placeholder in os.environ[NAME] and cellblockd puts the real value in HTTPS requests to the secret's hosts; run_python's description tells the model. cellblockd must grant it to this process's uid (--secret-allow-uid)", func(v string) error {
		if !api.ValidSecretName(v) {
			return fmt.Errorf("%q is not a secret's name, such as GITHUB_TOKEN", v)
		}
		secrets = append(secrets, v)
		return nil
	})
	var code CodeToolsConfig
	fs.StringVar(&code.ConfigFile, "mcp-config", "", "code mode: connect to the MCP servers of this `FILE` (the mcpServers JSON of MCP clients) and let run_python's code call their tools as cellblock.tools.SERVER__TOOL(...), those --allow-tool allows")
	fs.Func("allow-tool", "with --mcp-config: a glob `PATTERN` over SERVER__TOOL (such as files__read_* or 'search__*') of tools the code may call (repeatable; none by default)", func(v string) error {
		code.Allow = append(code.Allow, v)
		return nil
	})
	fs.Func("allow-destructive-tool", "with --mcp-config: a tool `SERVER__TOOL` annotated destructive that the code may call (repeatable, exact names; --allow-tool must match it too)", func(v string) error {
		code.AllowDestructive = append(code.AllowDestructive, v)
		return nil
	})
	showVersion := fs.Bool("version", false, "print the version and exit")
	verbose := fs.Bool("v", false, "log debug messages to stderr")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: cellblock-mcp [--socket PATH] [--http ADDR --token-file FILE | --http unix:PATH]\n"+
			"                    [--preload-env REQUIREMENT ... [--preload MODULES]] [--network-allow PATTERN ...] [--secret NAME ...]\n"+
			"                    [--mcp-config FILE --allow-tool PATTERN ... [--allow-destructive-tool NAME ...]]\n\n"+
			"Serves the MCP tools run_python, check_environment, validate_python and reset_session, backed by cellblockd.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if (code.Allow != nil || code.AllowDestructive != nil) && code.ConfigFile == "" {
		return fmt.Errorf("--allow-tool and --allow-destructive-tool need --mcp-config: they allow tools of its servers")
	}
	if warm.Preload != nil && warm.Dependencies == nil {
		return fmt.Errorf("--preload needs --preload-env: the modules are preloaded in that environment's jails")
	}
	if warm.Dependencies != nil {
		if aerr := warm.Request().Validate(); aerr != nil {
			return fmt.Errorf("--%s: %s", strings.ReplaceAll(strings.Split(aerr.Field, "[")[0], "dependencies", "preload-env"), aerr.Message)
		}
	}
	version := Version
	if version == "" {
		version = "devel"
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			version = bi.Main.Version
		}
	}
	if *showVersion {
		fmt.Fprintln(stdout, "cellblock-mcp", version)
		return nil
	}

	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	// stdout carries the protocol on stdio, so the log goes to stderr.
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// A stdio client that went away may have closed our stdout and
	// stderr: a write there must fail, not kill us before we end the
	// connection's sessions.
	signal.Ignore(syscall.SIGPIPE)

	c := client.New(client.SocketPath(*socket))
	ictx, cancel := context.WithTimeout(ctx, startupInfoTimeout)
	info, infoErr := c.Info(ictx)
	cancel()
	if infoErr != nil {
		log.Warn("cellblockd is not reachable; starting with generic tool descriptions", "socket", c.Socket(), "err", infoErr)
	}
	cfg := Config{Client: c, Info: info, InfoErr: infoErr, Version: version, Logger: log, NetworkAllow: netAllow, Secrets: secrets}
	if code.ConfigFile != "" {
		code.Version = version
		tools, err := OpenCodeTools(ctx, code, log)
		if err != nil {
			return err
		}
		defer tools.Close()
		cfg.CodeTools = tools
	}
	if warm.Dependencies != nil {
		cfg.Warm = &warm
		go BuildWarmEnv(ctx, c, &warm, log)
	}
	srv := New(cfg)

	if hc.Addr == "" {
		if *statusAddr != "" || *drain != 0 {
			return fmt.Errorf("--status-listen and --drain-timeout go with --http")
		}
		return ServeStdio(ctx, srv, stdin, stdout, log)
	}
	if *drain < 0 {
		return fmt.Errorf("--drain-timeout %v: must not be negative", *drain)
	}
	ln, sec, err := ListenHTTP(hc, log)
	if err != nil {
		return err
	}
	url := "unix:" + ln.Addr().String() + " " + HTTPPath
	if ln.Addr().Network() == "tcp" {
		scheme := "http"
		if hc.TLSCert != "" {
			scheme = "https"
		}
		url = scheme + "://" + ln.Addr().String() + HTTPPath
	}
	opts := HTTPOptions{Security: sec, Daemon: c, Drain: *drain, Log: log}
	if *statusAddr != "" {
		if opts.Status, err = net.Listen("tcp", *statusAddr); err != nil {
			ln.Close()
			return fmt.Errorf("--status-listen: %w", err)
		}
		log.Info("serving status", "ready", "http://"+opts.Status.Addr().String()+ReadyPath,
			"metrics", "http://"+opts.Status.Addr().String()+MetricsPath)
	}
	log.Info("serving MCP over streamable HTTP", "url", url, "token", sec.Token != "", "allowed_origins", hc.AllowOrigins, "drain_timeout", *drain)
	return ServeHTTP(ctx, srv, ln, opts)
}
