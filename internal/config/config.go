// Package config holds cellblockd's configuration: one struct with a
// comment on every field, defaults as named constants, and Validate. It
// reads nothing from the system.
package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/toolrelay"
)

// Defaults.
const (
	DefaultSocket        = api.DefaultSocket
	DefaultStateDir      = "/var/lib/cellblock"
	DefaultSocketGroup   = "cellblock"
	DefaultCgroupName    = "cellblock"
	DefaultQueueSize     = 64
	DefaultUserNSBase    = 1_000_000_000
	DefaultUserNSSize    = 65536
	DefaultShutdownGrace = 30 * time.Second
	// DefaultMaxConnectionsPerUID is more than the CLI, cellblock-mcp (up
	// to 64 calls at once, each with a tool answer's connection beside
	// it) and a client's idle connections need.
	DefaultMaxConnectionsPerUID = 128
	DefaultOpenFiles            = 1024
	DefaultPrestart             = 2
	// DefaultPrestartShapes other shapes of jail keep one prestarted jail
	// each, for DefaultPrestartIdle after their last run.
	DefaultPrestartShapes = 4
	MaxPrestartShapes     = 64
	DefaultPrestartIdle   = 10 * time.Minute
	// Sessions: how many in all and per uid, the longest idle timeout
	// one may ask for and the longest one lives.
	DefaultMaxSessions        = 32
	DefaultMaxSessionsPerUID  = 8
	MaxSessionsLimit          = 4096
	DefaultSessionMaxIdle     = time.Hour
	DefaultSessionMaxLifetime = 8 * time.Hour
	MaxPrestart               = 64

	// DefaultAuditLogName is the audit log's file in the state directory.
	DefaultAuditLogName     = "audit.log"
	DefaultAuditLogMaxBytes = 64 << 20
	DefaultAuditLogKeep     = 5
	// AuditLogOff as --audit-log turns the audit log off.
	AuditLogOff = "off"

	DefaultTimeout     = 30 * time.Second
	DefaultMemory      = 256 << 20
	DefaultPids        = 64
	DefaultCPUs        = 1.0
	DefaultOutputBytes = 1 << 20
	DefaultTmpBytes    = 64 << 20

	MaxTimeout     = 10 * time.Minute
	MaxMemory      = 4 << 30
	MaxPids        = 1024
	MaxOutputBytes = 64 << 20
	MaxTmpBytes    = 1 << 30
)

// Defaults of dependency environments.
const (
	// DefaultEnvCacheSize is the disk budget of all cached environments.
	DefaultEnvCacheSize = 2 << 30
	// DefaultDisplayItemBytes and DefaultDisplayTotalBytes cap a run's
	// rich output: one display item (a plot) and all of them together.
	DefaultDisplayItemBytes  = 1 << 20
	DefaultDisplayTotalBytes = 8 << 20
	// MaxDisplayTotalBytes is the most an operator may allow a run's rich
	// output to take, as the daemon holds it in memory.
	MaxDisplayTotalBytes = 256 << 20
	// DefaultEnvBuildTimeout bounds one environment build.
	DefaultEnvBuildTimeout = 10 * time.Minute
	// DefaultEnvBuildMemory is a build jail's memory limit; its /tmp holds
	// the downloaded wheels and is as large.
	DefaultEnvBuildMemory = 1 << 30
)

// Defaults of network egress (see package egress).
const (
	// DefaultNetworkMaxConnections is how many connections a run may have
	// open through its proxy at once; DefaultNetworkMaxConnectionsTotal
	// how many it may make in all; DefaultNetworkMaxBytes how many bytes
	// they may carry in all.
	DefaultNetworkMaxConnections      = 32
	DefaultNetworkMaxConnectionsTotal = 1024
	DefaultNetworkMaxBytes            = 1 << 30
)

// Defaults and bounds of files in and out of runs, and of the artifact
// store that keeps what runs produce.
const (
	DefaultFilesInCount     = 100
	DefaultFilesInBytes     = 32 << 20
	DefaultFilesOutCount    = 100
	DefaultFilesOutFile     = 64 << 20
	DefaultFilesOutBytes    = 256 << 20
	DefaultFilesInlineBytes = 64 << 10
	// FilesInlineTotal bounds the inline content of one run's files
	// together (at least one file's).
	FilesInlineTotal          = 1 << 20
	MaxFilesCount             = 10000
	MaxFilesBytes             = 1 << 30
	MaxFilesInlineBytes       = 1 << 20
	DefaultArtifactStoreBytes = 1 << 30
	DefaultArtifactTTL        = 24 * time.Hour
)

// Config is cellblockd's whole configuration.
type Config struct {
	// Socket is the Unix socket the API is served on (unless systemd
	// passes one by socket activation).
	Socket string
	// StateDir holds the Python rootfs store, dependency environments and
	// the jails' state.
	StateDir string
	// CgroupName names the daemon's subtree of run cgroups below its own
	// cgroup; a restarted daemon sweeps what it finds there.
	CgroupName string
	// SocketGroup is the group the socket is given (mode 0660) and whose
	// members may use the daemon; empty or a missing group means root only
	// (plus AllowUIDs).
	SocketGroup string
	// AllowUIDs may use the daemon besides root and SocketGroup's members.
	AllowUIDs []int
	// Python is the interpreter the default rootfs is built from on first
	// start; empty means python3 on PATH.
	Python string
	// InitBinary is the static cellblock-init; empty means the file of that
	// name beside the daemon's executable.
	InitBinary string
	// MaxConcurrent is how many runs execute at once; 0 means the number
	// of CPUs.
	MaxConcurrent int
	// Prestart is how many jails are kept built and started ahead of
	// requests, for runs on the default Python with no dependencies and
	// the default tmp size; each carries out one run and is then torn
	// down. 0 builds every jail when its request arrives, of any shape.
	Prestart int
	// PrestartShapes is how many other shapes of jail (another Python,
	// dependencies, another tmp size) keep one prestarted jail each once
	// a run used them, the least recently used giving way; PrestartIdle
	// is how long a shape keeps it without a run.
	PrestartShapes int
	PrestartIdle   time.Duration
	// MaxSessions sessions may exist at once, MaxSessionsPerUID of them
	// one uid's; each holds its jail (and its memory limit) while it
	// lives.
	MaxSessions       int
	MaxSessionsPerUID int
	// SessionMaxIdle is the longest idle timeout a session may ask for;
	// SessionMaxLifetime ends any session that old.
	SessionMaxIdle     time.Duration
	SessionMaxLifetime time.Duration
	// QueueSize is how many runs may wait for a slot; beyond it the daemon
	// answers 429.
	QueueSize int
	// MaxConnectionsPerUID caps the connections one uid but root may have
	// open to the socket; past it a new one is answered 429 and closed.
	// All uids but root together may have half the daemon's descriptors
	// (RLIMIT_NOFILE); root's are not counted.
	MaxConnectionsPerUID int
	// UserNS selects user namespaces: "auto" (when the kernel allows),
	// "on" (required) or "off".
	UserNS string
	// UserNSBase is the first host id the jail's ids map onto; the range
	// [UserNSBase, UserNSBase+DefaultUserNSSize) must own nothing on the
	// host.
	UserNSBase int64
	// ShutdownGrace is how long SIGTERM lets runs in flight finish before
	// they are killed.
	ShutdownGrace time.Duration
	// Defaults apply to requests that leave a limit unset.
	Defaults api.Limits
	// Maxima cap what a request may ask for.
	Maxima api.Limits
	// IndexURL, FindLinks and NoIndex say where dependencies come from, as
	// in uv and pip.
	IndexURL  string
	FindLinks []string
	NoIndex   bool
	// EnvCacheSize is the disk budget of the cached dependency
	// environments in bytes; beyond it the least recently used ones that
	// no run holds are deleted. 0 keeps none once its runs end.
	EnvCacheSize int64
	// DisplayItemBytes caps one display item of a run (all its MIME types
	// together); DisplayTotalBytes all of a run's display items. An item
	// over the cap keeps only its text/plain, with a note.
	DisplayItemBytes  int64
	DisplayTotalBytes int64
	// AllowSdist lets environment builds build source distributions,
	// which runs package code in the build jail; by default only wheels
	// are installed.
	AllowSdist bool
	// EnvBuildTimeout and EnvBuildMemory limit each environment build.
	EnvBuildTimeout time.Duration
	EnvBuildMemory  int64
	// LogFormat is "text", "json" or "auto" (JSON unless on a terminal).
	LogFormat string
	// AuditLog is the audit log's path: one JSON line per run request.
	// Empty means DefaultAuditLogName in StateDir (Validate fills it in);
	// AuditLogOff turns it off.
	AuditLog string
	// AuditLogMaxBytes is the size past which the audit log is rotated.
	AuditLogMaxBytes int64
	// AuditLogKeep is how many rotated audit logs are kept.
	AuditLogKeep int
	// AuditCode writes each run's code into the audit log; otherwise only
	// its SHA-256 and size are.
	AuditCode bool
	// NetworkAllow is the most a run may ask of the network
	// (network.allow patterns); empty gives no run any network.
	NetworkAllow []string
	// NetworkAllowPrivate lets allowed names resolve to loopback and
	// private addresses.
	NetworkAllowPrivate bool
	// NetworkMaxConnections, NetworkMaxConnectionsTotal and
	// NetworkMaxBytes cap each run's (and build's) connections through
	// its proxy: open at once, made in all, and bytes in all.
	NetworkMaxConnections      int
	NetworkMaxConnectionsTotal int
	NetworkMaxBytes            int64
	// Tools caps the tool calls of runs (defaults and maxima of calls,
	// argument and answer bytes, and time per call); its KeepContent
	// writes each call's arguments and answer into the audit log,
	// otherwise only their sizes and SHA-256.
	Tools toolrelay.Config
	// FilesInCount files of FilesInBytes in all may come with a request
	// (0 takes none). A run or session request's body may grow by as
	// much, as base64.
	FilesInCount int
	FilesInBytes int64
	// FilesOutCount files, each at most FilesOutFileBytes and
	// FilesOutBytes together, come back from a run's /work/out;
	// FilesInlineBytes is the largest text file returned with its
	// content when a request asks for it.
	FilesOutCount     int
	FilesOutFileBytes int64
	FilesOutBytes     int64
	FilesInlineBytes  int64
	// ArtifactStoreBytes is the artifact store's quota; ArtifactTTL how
	// long a uid keeps an artifact after it last produced it.
	ArtifactStoreBytes int64
	ArtifactTTL        time.Duration
	// Secrets are the credentials runs may ask for by name (see Secret
	// and package secrets).
	Secrets []Secret
	// EgressTrust are files of PEM certificates the proxy trusts, besides
	// the host's trust store, as roots of the hosts it puts secrets in.
	EgressTrust []string
	// EgressCACert and EgressCAKey are the operator's CA, which jails of
	// runs with secrets trust for the proxy's certificates; empty, the
	// daemon makes its own under StateDir (EgressCADir).
	EgressCACert string
	EgressCAKey  string
}

// EgressCADir is where the daemon keeps the egress CA it makes, in its
// state directory.
const EgressCADir = "egress-ca"

// Secret is one declared secret: --secret NAME=FILE with its
// --secret-host NAME=PATTERN and --secret-allow-uid NAME=UID.
type Secret struct {
	// Name is the variable that holds its placeholder in a jail.
	Name string
	// File holds its value (read at start and on SIGHUP).
	File string
	// Hosts are the patterns of the hosts the value goes to (at least
	// one), within NetworkAllow.
	Hosts []string
	// AllowUIDs may ask for it besides root.
	AllowUIDs []int
}

// SecretNamed is the declaration of name, added when there is none yet:
// the flags that make one may come in any order.
func (c *Config) SecretNamed(name string) *Secret {
	for i := range c.Secrets {
		if c.Secrets[i].Name == name {
			return &c.Secrets[i]
		}
	}
	c.Secrets = append(c.Secrets, Secret{Name: name})
	return &c.Secrets[len(c.Secrets)-1]
}

// FileCaps are the caps on files in and out, as the API reports them.
func (c *Config) FileCaps() api.FileCaps {
	return api.FileCaps{
		InCount: c.FilesInCount, InBytes: c.FilesInBytes,
		OutCount: c.FilesOutCount, OutFileBytes: c.FilesOutFileBytes, OutBytes: c.FilesOutBytes,
		InlineBytes: c.FilesInlineBytes, InlineTotalBytes: max(FilesInlineTotal, c.FilesInlineBytes),
	}
}

// Default returns the default configuration.
func Default() Config {
	cpus := float64(runtime.NumCPU())
	return Config{
		Socket:      DefaultSocket,
		StateDir:    DefaultStateDir,
		SocketGroup: DefaultSocketGroup,
		CgroupName:  DefaultCgroupName,
		QueueSize:   DefaultQueueSize,

		MaxConnectionsPerUID: DefaultMaxConnectionsPerUID,
		Prestart:             DefaultPrestart,
		PrestartShapes:       DefaultPrestartShapes,
		PrestartIdle:         DefaultPrestartIdle,

		MaxSessions:        DefaultMaxSessions,
		MaxSessionsPerUID:  DefaultMaxSessionsPerUID,
		SessionMaxIdle:     DefaultSessionMaxIdle,
		SessionMaxLifetime: DefaultSessionMaxLifetime,
		UserNS:             "auto",
		UserNSBase:         DefaultUserNSBase,
		ShutdownGrace:      DefaultShutdownGrace,
		LogFormat:          "auto",

		EnvCacheSize:      DefaultEnvCacheSize,
		DisplayItemBytes:  DefaultDisplayItemBytes,
		DisplayTotalBytes: DefaultDisplayTotalBytes,
		EnvBuildTimeout:   DefaultEnvBuildTimeout,
		EnvBuildMemory:    DefaultEnvBuildMemory,

		AuditLogMaxBytes: DefaultAuditLogMaxBytes,
		AuditLogKeep:     DefaultAuditLogKeep,

		NetworkMaxConnections:      DefaultNetworkMaxConnections,
		NetworkMaxConnectionsTotal: DefaultNetworkMaxConnectionsTotal,
		NetworkMaxBytes:            DefaultNetworkMaxBytes,
		Tools:                      toolrelay.DefaultConfig(),
		FilesInCount:               DefaultFilesInCount,
		FilesInBytes:               DefaultFilesInBytes,
		FilesOutCount:              DefaultFilesOutCount,
		FilesOutFileBytes:          DefaultFilesOutFile,
		FilesOutBytes:              DefaultFilesOutBytes,
		FilesInlineBytes:           DefaultFilesInlineBytes,
		ArtifactStoreBytes:         DefaultArtifactStoreBytes,
		ArtifactTTL:                DefaultArtifactTTL,
		Defaults: api.Limits{
			TimeoutMs:   DefaultTimeout.Milliseconds(),
			MemoryBytes: DefaultMemory,
			Pids:        DefaultPids,
			CPUs:        min(DefaultCPUs, cpus),
			OutputBytes: DefaultOutputBytes,
			TmpBytes:    DefaultTmpBytes,
		},
		Maxima: api.Limits{
			TimeoutMs:   MaxTimeout.Milliseconds(),
			MemoryBytes: MaxMemory,
			Pids:        MaxPids,
			CPUs:        cpus,
			OutputBytes: MaxOutputBytes,
			TmpBytes:    MaxTmpBytes,
		},
	}
}

// Validate checks the configuration and fills derived defaults.
func (c *Config) Validate() error {
	var errs []error
	if !filepath.IsAbs(c.Socket) {
		errs = append(errs, fmt.Errorf("--socket %q must be an absolute path", c.Socket))
	}
	if !filepath.IsAbs(c.StateDir) {
		errs = append(errs, fmt.Errorf("--state-dir %q must be an absolute path", c.StateDir))
	}
	if !validCgroupName(c.CgroupName) {
		errs = append(errs, fmt.Errorf("--cgroup-name %q must be 1-64 of [a-zA-Z0-9_-] starting with cellblock", c.CgroupName))
	}
	if c.MaxConcurrent == 0 {
		c.MaxConcurrent = runtime.NumCPU()
	}
	if c.MaxConcurrent < 1 || c.MaxConcurrent > 1024 {
		errs = append(errs, fmt.Errorf("--max-concurrent %d must be between 1 and 1024", c.MaxConcurrent))
	}
	if c.Prestart < 0 || c.Prestart > MaxPrestart {
		errs = append(errs, fmt.Errorf("--prestart %d must be between 0 and %d", c.Prestart, MaxPrestart))
	}
	if c.PrestartShapes < 0 || c.PrestartShapes > MaxPrestartShapes {
		errs = append(errs, fmt.Errorf("--prestart-shapes %d must be between 0 and %d", c.PrestartShapes, MaxPrestartShapes))
	}
	if c.MaxSessions < 0 || c.MaxSessions > MaxSessionsLimit {
		errs = append(errs, fmt.Errorf("--max-sessions %d must be between 0 and %d", c.MaxSessions, MaxSessionsLimit))
	}
	if c.MaxSessionsPerUID < 1 || c.MaxSessionsPerUID > MaxSessionsLimit {
		errs = append(errs, fmt.Errorf("--max-sessions-per-uid %d must be between 1 and %d", c.MaxSessionsPerUID, MaxSessionsLimit))
	}
	if c.SessionMaxIdle < time.Second || c.SessionMaxIdle > 7*24*time.Hour {
		errs = append(errs, fmt.Errorf("--session-max-idle %s must be between 1s and 168h", c.SessionMaxIdle))
	}
	if c.SessionMaxLifetime < time.Second || c.SessionMaxLifetime > 30*24*time.Hour {
		errs = append(errs, fmt.Errorf("--session-max-lifetime %s must be between 1s and 720h", c.SessionMaxLifetime))
	}
	if c.PrestartIdle < time.Second || c.PrestartIdle > 24*time.Hour {
		errs = append(errs, fmt.Errorf("--prestart-idle %s must be between 1s and 24h", c.PrestartIdle))
	}
	if c.MaxConnectionsPerUID < 1 {
		errs = append(errs, fmt.Errorf("--max-connections-per-uid %d must be at least 1", c.MaxConnectionsPerUID))
	}
	if c.QueueSize < 0 || c.QueueSize > 100000 {
		errs = append(errs, fmt.Errorf("--queue %d must be between 0 and 100000", c.QueueSize))
	}
	switch c.UserNS {
	case "auto", "on", "off":
	default:
		errs = append(errs, fmt.Errorf("--userns %q must be auto, on or off", c.UserNS))
	}
	if c.UserNSBase < 65536 || c.UserNSBase+DefaultUserNSSize > 1<<32-2 {
		errs = append(errs, fmt.Errorf("--userns-base %d is out of range", c.UserNSBase))
	}
	switch c.LogFormat {
	case "auto", "text", "json":
	default:
		errs = append(errs, fmt.Errorf("--log-format %q must be auto, text or json", c.LogFormat))
	}
	if c.AuditLog == "" {
		c.AuditLog = filepath.Join(c.StateDir, DefaultAuditLogName)
	}
	if c.AuditLog != AuditLogOff && !filepath.IsAbs(c.AuditLog) {
		errs = append(errs, fmt.Errorf("--audit-log %q must be an absolute path or %q", c.AuditLog, AuditLogOff))
	}
	if c.AuditLogMaxBytes < 4096 {
		errs = append(errs, fmt.Errorf("--audit-log-max-size %d must be at least 4 KiB", c.AuditLogMaxBytes))
	}
	if c.AuditLogKeep < 0 || c.AuditLogKeep > 1000 {
		errs = append(errs, fmt.Errorf("--audit-log-keep %d must be between 0 and 1000", c.AuditLogKeep))
	}
	if c.NoIndex && c.IndexURL != "" {
		errs = append(errs, errors.New("--no-index and --index-url exclude each other"))
	}
	if c.DisplayItemBytes < 1<<10 || c.DisplayTotalBytes < c.DisplayItemBytes || c.DisplayTotalBytes > MaxDisplayTotalBytes {
		errs = append(errs, fmt.Errorf("--display-item-bytes %d and --display-total-bytes %d: want 1 KiB <= item <= total <= %d", c.DisplayItemBytes, c.DisplayTotalBytes, int64(MaxDisplayTotalBytes)))
	}
	if c.EnvCacheSize < 0 {
		errs = append(errs, fmt.Errorf("--env-cache-size %d must not be negative", c.EnvCacheSize))
	}
	if c.EnvBuildTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--env-build-timeout %s must be positive", c.EnvBuildTimeout))
	}
	if c.EnvBuildMemory < 64<<20 {
		errs = append(errs, fmt.Errorf("--env-build-memory %d must be at least 64 MiB", c.EnvBuildMemory))
	}
	if _, aerr := api.ParseNetPatterns("--network-allow", c.NetworkAllow); aerr != nil {
		errs = append(errs, fmt.Errorf("%s: %s", aerr.Field, aerr.Message))
	}
	if c.NetworkMaxConnections < 1 || c.NetworkMaxConnections > 65536 {
		errs = append(errs, fmt.Errorf("--network-max-connections %d must be between 1 and 65536", c.NetworkMaxConnections))
	}
	if c.NetworkMaxConnectionsTotal < 1 {
		errs = append(errs, fmt.Errorf("--network-max-connections-total %d must be positive", c.NetworkMaxConnectionsTotal))
	}
	if c.NetworkMaxBytes < 1 {
		errs = append(errs, fmt.Errorf("--network-max-bytes %d must be positive", c.NetworkMaxBytes))
	}
	if err := c.Tools.Validate(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.validateFiles()...)
	errs = append(errs, c.validateSecrets()...)
	d, m := c.Defaults, c.Maxima
	if d.TimeoutMs <= 0 || d.TimeoutMs > m.TimeoutMs || d.MemoryBytes <= 0 || d.MemoryBytes > m.MemoryBytes ||
		d.Pids <= 0 || d.Pids > m.Pids || d.CPUs <= 0 || d.CPUs > m.CPUs ||
		d.OutputBytes <= 0 || d.OutputBytes > m.OutputBytes || d.TmpBytes <= 0 || d.TmpBytes > m.TmpBytes {
		errs = append(errs, fmt.Errorf("default limits %+v must be positive and within the maxima %+v", d, m))
	}
	return errors.Join(errs...)
}

func validCgroupName(n string) bool {
	if len(n) > 64 || len(n) < len("cellblock") || n[:len("cellblock")] != "cellblock" {
		return false
	}
	for _, c := range n {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// validateFiles checks the caps on files and the artifact store's.
func (c *Config) validateFiles() []error {
	var errs []error
	if c.FilesInCount < 0 || c.FilesInCount > MaxFilesCount {
		errs = append(errs, fmt.Errorf("--files-in-max-count %d must be between 0 and %d", c.FilesInCount, MaxFilesCount))
	}
	if c.FilesInBytes < 0 || c.FilesInBytes > MaxFilesBytes {
		errs = append(errs, fmt.Errorf("--files-in-max-bytes %d must be between 0 and %d", c.FilesInBytes, int64(MaxFilesBytes)))
	}
	if c.FilesOutCount < 1 || c.FilesOutCount > MaxFilesCount {
		errs = append(errs, fmt.Errorf("--files-out-max-count %d must be between 1 and %d", c.FilesOutCount, MaxFilesCount))
	}
	if c.FilesOutFileBytes < 1 || c.FilesOutFileBytes > c.FilesOutBytes {
		errs = append(errs, fmt.Errorf("--files-out-max-file-bytes %d must be positive and at most --files-out-max-bytes (%d)", c.FilesOutFileBytes, c.FilesOutBytes))
	}
	if c.FilesOutBytes > c.ArtifactStoreBytes {
		errs = append(errs, fmt.Errorf("--files-out-max-bytes %d must be at most --artifact-store-size (%d): one run's files must fit in the store", c.FilesOutBytes, c.ArtifactStoreBytes))
	}
	if c.FilesInlineBytes < 0 || c.FilesInlineBytes > MaxFilesInlineBytes {
		errs = append(errs, fmt.Errorf("--files-inline-bytes %d must be between 0 and %d", c.FilesInlineBytes, int64(MaxFilesInlineBytes)))
	}
	if c.ArtifactStoreBytes < 1<<20 {
		errs = append(errs, fmt.Errorf("--artifact-store-size %d must be at least 1 MiB", c.ArtifactStoreBytes))
	}
	if c.ArtifactTTL < time.Minute || c.ArtifactTTL > 30*24*time.Hour {
		errs = append(errs, fmt.Errorf("--artifact-ttl %s must be between 1m and 720h", c.ArtifactTTL))
	}
	return errs
}

// validateSecrets checks the declared secrets and the egress CA's flags.
// A secret with no host is refused: it would go nowhere, or, worse, an
// operator might think it goes where it does not.
func (c *Config) validateSecrets() []error {
	var errs []error
	bound, _ := api.ParseNetPatterns("--network-allow", c.NetworkAllow)
	for _, s := range c.Secrets {
		n := s.Name
		switch {
		case !api.ValidSecretName(n):
			errs = append(errs, fmt.Errorf("--secret %q: a secret's name is a variable name such as GITHUB_TOKEN (letters, digits and _, at most %d)", n, api.MaxSecretName))
			continue
		case api.ReservedSecretName(n):
			errs = append(errs, fmt.Errorf("--secret %s: the jail sets that variable itself; name the secret otherwise", n))
		case s.File == "":
			errs = append(errs, fmt.Errorf("--secret-host or --secret-allow-uid name %s, but no --secret %s=FILE declares it", n, n))
		case !filepath.IsAbs(s.File):
			errs = append(errs, fmt.Errorf("--secret %s=%s: the file must be an absolute path", n, s.File))
		}
		if len(s.Hosts) == 0 {
			errs = append(errs, fmt.Errorf("--secret %s has no --secret-host %s=HOST:PORT: a secret goes only to the hosts it is bound to, and this one is bound to none", n, n))
		}
		for _, h := range s.Hosts {
			p, err := api.ParseNetPattern(h)
			if err != nil {
				errs = append(errs, fmt.Errorf("--secret-host %s=%s: %v", n, h, err))
				continue
			}
			within := false
			for _, b := range bound {
				within = within || p.Within(b)
			}
			if !within {
				errs = append(errs, fmt.Errorf("--secret-host %s=%s is beyond --network-allow (%v): no run could reach it", n, h, c.NetworkAllow))
			}
		}
		for _, uid := range s.AllowUIDs {
			if uid < 0 || uid > 1<<32-2 {
				errs = append(errs, fmt.Errorf("--secret-allow-uid %s=%d is not a uid", n, uid))
			}
		}
	}
	if (c.EgressCACert == "") != (c.EgressCAKey == "") {
		errs = append(errs, errors.New("--egress-ca-cert and --egress-ca-key go together"))
	}
	return errs
}
