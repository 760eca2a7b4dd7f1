package daemon

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/config"
	"github.com/cellblock/cellblock/internal/flagvalue"
	"github.com/cellblock/cellblock/nsjail/layout"
)

// intList is a repeatable integer flag.
type intList []int

func (l *intList) String() string { return fmt.Sprint(*l) }
func (l *intList) Set(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return fmt.Errorf("%q is not a uid", v)
	}
	*l = append(*l, n)
	return nil
}

// flags binds cfg's fields to a flag set. Sizes, durations of limits,
// counts, CPU quotas and repeatable flags are read as cellblock reads them
// (package flagvalue).
func flags(fs *flag.FlagSet, cfg *config.Config, allowUIDs *intList, findLinks *[]string) {
	fs.StringVar(&cfg.Socket, "socket", cfg.Socket, "Unix socket to serve the API on")
	fs.StringVar(&cfg.StateDir, "state-dir", cfg.StateDir, "directory for rootfs store, environments and jail state")
	fs.StringVar(&cfg.CgroupName, "cgroup-name", cfg.CgroupName, "name of the run cgroups' subtree below the daemon's own cgroup")
	fs.StringVar(&cfg.SocketGroup, "socket-group", cfg.SocketGroup, "group given the socket (mode 0660) and allowed to use it")
	fs.Var(allowUIDs, "allow-uid", "uid allowed to use the socket besides root and the socket group (repeatable)")
	fs.StringVar(&cfg.Python, "python", cfg.Python, "interpreter to build the default rootfs from (default: python3 on PATH)")
	fs.StringVar(&cfg.InitBinary, "init-binary", cfg.InitBinary, "path of cellblock-init (default: beside cellblockd)")
	fs.IntVar(&cfg.MaxConcurrent, "max-concurrent", cfg.MaxConcurrent, "runs executing at once (default: number of CPUs)")
	fs.IntVar(&cfg.Prestart, "prestart", cfg.Prestart, "jails kept started ahead of requests, each used by one run (0: build every jail on request)")
	fs.IntVar(&cfg.PrestartShapes, "prestart-shapes", cfg.PrestartShapes, "other shapes of jail (another Python, dependencies, another tmp size) that keep one prestarted jail each after a run used them (0: none)")
	fs.DurationVar(&cfg.PrestartIdle, "prestart-idle", cfg.PrestartIdle, "how long a shape other than the default keeps its prestarted jail without a run")
	fs.IntVar(&cfg.MaxSessions, "max-sessions", cfg.MaxSessions, "how many sessions (interpreters kept alive between runs) may exist at once; 0 turns sessions off")
	fs.IntVar(&cfg.MaxSessionsPerUID, "max-sessions-per-uid", cfg.MaxSessionsPerUID, "how many sessions one uid may have at once")
	fs.DurationVar(&cfg.SessionMaxIdle, "session-max-idle", cfg.SessionMaxIdle, "the longest idle timeout a session may ask for (the default is "+api.DefaultSessionIdle.String()+")")
	fs.DurationVar(&cfg.SessionMaxLifetime, "session-max-lifetime", cfg.SessionMaxLifetime, "a session ends at this age, however busy")
	fs.IntVar(&cfg.QueueSize, "queue", cfg.QueueSize, "runs that may wait for a slot before the daemon answers 429")
	fs.IntVar(&cfg.MaxConnectionsPerUID, "max-connections-per-uid", cfg.MaxConnectionsPerUID, "connections one uid may have open to the socket; past it a new one is answered 429 and closed (all uids together: half the daemon's descriptors; root's are not counted)")
	fs.StringVar(&cfg.UserNS, "userns", cfg.UserNS, "user namespaces: auto, on or off")
	fs.Int64Var(&cfg.UserNSBase, "userns-base", cfg.UserNSBase, "first host uid/gid of the jails' 65536 ids")
	fs.DurationVar(&cfg.ShutdownGrace, "shutdown-grace", cfg.ShutdownGrace, "how long SIGTERM lets runs in flight finish")
	fs.StringVar(&cfg.IndexURL, "index-url", cfg.IndexURL, "package index for dependencies")
	fs.Var(flagvalue.List{P: findLinks}, "find-links", "directory of wheels for dependencies (repeatable)")
	fs.BoolVar(&cfg.NoIndex, "no-index", cfg.NoIndex, "use only --find-links, never an index")
	fs.Var(flagvalue.Size{P: &cfg.DisplayItemBytes}, "display-item-bytes", "cap on one rich output item of a run (a plot, an HTML table); over it, the item keeps only its text (default 1M)")
	fs.Var(flagvalue.Size{P: &cfg.DisplayTotalBytes}, "display-total-bytes", "cap on all rich output of one run together (default 8M)")
	fs.Var(flagvalue.Size{P: &cfg.EnvCacheSize}, "env-cache-size", "disk budget of cached dependency environments; least recently used ones beyond it are deleted (default 2G)")
	fs.BoolVar(&cfg.AllowSdist, "allow-sdist", cfg.AllowSdist, "let dependency builds build source distributions, which runs package code in the build jail (default: wheels only)")
	fs.DurationVar(&cfg.EnvBuildTimeout, "env-build-timeout", cfg.EnvBuildTimeout, "time limit of one dependency environment build")
	fs.Var(flagvalue.Size{P: &cfg.EnvBuildMemory}, "env-build-memory", "memory limit of one dependency environment build (default 1G)")
	fs.StringVar(&cfg.LogFormat, "log-format", cfg.LogFormat, "log format: auto, text or json")
	fs.StringVar(&cfg.AuditLog, "audit-log", cfg.AuditLog, "audit log: one JSON line per run request (default: audit.log in the state dir; \"off\" for none)")
	fs.Var(flagvalue.Size{P: &cfg.AuditLogMaxBytes}, "audit-log-max-size", "size past which the audit log is rotated (default 64M)")
	fs.IntVar(&cfg.AuditLogKeep, "audit-log-keep", cfg.AuditLogKeep, "rotated audit logs kept")
	fs.BoolVar(&cfg.AuditCode, "audit-code", cfg.AuditCode, "write each run's code into the audit log (default: only its SHA-256 and size)")
	fs.Func("network-allow", "the most any run may ask of the network: a HOST:PORT pattern (api.example.org:443, *.example.org:443, *:443) that runs' network.allow must stay within (repeatable; none by default: no run gets network)", func(v string) error {
		cfg.NetworkAllow = append(cfg.NetworkAllow, v)
		return nil
	})
	fs.BoolVar(&cfg.NetworkAllowPrivate, "network-allow-private", cfg.NetworkAllowPrivate, "let allowed names resolve to loopback, private and other special-purpose addresses (for internal mirrors and tests; cloud metadata endpoints stay refused)")
	fs.IntVar(&cfg.NetworkMaxConnections, "network-max-connections", cfg.NetworkMaxConnections, "connections a run may have open through its network proxy at once")
	fs.IntVar(&cfg.NetworkMaxConnectionsTotal, "network-max-connections-total", cfg.NetworkMaxConnectionsTotal, "connections a run may make through its network proxy in all")
	fs.Var(flagvalue.Size{P: &cfg.NetworkMaxBytes}, "network-max-bytes", "bytes a run's network connections may carry in all, both ways (default 1G)")
	flagsFiles(fs, cfg)
	flagsSecrets(fs, cfg)

	fs.Var(flagvalue.Duration{P: &cfg.Defaults.TimeoutMs, Positive: true}, "default-timeout", "default wall-clock timeout")
	fs.Var(flagvalue.Duration{P: &cfg.Maxima.TimeoutMs, Positive: true}, "max-timeout", "maximum wall-clock timeout")
	fs.Var(flagvalue.Size{P: &cfg.Defaults.MemoryBytes}, "default-memory", "default memory limit")
	fs.Var(flagvalue.Size{P: &cfg.Maxima.MemoryBytes}, "max-memory", "maximum memory limit")
	fs.Var(flagvalue.Count{P: &cfg.Defaults.Pids}, "default-pids", "default tasks limit")
	fs.Var(flagvalue.Count{P: &cfg.Maxima.Pids}, "max-pids", "maximum tasks limit")
	fs.Var(flagvalue.CPUs{P: &cfg.Defaults.CPUs}, "default-cpus", "default CPU quota in cores")
	fs.Var(flagvalue.CPUs{P: &cfg.Maxima.CPUs}, "max-cpus", "maximum CPU quota in cores")
	fs.Var(flagvalue.Size{P: &cfg.Defaults.OutputBytes}, "default-output", "default cap on each of stdout and stderr")
	fs.Var(flagvalue.Size{P: &cfg.Maxima.OutputBytes}, "max-output", "maximum cap on each of stdout and stderr")
	fs.Var(flagvalue.Size{P: &cfg.Defaults.TmpBytes}, "default-tmp", "default size of "+layout.Tmp+", "+layout.Work+" and "+layout.Shm+" (each)")
	fs.Var(flagvalue.Size{P: &cfg.Maxima.TmpBytes}, "max-tmp", "maximum size of "+layout.Tmp+", "+layout.Work+" and "+layout.Shm+" (each)")
	toolFlags(fs, cfg)
}

// toolFlags binds the caps on tool calls (see toolrelay.Config).
func toolFlags(fs *flag.FlagSet, cfg *config.Config) {
	d, m := &cfg.Tools.Defaults, &cfg.Tools.Maxima
	fs.Int64Var(&d.Calls, "default-tool-calls", d.Calls, "default cap on the tool calls of one run; later calls fail in the code")
	fs.Int64Var(&m.Calls, "max-tool-calls", m.Calls, "maximum cap on the tool calls of one run")
	fs.Var(flagvalue.Size{P: &d.ArgumentBytes}, "default-tool-argument-bytes", "default cap on one tool call's arguments, as JSON (default 1M)")
	fs.Var(flagvalue.Size{P: &m.ArgumentBytes}, "max-tool-argument-bytes", "maximum cap on one tool call's arguments (default 8M)")
	fs.Var(flagvalue.Size{P: &d.ResultBytes}, "default-tool-result-bytes", "default cap on one tool call's answer, as JSON (default 1M)")
	fs.Var(flagvalue.Size{P: &m.ResultBytes}, "max-tool-result-bytes", "maximum cap on one tool call's answer (default 8M)")
	fs.Var(flagvalue.Duration{P: &d.TimeoutMs, Positive: true}, "default-tool-timeout", "default time a tool call waits for its answer")
	fs.Var(flagvalue.Duration{P: &m.TimeoutMs, Positive: true}, "max-tool-timeout", "maximum time a tool call may wait for its answer")
	fs.BoolVar(&cfg.Tools.KeepContent, "audit-tool-content", cfg.Tools.KeepContent, "write each tool call's arguments and answer into the audit log (default: only their sizes and SHA-256)")
}

// flagsFiles binds the caps on files in and out, and the artifact store's.
func flagsFiles(fs *flag.FlagSet, cfg *config.Config) {
	fs.IntVar(&cfg.FilesInCount, "files-in-max-count", cfg.FilesInCount, "most files a run or session request may carry into /work (0: none)")
	fs.Var(flagvalue.Size{P: &cfg.FilesInBytes}, "files-in-max-bytes", "most bytes of files a request may carry, all together (default 32M); request bodies grow by as much, as base64")
	fs.IntVar(&cfg.FilesOutCount, "files-out-max-count", cfg.FilesOutCount, "most files a run's /work/out gives back")
	fs.Var(flagvalue.Size{P: &cfg.FilesOutFileBytes}, "files-out-max-file-bytes", "largest file a run gives back (default 64M)")
	fs.Var(flagvalue.Size{P: &cfg.FilesOutBytes}, "files-out-max-bytes", "most bytes of files a run gives back, all together (default 256M)")
	fs.Var(flagvalue.Size{P: &cfg.FilesInlineBytes}, "files-inline-bytes", "largest text file returned with its content when a request asks for return_files \"inline\" (default 64K)")
	fs.Var(flagvalue.Size{P: &cfg.ArtifactStoreBytes}, "artifact-store-size", "quota of the artifact store that keeps the files runs give back, each user charged in full for its own; past it a user's own least recently produced go first (default 1G)")
	fs.DurationVar(&cfg.ArtifactTTL, "artifact-ttl", cfg.ArtifactTTL, "how long a user can fetch an artifact after a run of theirs last produced it")
}

// flagsSecrets binds the declarations of secrets and the egress CA's
// files (see package secrets).
func flagsSecrets(fs *flag.FlagSet, cfg *config.Config) {
	nameValue := func(flag, v string) (string, string, error) {
		name, val, ok := strings.Cut(v, "=")
		if !ok || name == "" || val == "" {
			return "", "", fmt.Errorf("want NAME=%s", map[string]string{"secret": "FILE", "secret-host": "PATTERN", "secret-allow-uid": "UID"}[flag])
		}
		return name, val, nil
	}
	fs.Func("secret", "a secret runs may ask for: NAME=FILE (repeatable). The value is read from FILE at start and on SIGHUP; the jail's variable NAME holds a placeholder, and the proxy puts the value in requests to the secret's hosts only. Under systemd: LoadCredential=NAME:PATH and --secret NAME=${CREDENTIALS_DIRECTORY}/NAME. Needs --secret-host", func(v string) error {
		name, file, err := nameValue("secret", v)
		if err != nil {
			return err
		}
		s := cfg.SecretNamed(name)
		if s.File != "" {
			return fmt.Errorf("secret %s is declared twice", name)
		}
		if s.File, err = credentialsPath(file); err != nil {
			return err
		}
		return nil
	})
	fs.Func("secret-host", "NAME=PATTERN: a host the secret NAME goes to, a pattern as --network-allow's and within it, such as api.github.com:443 (repeatable; at least one per secret). A run that asks for the secret may reach it", func(v string) error {
		name, pattern, err := nameValue("secret-host", v)
		if err != nil {
			return err
		}
		s := cfg.SecretNamed(name)
		s.Hosts = append(s.Hosts, pattern)
		return nil
	})
	fs.Func("secret-allow-uid", "NAME=UID: a uid that may ask for the secret NAME besides root (repeatable; none by default)", func(v string) error {
		name, u, err := nameValue("secret-allow-uid", v)
		if err != nil {
			return err
		}
		uid, err := strconv.Atoi(u)
		if err != nil || uid < 0 {
			return fmt.Errorf("%q is not a uid", u)
		}
		s := cfg.SecretNamed(name)
		s.AllowUIDs = append(s.AllowUIDs, uid)
		return nil
	})
	fs.Func("egress-trust", "a FILE of PEM certificates the proxy trusts, besides the host's trust store, as roots of the hosts it puts secrets in (repeatable)", func(v string) error {
		cfg.EgressTrust = append(cfg.EgressTrust, v)
		return nil
	})
	fs.StringVar(&cfg.EgressCACert, "egress-ca-cert", cfg.EgressCACert, "the CA certificate FILE (PEM) that jails of runs with secrets trust for the proxy's certificates, with --egress-ca-key (default: a CA the daemon makes in the state dir, "+config.EgressCADir+"/)")
	fs.StringVar(&cfg.EgressCAKey, "egress-ca-key", cfg.EgressCAKey, "the private key FILE (PEM, mode 0600) of --egress-ca-cert")
}

// credentialsPath expands $CREDENTIALS_DIRECTORY (or ${...}) in a secret's
// file, as systemd sets it for a unit with LoadCredential=: the flags may
// come through an EnvironmentFile, which systemd does not expand. No other
// variable is expanded.
func credentialsPath(file string) (string, error) {
	const v = "CREDENTIALS_DIRECTORY"
	if !strings.Contains(file, "$"+v) && !strings.Contains(file, "${"+v+"}") {
		return file, nil
	}
	dir := os.Getenv(v)
	if dir == "" {
		return "", fmt.Errorf("%s names $%s, which is not set: give the unit LoadCredential=NAME:PATH (see docs/secrets.md)", file, v)
	}
	file = strings.ReplaceAll(file, "${"+v+"}", dir)
	return strings.ReplaceAll(file, "$"+v, dir), nil
}
