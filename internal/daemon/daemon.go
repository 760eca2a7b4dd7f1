// Package daemon is cellblockd: it parses the command line, prepares the
// host side (state directory, cgroup subtree, rootfs store, sweep of what a
// crashed daemon left), listens on the Unix socket (or the one systemd
// passes) and serves the API until SIGTERM, then drains and exits 0.
//
// It wires packages together and owns their lifetimes; the work itself is
// in nsjail, cgroup, seccomp, rootfs, internal/runs (carrying out runs),
// internal/deps (dependency environments) and internal/server (the API).
package daemon

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/coreos/go-systemd/v22/daemon"
	"golang.org/x/sys/unix"

	"github.com/cellblock/cellblock/cgroup"
	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/artifacts"
	"github.com/cellblock/cellblock/internal/audit"
	"github.com/cellblock/cellblock/internal/config"
	"github.com/cellblock/cellblock/internal/deps"
	"github.com/cellblock/cellblock/internal/egress"
	"github.com/cellblock/cellblock/internal/metrics"
	"github.com/cellblock/cellblock/internal/peercred"
	"github.com/cellblock/cellblock/internal/record"
	"github.com/cellblock/cellblock/internal/runs"
	"github.com/cellblock/cellblock/internal/server"
	"github.com/cellblock/cellblock/internal/sessions"
	"github.com/cellblock/cellblock/nsjail"
	"github.com/cellblock/cellblock/nsjail/layout"
	runnerfiles "github.com/cellblock/cellblock/nsjail/runner"
	"github.com/cellblock/cellblock/rootfs"
	"github.com/cellblock/cellblock/rootfs/envs"
	"github.com/cellblock/cellblock/seccomp"
)

// Version is set at build time.
var Version = "dev"

// Main runs cellblockd with args (without the program name) and returns
// the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "rootfs" {
		return rootfsMain(args[1:], stdout, stderr)
	}
	cfg := config.Default()
	fs := flag.NewFlagSet("cellblockd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var allowUIDs intList
	var findLinks []string
	flags(fs, &cfg, &allowUIDs, &findLinks)
	version := fs.Bool("version", false, "print the version and exit")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: cellblockd [flags]\n       cellblockd rootfs import --python PATH [--state-dir DIR]\n       cellblockd rootfs ls [--state-dir DIR]\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *version {
		fmt.Fprintln(stdout, "cellblockd", Version)
		return 0
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "cellblockd: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	cfg.AllowUIDs = allowUIDs
	cfg.FindLinks = findLinks
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "cellblockd: %v\n", err)
		return 2
	}
	log := newLogger(cfg.LogFormat, stderr)
	if err := sealSelf(); err != nil {
		log.Warn("running unsealed: every run will seal a copy of the daemon's binary", "err", err)
	}
	if err := run(cfg, log); err != nil {
		log.Error("cellblockd failed", "err", err)
		return 1
	}
	return 0
}

func newLogger(format string, w io.Writer) *slog.Logger {
	if format == "auto" {
		format = "json"
		if f, ok := w.(*os.File); ok && os.Getenv("JOURNAL_STREAM") == "" {
			if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err == nil {
				format = "text"
			}
		}
	}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, nil))
	}
	return slog.New(slog.NewTextHandler(w, nil))
}

// run is the daemon's life: set up, serve, drain, clean up.
func run(cfg config.Config, log *slog.Logger) error {
	// Signals first, so that a SIGTERM during start-up is not lost (nor
	// a SIGHUP fatal).
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	// The watchdog, if systemd asked for one, is fed during start-up too.
	wd := startWatchdog(log)
	defer wd.close()

	if !seccomp.Enabled {
		return errors.New("seccomp support is not compiled in (build with cgo and -tags seccomp); refusing to run jails without it")
	}
	if os.Geteuid() != 0 {
		return errors.New("cellblockd must run as root: it builds namespaces, mounts and cgroups")
	}
	initBinary, err := findInit(cfg.InitBinary)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	// Jails in a user namespace must be able to reach the rootfs.
	if err := os.Chmod(cfg.StateDir, 0o755); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	unlock, err := lockStateDir(cfg.StateDir)
	if err != nil {
		return err
	}
	defer unlock()
	var auditLog *audit.Log
	if cfg.AuditLog != config.AuditLogOff {
		auditLog, err = audit.Open(audit.Config{Path: cfg.AuditLog, MaxBytes: cfg.AuditLogMaxBytes,
			Keep: cfg.AuditLogKeep, IncludeCode: cfg.AuditCode, IncludeToolContent: cfg.Tools.KeepContent}, log)
		if err != nil {
			return err
		}
		defer auditLog.Close()
	}
	stats := metrics.New(Version)
	// Secrets before the long work of start-up: a bad one stops it at
	// once.
	sec, err := openSecrets(cfg, stats, log)
	if err != nil {
		return err
	}
	go reloadSecrets(ctx, hup, sec, log)

	cgRoot, err := cgroup.OpenRoot(cfg.CgroupName)
	if err != nil {
		return fmt.Errorf("cgroup subtree: %w", err)
	}
	defer cgRoot.Close()
	if n, err := cgRoot.Sweep(); err != nil {
		return fmt.Errorf("sweep leftover run cgroups: %w", err)
	} else if n > 0 {
		log.Warn("removed run cgroups a previous daemon left behind", "count", n)
	}

	store, err := rootfs.Open(filepath.Join(cfg.StateDir, "rootfs"))
	if err != nil {
		return fmt.Errorf("rootfs store: %w", err)
	}
	store.SetLogger(log)
	py, err := ensureDefault(ctx, store, cfg.Python, log)
	if err != nil {
		if ctx.Err() != nil {
			// Stopped while building: the store kept nothing half-built.
			log.Info("cellblockd stopped during start-up", "err", err)
			return nil
		}
		return err
	}
	// Rootfses of an older layout (from an older daemon) are rebuilt from
	// their interpreters; one that cannot be is left out, said here.
	if done, err := store.Upgrade(ctx); len(done) > 0 || err != nil {
		log.Warn("rebuilt rootfses of an older layout", "rebuilt", done, "err", err)
	}

	jailFiles, err := runnerfiles.FilesWith(sec.runnerExtra())
	if err != nil {
		return err
	}
	runnerLib, err := rootfs.InstallFiles(filepath.Join(cfg.StateDir, "runner"), jailFiles)
	if err != nil {
		return err
	}
	runner, err := newRunner(cfg, cgRoot, initBinary, runnerLib, log)
	if err != nil {
		return err
	}
	if n, err := runner.Sweep(); err != nil {
		return err
	} else if n > 0 {
		log.Warn("removed jail state a previous daemon left behind", "count", n)
	}
	var fallback func() (*nsjail.Runner, error)
	if cfg.UserNS == "auto" && runner.UserNamespace() {
		fallback = func() (*nsjail.Runner, error) {
			noUserNS := cfg
			noUserNS.UserNS = "off"
			return newRunner(noUserNS, cgRoot, initBinary, runnerLib, log)
		}
	}
	runner, err = runs.Probe(ctx, runner, py, fallback, log)
	if err != nil {
		return err
	}
	netAllow, aerr := api.ParseNetPatterns("--network-allow", cfg.NetworkAllow)
	if aerr != nil {
		return aerr // Validate checked them
	}
	egCfg := egress.Config{
		Allow:               netAllow,
		AllowPrivate:        cfg.NetworkAllowPrivate,
		MaxConnections:      cfg.NetworkMaxConnections,
		MaxConnectionsTotal: cfg.NetworkMaxConnectionsTotal,
		MaxBytes:            cfg.NetworkMaxBytes,
		OnDenial:            stats.NetworkDenial,
		OnSecret:            stats.SecretUse,
		Log:                 log,
	}
	if sec != nil {
		egCfg.Secrets, egCfg.CA, egCfg.CABundle, egCfg.UpstreamRoots = sec.store, sec.ca, layout.CABundle, sec.roots
	}
	eg, err := egress.New(egCfg)
	if err != nil {
		return err
	}
	dm, err := deps.Open(deps.Config{
		Dir:          filepath.Join(cfg.StateDir, "envs"),
		Index:        envs.Index{URL: cfg.IndexURL, NoIndex: cfg.NoIndex, FindLinks: cfg.FindLinks},
		AllowSdist:   cfg.AllowSdist,
		BuildTimeout: cfg.EnvBuildTimeout,
		BuildMemory:  cfg.EnvBuildMemory,
		BuildCPUs:    cfg.Maxima.CPUs,
		CacheBytes:   cfg.EnvCacheSize,
		Runner:       runner,
		Egress:       eg,
		Log:          log,
	})
	if err != nil {
		return err
	}
	defer dm.Close()
	artifactStore, err := artifacts.Open(artifacts.Config{
		Dir:      filepath.Join(cfg.StateDir, "artifacts"),
		MaxBytes: cfg.ArtifactStoreBytes,
		TTL:      cfg.ArtifactTTL,
		OnEvict:  stats.ArtifactEvicted,
		Log:      log,
	})
	if err != nil {
		return err
	}
	defer artifactStore.Close()
	stats.SetArtifacts(artifactStore.Stats)
	exec, err := runs.New(runs.Config{
		Version:        Version,
		Store:          store,
		Runner:         runner,
		Cgroups:        cgRoot,
		Deps:           dm,
		Defaults:       cfg.Defaults,
		Prestart:       cfg.Prestart,
		PrestartShapes: cfg.PrestartShapes,
		PrestartIdle:   cfg.PrestartIdle,
		OpenFiles:      config.DefaultOpenFiles,
		Reports:        reportLimits(cfg),
		Egress:         eg,
		Artifacts:      artifactStore,
		Files:          cfg.FileCaps(),
		Log:            log,
	}, py)
	if err != nil {
		return err
	}
	defer func() {
		if err := exec.Close(); err != nil {
			log.Error("tear down prestarted jails", "err", err)
		}
	}()

	sm, err := sessions.New(sessions.Config{
		Off:         cfg.MaxSessions == 0,
		MaxTotal:    cfg.MaxSessions,
		MaxPerUID:   cfg.MaxSessionsPerUID,
		MaxIdle:     cfg.SessionMaxIdle,
		MaxLifetime: cfg.SessionMaxLifetime,
		Jails:       exec,
		FileCaps:    cfg.FileCaps(),
		Event:       stats.SessionEvent,
		Log:         log,
	})
	if err != nil {
		return err
	}
	// Before the executor's Close (deferred earlier, so run later), which
	// waits for every jail's teardown.
	defer sm.Close()
	stats.SetSessionsOpen(sm.Open)

	ln, activated, err := listen(cfg, log)
	if err != nil {
		return err
	}
	if !activated {
		defer os.Remove(cfg.Socket)
	}
	allowed := peercred.AllowList(cfg.SocketGroup, cfg.AllowUIDs, log)
	srv, err := server.New(server.Config{
		Defaults:      cfg.Defaults,
		Maxima:        cfg.Maxima,
		MaxConcurrent: cfg.MaxConcurrent,
		QueueSize:     cfg.QueueSize,
		Allowed:       allowed,
		Log:           log,
		Observer: func(rec record.Run) {
			stats.Observe(rec)
			if auditLog != nil {
				auditLog.Observe(rec)
			}
		},
		MaxConnsPerUID: cfg.MaxConnectionsPerUID,
		MaxConns:       connectionsOfAll(log),
		// The operator always gets in.
		Uncounted:      func(p peercred.Peer) bool { return p.UID == 0 },
		Metrics:        stats.Handler(),
		MetricsAllowed: peercred.GroupMembers(cfg.SocketGroup, log),
		Tools:          cfg.Tools,
		Files:          cfg.FileCaps(),
		FileObserver: func(op record.FileOp) {
			stats.ObserveFile(op)
			if auditLog != nil {
				auditLog.ObserveFile(op)
			}
		},
	}, server.Services{Runs: exec, Sessions: sm, Envs: exec, Artifacts: exec, Files: sm})
	if err != nil {
		return err
	}
	stats.SetLoad(srv.Load)
	stats.SetPrestartReady(exec.PrestartReady)

	log.Info("cellblockd ready", "version", Version, "socket", ln.Addr().String(), "python", py.Version,
		"cgroup_mode", string(cgRoot.Mode()), "user_namespace", runner.UserNamespace(), "max_concurrent", cfg.MaxConcurrent, "audit_log", cfg.AuditLog,
		"network_allow", cfg.NetworkAllow, "network_allow_private", cfg.NetworkAllowPrivate)
	_, _ = daemon.SdNotify(false, daemon.SdNotifyReady)
	wd.serving(ln.Addr().String())
	err = srv.Serve(ctx, ln, cfg.ShutdownGrace)
	wd.close()
	_, _ = daemon.SdNotify(false, daemon.SdNotifyStopping)
	log.Info("cellblockd stopped")
	return err
}

// findInit locates cellblock-init: the configured path, else beside the
// daemon's executable.
func findInit(path string) (string, error) {
	if path == "" {
		exe, err := originalExecutable()
		if err != nil {
			return "", fmt.Errorf("find cellblock-init: %w", err)
		}
		path = filepath.Join(filepath.Dir(exe), "cellblock-init")
	}
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("cellblock-init (the jails' static init) is missing: %w; build it with `make build` or pass --init-binary", err)
	}
	return path, nil
}

func ensureDefault(ctx context.Context, store *rootfs.Store, python string, log *slog.Logger) (rootfs.Python, error) {
	if pys, err := store.List(); err == nil && len(pys) == 0 {
		if python != "" {
			log.Info("building the default Python rootfs", "python", python)
			py, err := store.Import(ctx, python)
			if err != nil {
				return py, fmt.Errorf("default Python rootfs from %s: %w", python, err)
			}
			return py, nil
		}
		log.Info("building the default Python rootfs from the host's python3")
	}
	py, err := store.EnsureDefault(ctx)
	if err != nil {
		return py, fmt.Errorf("default Python rootfs: %w", err)
	}
	return py, nil
}

func newRunner(cfg config.Config, cgRoot *cgroup.Root, initBinary, runnerLib string, log *slog.Logger) (*nsjail.Runner, error) {
	var userns *nsjail.IDMap
	if cfg.UserNS != "off" {
		if usernsAvailable() {
			userns = &nsjail.IDMap{HostID: cfg.UserNSBase, Size: config.DefaultUserNSSize}
		} else if cfg.UserNS == "on" {
			return nil, errors.New("--userns=on but this kernel does not allow user namespaces")
		}
	}
	return nsjail.NewRunner(nsjail.RunnerConfig{
		StateRoot:  filepath.Join(cfg.StateDir, "jails"),
		InitBinary: initBinary,
		Cgroups:    cgRoot,
		Seccomp:    seccomp.Config(),
		UserNS:     userns,
		RunnerLib:  runnerLib,
		Log:        log,
	})
}

func usernsAvailable() bool {
	b, err := os.ReadFile("/proc/sys/user/max_user_namespaces")
	if err != nil {
		return false
	}
	var n int
	_, _ = fmt.Sscan(string(b), &n)
	return n > 0
}

// lockStateDir makes sure only one daemon uses a state directory: two
// would sweep each other's jails and race on the rootfs store. The lock
// dies with the process, so a crashed daemon never leaves it behind.
func lockStateDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, "cellblockd.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state dir lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("another cellblockd is already using the state directory %s", dir)
		}
		return nil, fmt.Errorf("state dir lock: %w", err)
	}
	return func() { f.Close() }, nil
}

// reportLimits caps what a run's runner may send back, from the
// operator's display flags and the runner's defaults for the rest. A frame
// must carry the largest item with all its JSON escaping.
func reportLimits(cfg config.Config) runnerfiles.Limits {
	l := runnerfiles.DefaultLimits()
	l.DisplayItemBytes = int(cfg.DisplayItemBytes)
	l.DisplayTotalBytes = int(cfg.DisplayTotalBytes)
	l.FrameBytes = max(l.FrameBytes, int(min(cfg.DisplayItemBytes*6+1<<20, 1<<30)))
	// A tool call's frame carries its arguments as they are.
	l.FrameBytes = max(l.FrameBytes, int(cfg.Tools.Maxima.ArgumentBytes+64<<10))
	return l
}

// connectionsOfAll is how many connections all uids but root may have
// open together: half the descriptors the daemon may have, so that
// root's, the jails' pipes and the daemon's own files always have the
// other half.
func connectionsOfAll(log *slog.Logger) int {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil || lim.Cur == unix.RLIM_INFINITY {
		log.Warn("no bound on the connections of all users together", "err", err)
		return 0
	}
	return int(max(lim.Cur/2, 1))
}
