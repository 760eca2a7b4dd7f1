// Package audit writes cellblockd's audit log: one JSON line per run
// request, saying who asked (the caller's peer credentials), for what (a
// hash and the size of the code, the requirements, the limits) and what
// came of it. The file is rotated by size and kept at mode 0640.
//
// It never writes the code itself unless the operator asks for it
// (Config.IncludeCode), and it owns nothing but its files: it learns about
// runs only from the server's run records.
package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/pep723"
	"github.com/cellblock/cellblock/internal/record"
	"github.com/cellblock/cellblock/rootfs/envs"
)

// FileMode is the mode of the audit log and its rotated files: root reads
// and writes, its group reads, nobody else.
const FileMode = 0o640

// Config says where and how the audit log is written.
type Config struct {
	// Path is the audit log's file.
	Path string
	// MaxBytes is the size past which the file is rotated.
	MaxBytes int64
	// Keep is how many rotated files (Path.1 the newest ... Path.Keep) are
	// kept; 0 keeps none.
	Keep int
	// IncludeCode writes each run's code into its line.
	IncludeCode bool
	// IncludeToolContent writes each tool call's arguments and answer
	// (result or error message) into the run's line.
	IncludeToolContent bool
}

// Entry is one line of the audit log.
type Entry struct {
	Time  time.Time `json:"time"`
	RunID string    `json:"run_id,omitempty"`
	// The caller, from SO_PEERCRED.
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
	PID int32  `json:"pid"`
	// Outcome classifies the run as the metrics do (record.Outcome).
	Outcome string `json:"outcome"`

	CodeSHA256 string `json:"code_sha256,omitempty"`
	CodeBytes  int    `json:"code_bytes"`
	Code       string `json:"code,omitempty"`
	Filename   string `json:"filename,omitempty"`
	// Session is the session the run ran in, if any.
	Session string `json:"session,omitempty"`
	// Python is the interpreter the run used, else the version asked for.
	Python string `json:"python,omitempty"`
	// Requirements are the script's PEP 723 dependencies and the request's,
	// merged and normalized as the environment is built from them (see
	// deps.Requirements); as the caller spelled them when they do not
	// normalize (such a run was refused before anything was installed).
	Requirements []string `json:"requirements,omitempty"`
	// Environment is the dependency environment the run got, if any.
	Environment *Environment `json:"environment,omitempty"`
	Limits      *api.Limits  `json:"limits,omitempty"`
	// Network is the egress allowlist the request asked for, if any.
	Network []string `json:"network,omitempty"`
	// Secrets are the secrets the request asked for, by name.
	Secrets []string `json:"secrets,omitempty"`

	ExitCode        int        `json:"exit_code"`
	TimedOut        bool       `json:"timed_out"`
	OOMKilled       bool       `json:"oom_killed"`
	Error           *api.Error `json:"error,omitempty"`
	DurationMs      int64      `json:"duration_ms"`
	TotalMs         int64      `json:"total_ms"`
	CPUMs           int64      `json:"cpu_ms"`
	MemoryPeakBytes int64      `json:"memory_peak_bytes"`
	StdoutBytes     int        `json:"stdout_bytes"`
	StderrBytes     int        `json:"stderr_bytes"`
	// Denials are what the sandbox refused the run (the result's, which
	// are bounded), a secret's placeholder sent where it may not go among
	// them.
	Denials []api.Denial `json:"denials,omitempty"`
	// SecretUses are the requests that used a secret: its name, host,
	// method, path and status, counted (never its value).
	SecretUses []api.SecretUse `json:"secret_uses,omitempty"`
	// ToolCalls are the run's tool calls (see ToolCall), and
	// ToolCallsOverCap those refused past its cap, counted.
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
	ToolCallsOverCap int64      `json:"tool_calls_over_cap,omitempty"`
	// FilesIn are the request's files, FilesOut those the run gave back
	// (see filesOf).
	FilesIn  []File `json:"files_in,omitempty"`
	FilesOut []File `json:"files_out,omitempty"`
}

// Environment is what the audit log keeps of a run's environment.
type Environment struct {
	ID       string `json:"id"`
	CacheHit bool   `json:"cache_hit"`
	// Packages are the resolved distributions as name==version.
	Packages []string `json:"packages,omitempty"`
}

// NewEntry turns a run record into an audit entry. The code is hashed and
// left out unless includeCode; so are the tool calls' arguments and
// answers (see WithToolContent).
func NewEntry(rec record.Run, includeCode bool) Entry {
	e := Entry{
		Time: rec.Started.UTC(), UID: rec.Peer.UID, GID: rec.Peer.GID, PID: rec.Peer.PID,
		Outcome: record.Outcome(rec.Result), TotalMs: rec.Duration.Milliseconds(),
	}
	if req := rec.Request; req != nil {
		sum := sha256.Sum256([]byte(req.Code))
		e.CodeSHA256 = hex.EncodeToString(sum[:])
		e.CodeBytes = len(req.Code)
		if includeCode {
			e.Code = req.Code
		}
		e.Filename = req.Filename
		e.Session = req.Session
		e.Python = req.Python
		meta, _ := pep723.Parse(req.Code) // a malformed block is the executor's to report
		e.Requirements = pep723.Merge(meta.Dependencies, req.Dependencies)
		if norm, err := envs.Normalize(e.Requirements); err == nil {
			e.Requirements = norm
		}
		if req.Network != nil {
			e.Network = req.Network.Allow
		}
		e.Secrets = req.Secrets
	}
	if res := rec.Result; res != nil {
		e.RunID = res.RunID
		if res.Python != "" {
			e.Python = res.Python
		}
		if env := res.Environment; env != nil {
			e.Environment = &Environment{ID: env.ID, CacheHit: env.CacheHit}
			for _, p := range env.Packages {
				e.Environment.Packages = append(e.Environment.Packages, p.Name+"=="+p.Version)
			}
		}
		e.Limits = res.Limits
		e.ExitCode, e.TimedOut, e.OOMKilled, e.Error = res.ExitCode, res.TimedOut, res.OOMKilled, res.Error
		e.DurationMs, e.CPUMs, e.MemoryPeakBytes = res.DurationMs, res.CPUMs, res.MemoryPeakBytes
		e.StdoutBytes, e.StderrBytes = len(res.Stdout), len(res.Stderr)
		e.Denials = res.Denials
		e.SecretUses = res.SecretUses
	}
	e.ToolCalls = toolCalls(rec.ToolCalls, false)
	e.ToolCallsOverCap = rec.ToolCallsOverCap
	e.FilesIn, e.FilesOut = filesOf(rec)
	return e
}

// Log is an open audit log. Its methods are safe for concurrent use; lines
// are written whole, one at a time.
type Log struct {
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	f      *os.File
	size   int64
	failed bool // the last write failed; logged once until one succeeds
}

// Open opens (creating if needed) the audit log at cfg.Path for appending.
// Failures to write later are logged to log, not returned: the audit log
// must not stop runs.
func Open(cfg Config, log *slog.Logger) (*Log, error) {
	if cfg.MaxBytes <= 0 {
		return nil, fmt.Errorf("audit log %s: maximum size %d must be positive", cfg.Path, cfg.MaxBytes)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(filepath.Dir(cfg.Path), 0o750); err != nil {
		return nil, fmt.Errorf("audit log directory: %w", err)
	}
	l := &Log{cfg: cfg, log: log}
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

// open opens cfg.Path. O_NOFOLLOW: the log is not written through a
// symbolic link somebody planted.
func (l *Log) open() error {
	f, err := os.OpenFile(l.cfg.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW, FileMode)
	if err != nil {
		return fmt.Errorf("open audit log: %w", err)
	}
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = fmt.Errorf("%s is not a regular file", l.cfg.Path)
	}
	if err == nil {
		err = f.Chmod(FileMode) // also when it existed with another mode
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("open audit log: %w", err)
	}
	l.f, l.size = f, st.Size()
	return nil
}

// Observe writes the line of one run record; it is the server's Observer
// (or part of it).
func (l *Log) Observe(rec record.Run) {
	e := NewEntry(rec, l.cfg.IncludeCode)
	if l.cfg.IncludeToolContent {
		e.WithToolContent(rec)
	}
	if err := l.Write(e); err != nil {
		l.noteFailure(err)
	}
}

// noteFailure logs a failed write, once until a write succeeds.
func (l *Log) noteFailure(err error) {
	l.mu.Lock()
	first := !l.failed
	l.failed = true
	l.mu.Unlock()
	if first {
		l.log.Error("audit log write failed; further failures are not logged until a write succeeds", "path", l.cfg.Path, "err", err)
	}
}

// Write appends one entry as a line, rotating the file first if the line
// would take it past the maximum size.
func (l *Log) Write(e Entry) error { return l.writeLine(e) }

// writeLine appends v as one line of JSON (see Write).
func (l *Log) writeLine(v any) error {
	line, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode audit entry: %w", err)
	}
	line = append(line, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		if err := l.open(); err != nil {
			return err
		}
	}
	if l.size > 0 && l.size+int64(len(line)) > l.cfg.MaxBytes {
		if err := l.rotate(); err != nil {
			return err
		}
	}
	n, err := l.f.Write(line)
	l.size += int64(n)
	if err != nil {
		return fmt.Errorf("write audit log: %w", err)
	}
	if l.failed {
		l.failed = false
		l.log.Info("audit log writes work again", "path", l.cfg.Path)
	}
	return nil
}

// rotate shifts Path.i to Path.i+1 (dropping what falls past Keep), moves
// Path to Path.1 and opens a new Path. l.mu is held.
func (l *Log) rotate() error {
	if err := l.f.Close(); err != nil {
		l.log.Warn("close audit log for rotation", "err", err)
	}
	l.f = nil
	p := l.cfg.Path
	name := func(i int) string { return fmt.Sprintf("%s.%d", p, i) }
	if l.cfg.Keep > 0 {
		if err := os.Remove(name(l.cfg.Keep)); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("rotate audit log: %w", err)
		}
	}
	for i := l.cfg.Keep - 1; i >= 1; i-- {
		if err := os.Rename(name(i), name(i+1)); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("rotate audit log: %w", err)
		}
	}
	var err error
	if l.cfg.Keep > 0 {
		err = os.Rename(p, name(1))
	} else {
		err = os.Remove(p)
	}
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("rotate audit log: %w", err)
	}
	return l.open()
}

// Close closes the file.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
