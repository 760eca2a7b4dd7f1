package api

import (
	"fmt"
	"time"
)

// Paths of the session API.
const (
	// PathSessions: POST creates a session (SessionRequest), GET lists
	// the caller's. GET, DELETE PathSessions + "/" + ID show and end one.
	PathSessions = "/v1/sessions"
)

// Session states.
const (
	// SessionAlive: the session's interpreter is up and keeps its state.
	SessionAlive = "alive"
	// SessionLost: its interpreter died (memory, a crash, os._exit, a
	// timeout it did not survive). It answers ErrSessionLost until deleted.
	SessionLost = "lost"
)

// Session bounds that do not depend on the daemon's configuration.
const (
	// DefaultSessionIdle is a session's idle timeout when the request
	// names none.
	DefaultSessionIdle = 10 * time.Minute
	// MinSessionIdle is the shortest idle timeout a request may ask for.
	MinSessionIdle = time.Second
	// MaxSessionVariables bounds Session.Variables; MaxVariableRepr each
	// variable's repr, in bytes.
	MaxSessionVariables = 200
	MaxVariableRepr     = 120
)

// SessionRequest asks for a session: a jail whose interpreter stays alive
// between runs, keeping its globals, imports and /work. What fixes the
// jail is set here, once: the interpreter, dependencies, environment and
// the limits of the whole session. Each run in it sets its own timeout and
// output cap. Zero values take the daemon's defaults.
type SessionRequest struct {
	Python       string            `json:"python,omitempty"`
	Dependencies []string          `json:"dependencies,omitempty"`
	Env          map[string]string `json:"env,omitempty"`
	MemoryBytes  int64             `json:"memory_bytes,omitempty"`
	Pids         int64             `json:"pids,omitempty"`
	CPUs         float64           `json:"cpus,omitempty"`
	TmpBytes     int64             `json:"tmp_bytes,omitempty"`
	// IdleTimeoutMs ends the session after this long without a run
	// (default DefaultSessionIdle, at most the daemon's maximum).
	IdleTimeoutMs int64 `json:"idle_timeout_ms,omitempty"`
	// Network is the session's egress, for all its runs (see Network).
	Network *Network `json:"network,omitempty"`
	// Secrets are the session's secrets, for all its runs (see
	// RunRequest.Secrets).
	Secrets []string `json:"secrets,omitempty"`
	// Files are placed under the session's /work before its first run.
	Files []FileInput `json:"files,omitempty"`
}

// AsRun is the run request whose rules the session's fields follow:
// the same validation and the same limits.
func (r *SessionRequest) AsRun() *RunRequest {
	return &RunRequest{Code: "\n", Python: r.Python, Dependencies: r.Dependencies, Env: r.Env,
		MemoryBytes: r.MemoryBytes, Pids: r.Pids, CPUs: r.CPUs, TmpBytes: r.TmpBytes, Network: r.Network, Secrets: r.Secrets}
}

// Validate checks the request's shape; it returns an *Error naming the
// field.
func (r *SessionRequest) Validate() *Error {
	if err := r.AsRun().Validate(); err != nil {
		return err
	}
	if err := validateFiles(r.Files, ""); err != nil {
		return err
	}
	if r.IdleTimeoutMs < 0 {
		return Errorf(ErrBadRequest, "idle_timeout_ms", "must not be negative")
	}
	if r.IdleTimeoutMs > 0 && time.Duration(r.IdleTimeoutMs)*time.Millisecond < MinSessionIdle {
		return Errorf(ErrBadRequest, "idle_timeout_ms", "must be at least %d", MinSessionIdle.Milliseconds())
	}
	return nil
}

// IdleTimeout is the request's idle timeout: its own, else the default,
// refused with over_limit past max.
func (r *SessionRequest) IdleTimeout(max time.Duration) (time.Duration, *Error) {
	d := DefaultSessionIdle
	if r.IdleTimeoutMs > 0 {
		d = time.Duration(r.IdleTimeoutMs) * time.Millisecond
	}
	if d > max {
		if r.IdleTimeoutMs == 0 {
			return max, nil
		}
		return 0, Errorf(ErrOverLimit, "idle_timeout_ms", "%d is above the maximum %d", r.IdleTimeoutMs, max.Milliseconds())
	}
	return d, nil
}

// Session describes one session: the answer to its creation, to GET and
// to a run in it (as Result.Session, in short).
type Session struct {
	ID string `json:"id"`
	// State is SessionAlive or SessionLost.
	State string `json:"state"`
	// Busy: a run is in progress in it now.
	Busy bool `json:"busy"`
	// ExecutionCount counts the runs carried out in it.
	ExecutionCount int       `json:"execution_count"`
	CreatedAt      time.Time `json:"created_at"`
	LastUsedAt     time.Time `json:"last_used_at"`
	// ExpiresAt is when it ends unless a run comes first: the idle
	// timeout after the last run, or its maximum lifetime, the earlier.
	ExpiresAt     time.Time `json:"expires_at"`
	IdleTimeoutMs int64     `json:"idle_timeout_ms"`
	// OwnerUID is the uid that created it; only it (and root) sees it.
	OwnerUID    uint32       `json:"owner_uid"`
	Python      string       `json:"python,omitempty"`
	Limits      *Limits      `json:"limits,omitempty"`
	Environment *Environment `json:"environment,omitempty"`
	// Network is the egress the session was created with, if any.
	Network *Network `json:"network,omitempty"`
	// Secrets are the secrets the session was created with, if any.
	Secrets []string `json:"secrets,omitempty"`
	// MemoryBytes is the memory the session holds now.
	MemoryBytes int64 `json:"memory_bytes"`
	// Variables are the globals its code defined, as of its last run:
	// at most MaxSessionVariables, each repr at most MaxVariableRepr bytes.
	Variables []Variable `json:"variables,omitempty"`
	// VariablesTruncated: there were more than MaxSessionVariables.
	VariablesTruncated bool `json:"variables_truncated,omitempty"`
}

// Variable is one global of a session.
type Variable struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Repr string `json:"repr"`
}

// SessionList is the body of GET PathSessions.
type SessionList struct {
	Sessions []Session `json:"sessions"`
}

// SessionState is Result.Session: the session a run ran in, after it.
type SessionState struct {
	ID             string    `json:"id"`
	ExecutionCount int       `json:"execution_count"`
	State          string    `json:"state"`
	ExpiresAt      time.Time `json:"expires_at"`
}

// SessionDeleted answers DELETE PathSessions/ID.
type SessionDeleted struct {
	ID      string `json:"id"`
	Deleted bool   `json:"deleted"`
}

// validateSessionRun checks what a run in a session may not set: what
// fixes the jail belongs to the session.
func (r *RunRequest) validateSessionRun() *Error {
	if r.Session == "" {
		return nil
	}
	if len(r.Session) > 128 {
		return Errorf(ErrBadRequest, "session", "is %d bytes; a session id is shorter", len(r.Session))
	}
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"python", r.Python != ""},
		{"dependencies", len(r.Dependencies) > 0},
		{"env", len(r.Env) > 0},
		{"memory_bytes", r.MemoryBytes != 0},
		{"pids", r.Pids != 0},
		{"cpus", r.CPUs != 0},
		{"tmp_bytes", r.TmpBytes != 0},
		{"network", r.Network != nil},
		{"secrets", len(r.Secrets) > 0},
	} {
		if f.set {
			return Errorf(ErrBadRequest, f.name, "is fixed when a session is created (%s); a run in session %q cannot set it", PathSessions, r.Session)
		}
	}
	return nil
}

// SessionNotFound is the error for an id the caller cannot use: unknown,
// expired, deleted, ended by a restart, or another uid's. why, when the
// daemon knows the caller owned it, says what became of it.
func SessionNotFound(id, why string) *Error {
	if why == "" {
		why = "it never existed, has expired or been deleted, ended when cellblockd restarted, or belongs to another user"
	}
	return Errorf(ErrSessionNotFound, "session", "no session %q: %s", id, why)
}

// SessionString is how a Session reads in a log line.
func (s *Session) String() string {
	return fmt.Sprintf("session %s (%s, %d runs, expires %s)", s.ID, s.State, s.ExecutionCount, s.ExpiresAt.Format(time.RFC3339))
}
