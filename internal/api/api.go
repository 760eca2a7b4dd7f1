// Package api defines the JSON types spoken on cellblockd's Unix socket:
// the run request, the result object of the contract, daemon info and the
// error classes. It is plain data with validation that needs no privileges.
//
// It must not import anything that touches the kernel: the unprivileged
// client and the MCP server import it.
package api

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"
)

// Paths of the HTTP API on the socket.
const (
	PathRuns   = "/v1/runs"
	PathInfo   = "/v1/info"
	PathHealth = "/v1/health"
	// PathMetrics is the Prometheus text format page, for the same callers
	// as the API.
	PathMetrics = "/metrics"
)

// DefaultSocket is where clients look for the daemon when neither a flag
// nor $CELLBLOCK_SOCKET names a socket.
const DefaultSocket = "/run/cellblock/cellblockd.sock"

// SocketEnv is the environment variable clients read for the socket path.
const SocketEnv = "CELLBLOCK_SOCKET"

// MaxRequestBytes bounds the size of a request body the daemon will read.
const MaxRequestBytes = 4 << 20

// RunRequest asks the daemon to run one Python program in a fresh jail.
// Zero-valued limits take the daemon's defaults; limits above the daemon's
// maxima are refused with an over_limit error naming the field.
type RunRequest struct {
	// Code is the Python source to run (required).
	Code string `json:"code"`
	// Filename is the script's name inside the jail's working directory,
	// shown in tracebacks. Default "main.py". The names "-c" and "-" run
	// the code as `python -c CODE` and `python -` do (sys.argv[0] and
	// sys.path[0] as python sets them, no file written).
	Filename string `json:"filename,omitempty"`
	// Args are passed to the program as sys.argv[1:].
	Args []string `json:"args,omitempty"`
	// Stdin is fed to the program's standard input; empty means /dev/null.
	Stdin string `json:"stdin,omitempty"`
	// Python picks an imported interpreter by version prefix ("3.12");
	// empty means the default one.
	Python string `json:"python,omitempty"`
	// Env adds environment variables for the program.
	Env map[string]string `json:"env,omitempty"`
	// Dependencies are extra requirements (PEP 508), merged with the
	// script's PEP 723 metadata.
	Dependencies []string `json:"dependencies,omitempty"`
	// Mode is ModeScript (the default) or ModeCell.
	Mode string `json:"mode,omitempty"`
	// Inputs are bound as globals (and cellblock.inputs) before the code
	// runs, in both modes: name to any JSON value.
	Inputs map[string]json.RawMessage `json:"inputs,omitempty"`
	// Session runs the code in that session's interpreter (see
	// SessionRequest), which keeps its globals between runs. Python,
	// dependencies, env and the session-wide limits may not be set then.
	Session string `json:"session,omitempty"`
	// Network asks for egress to the hosts it allows (see Network); none
	// without it.
	Network *Network `json:"network,omitempty"`
	// Secrets names the operator's secrets the run may use (see
	// SecretUse): each one's variable holds a placeholder, and the proxy
	// puts the value in requests to the secret's hosts, which the run may
	// then reach. A session's are fixed when it is created.
	Secrets []string `json:"secrets,omitempty"`
	// Tools are host tools the code may call (see Tool); a run that
	// declares any must be streamed, and its caller answers each call.
	Tools []Tool `json:"tools,omitempty"`
	// ToolLimits lower the daemon's caps on the run's tool calls.
	ToolLimits *ToolLimits `json:"tool_limits,omitempty"`
	// Files are placed under /work before the code runs (see FileInput).
	Files []FileInput `json:"files,omitempty"`
	// ReturnFiles is "" or ReturnFilesInline: small text files the
	// program wrote under /work/out come back with their content too.
	ReturnFiles string `json:"return_files,omitempty"`

	// TimeoutMs is the wall-clock limit from program start.
	TimeoutMs int64 `json:"timeout_ms,omitempty"`
	// MemoryBytes is the memory limit of the whole run (swap off).
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	// Pids is the maximum number of tasks (processes and threads).
	Pids int64 `json:"pids,omitempty"`
	// CPUs is the CPU quota in cores.
	CPUs float64 `json:"cpus,omitempty"`
	// OutputBytes caps each of stdout and stderr.
	OutputBytes int64 `json:"output_bytes,omitempty"`
	// TmpBytes is the size of the writable tmpfs at /tmp (the working
	// directory and /dev/shm get the same size each).
	TmpBytes int64 `json:"tmp_bytes,omitempty"`
}

// Limits is a set of resource limits; used for the daemon's defaults and
// maxima in Info, and for the limits applied to a run.
type Limits struct {
	TimeoutMs   int64   `json:"timeout_ms"`
	MemoryBytes int64   `json:"memory_bytes"`
	Pids        int64   `json:"pids"`
	CPUs        float64 `json:"cpus"`
	OutputBytes int64   `json:"output_bytes"`
	TmpBytes    int64   `json:"tmp_bytes"`
}

// Result is the contract's result object.
type Result struct {
	ExitCode        int    `json:"exit_code"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated"`
	StderrTruncated bool   `json:"stderr_truncated"`
	TimedOut        bool   `json:"timed_out"`
	OOMKilled       bool   `json:"oom_killed"`
	DurationMs      int64  `json:"duration_ms"`
	CPUMs           int64  `json:"cpu_ms"`
	MemoryPeakBytes int64  `json:"memory_peak_bytes"`
	Error           *Error `json:"error"`

	// Extensions beyond the contract.

	// RunID identifies the run in the daemon's logs.
	RunID string `json:"run_id,omitempty"`
	// Python is the interpreter version the run used.
	Python string `json:"python,omitempty"`
	// Limits are the limits that applied to the run.
	Limits *Limits `json:"limits,omitempty"`
	// Environment describes the dependency environment, if any.
	Environment *Environment `json:"environment,omitempty"`
	// Phases is where the daemon spent the run's time.
	Phases *Phases `json:"phases,omitempty"`

	// Value is the value of a cell's final expression (cell mode).
	Value *Value `json:"value,omitempty"`
	// Exception is the program's uncaught exception, if any.
	Exception *Exception `json:"exception,omitempty"`
	// Display is the program's rich output, in order.
	Display []DisplayItem `json:"display,omitempty"`
	// Session is the session the run ran in, after it; nil outside one.
	Session *SessionState `json:"session,omitempty"`
	// Denials are what the sandbox refused the program (see Denial).
	Denials []Denial `json:"denials,omitempty"`
	// SecretUses are the requests that used the run's secrets (see
	// SecretUse), counted by kind.
	SecretUses []SecretUse `json:"secret_uses,omitempty"`
	// ToolCalls lists the run's tool calls in the order they came;
	// ToolCallsOverCap counts those refused, unlisted, past its cap.
	ToolCalls        []ToolCallReport `json:"tool_calls,omitempty"`
	ToolCallsOverCap int64            `json:"tool_calls_over_cap,omitempty"`
	// Files are the files the program wrote under /work/out (in a
	// session: those new or changed during the run); FilesSkipped what
	// was there but did not come back, and why.
	Files        []File        `json:"files,omitempty"`
	FilesSkipped []FileSkipped `json:"files_skipped,omitempty"`
}

// Phases breaks a run's time down, in microseconds.
type Phases struct {
	QueueUs   int64 `json:"queue_us"`
	CreateUs  int64 `json:"create_us"`
	StartUs   int64 `json:"start_us"`
	ProgramUs int64 `json:"program_us"`
	// HandoverUs is the part of ProgramUs before the code ran: the program
	// handed to the interpreter that was already up in the jail (and, for
	// a request whose environment changes how Python starts, its restart).
	HandoverUs int64 `json:"handover_us,omitempty"`
	CollectUs  int64 `json:"collect_us"`
	// TeardownUs is 0: the jail is torn down after the answer, which does
	// not wait for it. Kept so that readers of the field still find it.
	TeardownUs int64 `json:"teardown_us"`
	// EnvUs is the time to get the run's dependency environment: a few
	// microseconds for a cached one, the whole build otherwise.
	EnvUs int64 `json:"env_us,omitempty"`
	// ToolsUs is the part of ProgramUs during which the code waited for
	// at least one tool call's answer.
	ToolsUs int64 `json:"tools_us,omitempty"`
	// Prestarted reports that the run's jail was built and started
	// before the request arrived (create_us is then 0 and start_us only
	// the hand-over); it was new and unused all the same.
	Prestarted bool `json:"prestarted,omitempty"`
}

// Environment describes the dependency environment attached to a run.
type Environment struct {
	ID       string    `json:"id"`
	CacheHit bool      `json:"cache_hit"`
	Policy   string    `json:"policy,omitempty"`
	Packages []Package `json:"packages,omitempty"`
}

// Package is one resolved distribution in an environment.
type Package struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Hash    string `json:"hash,omitempty"`
}

// Info describes the daemon.
type Info struct {
	Version       string   `json:"version"`
	Pythons       []Python `json:"pythons"`
	CgroupMode    string   `json:"cgroup_mode"`
	UserNamespace bool     `json:"user_namespace"`
	Seccomp       bool     `json:"seccomp"`
	Network       string   `json:"network"`
	Defaults      Limits   `json:"defaults"`
	Maxima        Limits   `json:"maxima"`
	// MaxConcurrent runs execute at once; up to QueueSize more wait.
	MaxConcurrent int `json:"max_concurrent"`
	QueueSize     int `json:"queue_size"`
	Running       int `json:"running"`
	Queued        int `json:"queued"`
	// Prestart jails are kept started ahead of requests for runs of the
	// default shape (default Python, no dependencies, default tmp size);
	// PrestartReady of them are waiting now.
	Prestart      int `json:"prestart"`
	PrestartReady int `json:"prestart_ready"`
	// PrestartShapes other shapes of jail that runs used keep one
	// prestarted jail each; PrestartShapesReady are waiting now.
	PrestartShapes      int `json:"prestart_shapes"`
	PrestartShapesReady int `json:"prestart_shapes_ready"`
	// Filesystem describes what a run may write.
	Filesystem string `json:"filesystem"`
	// Dependencies describes how dependency environments are built.
	Dependencies *DependencyInfo `json:"dependencies,omitempty"`
	// Display is what a run's rich output, value and exception may take.
	Display *DisplayCaps `json:"display,omitempty"`
	// NetworkPolicy is what runs may ask of the network, and its caps.
	NetworkPolicy *NetworkInfo `json:"network_policy,omitempty"`
	// Tools are the caps on a run's tool calls.
	Tools *ToolCaps `json:"tools,omitempty"`
	// Files are the caps on files in and out, and the artifact store's.
	Files *FileCaps `json:"files,omitempty"`
	// Secrets are the secrets runs may ask for, with their hosts and
	// grants (never their values): shown to root only.
	Secrets []SecretInfo `json:"secrets,omitempty"`
}

// DisplayCaps are the caps on what a run reports besides its output.
type DisplayCaps struct {
	// Items is the most display items a run keeps.
	Items int `json:"items"`
	// ItemBytes caps one item (all its MIME types together); TotalBytes
	// all of a run's items. An item over a cap keeps its text/plain.
	ItemBytes  int `json:"item_bytes"`
	TotalBytes int `json:"total_bytes"`
	// ReprBytes caps a value's repr and each text/plain; TracebackBytes
	// an exception's traceback.
	ReprBytes      int `json:"repr_bytes"`
	TracebackBytes int `json:"traceback_bytes"`
}

// Python is one interpreter the daemon can run.
type Python struct {
	ID      string `json:"id"`
	Version string `json:"version"`
	Default bool   `json:"default"`
}

// PythonList is how people and models are told which Pythons there are:
// each version (or id when it has none), the default marked, "3.11.7
// (default), 3.12.1"; "" for none.
func PythonList(ps []Python) string {
	parts := make([]string, 0, len(ps))
	for _, p := range ps {
		s := p.Version
		if s == "" {
			s = p.ID
		}
		if p.Default {
			s += " (default)"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

// DependencyInfo describes the daemon's dependency settings.
type DependencyInfo struct {
	Installer    string   `json:"installer"`
	IndexURL     string   `json:"index_url,omitempty"`
	FindLinks    []string `json:"find_links,omitempty"`
	NoIndex      bool     `json:"no_index"`
	OnlyBinary   bool     `json:"only_binary"`
	CacheEntries int      `json:"cache_entries"`
	CacheBytes   int64    `json:"cache_bytes"`
	CacheBudget  int64    `json:"cache_budget_bytes"`
	// Policy is the install policy: "wheels-only" or "allow-sdist".
	Policy string `json:"policy,omitempty"`
	// Builds counts the environments built since the daemon started.
	Builds int64 `json:"builds"`
}

// Health is the body of GET /v1/health.
type Health struct {
	Status string `json:"status"`
}

// Validation bounds that do not depend on the daemon's configuration.
const (
	MaxCodeBytes   = 1 << 20
	MaxStdinBytes  = 1 << 20
	MaxArgs        = 256
	MaxEnv         = 128
	MaxEnvBytes    = 64 << 10
	MaxDeps        = 64
	MaxFilenameLen = 128
)

// reservedEnv are variables the jail sets itself and a caller may not.
var reservedEnv = map[string]bool{
	"PATH": true, "HOME": true, "PYTHONHOME": true, "PYTHONPATH": true,
	"LD_PRELOAD": true, "LD_LIBRARY_PATH": true, "LD_AUDIT": true,
}

// Validate checks the request's shape without reference to the daemon's
// limits (see Resolve for those). It returns an *Error naming the field.
func (r *RunRequest) Validate() *Error {
	if r.Code == "" {
		return Errorf(ErrBadRequest, "code", "is required")
	}
	if len(r.Code) > MaxCodeBytes {
		return Errorf(ErrTooLarge, "code", "is %d bytes; the maximum is %d", len(r.Code), MaxCodeBytes)
	}
	if strings.IndexByte(r.Code, 0) >= 0 {
		return Errorf(ErrBadRequest, "code", "contains a NUL byte")
	}
	if r.Filename != "" {
		if len(r.Filename) > MaxFilenameLen || strings.ContainsAny(r.Filename, "/\x00") ||
			r.Filename == "." || r.Filename == ".." || strings.HasPrefix(r.Filename, ".") {
			return Errorf(ErrBadRequest, "filename", "must be a plain file name such as main.py")
		}
	}
	if len(r.Args) > MaxArgs {
		return Errorf(ErrBadRequest, "args", "has %d entries; the maximum is %d", len(r.Args), MaxArgs)
	}
	for i, a := range r.Args {
		if strings.IndexByte(a, 0) >= 0 {
			return Errorf(ErrBadRequest, fmt.Sprintf("args[%d]", i), "contains a NUL byte")
		}
	}
	if len(r.Stdin) > MaxStdinBytes {
		return Errorf(ErrTooLarge, "stdin", "is %d bytes; the maximum is %d", len(r.Stdin), MaxStdinBytes)
	}
	if r.Python != "" && !validVersion(r.Python) {
		return Errorf(ErrBadRequest, "python", "%q is not a version such as 3.12", r.Python)
	}
	if len(r.Env) > MaxEnv {
		return Errorf(ErrBadRequest, "env", "has %d entries; the maximum is %d", len(r.Env), MaxEnv)
	}
	size := 0
	for _, k := range sortedKeys(r.Env) {
		v := r.Env[k]
		size += len(k) + len(v)
		if !validEnvName(k) {
			return Errorf(ErrBadRequest, "env", "%q is not a valid variable name", k)
		}
		if reservedEnv[k] || strings.HasPrefix(k, "LD_") || strings.HasPrefix(k, "CELLBLOCK_") {
			return Errorf(ErrBadRequest, "env", "%s is set by the sandbox and cannot be overridden", k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return Errorf(ErrBadRequest, "env", "value of %s contains a NUL byte", k)
		}
	}
	if size > MaxEnvBytes {
		return Errorf(ErrTooLarge, "env", "is %d bytes; the maximum is %d", size, MaxEnvBytes)
	}
	if len(r.Dependencies) > MaxDeps {
		return Errorf(ErrBadRequest, "dependencies", "has %d entries; the maximum is %d", len(r.Dependencies), MaxDeps)
	}
	for i, d := range r.Dependencies {
		if strings.TrimSpace(d) == "" || len(d) > 512 || strings.ContainsAny(d, "\x00\n\r") {
			return Errorf(ErrBadRequest, fmt.Sprintf("dependencies[%d]", i), "is not a requirement such as 'requests>=2'")
		}
	}
	if err := r.validateInterp(); err != nil {
		return err
	}
	if err := r.validateSessionRun(); err != nil {
		return err
	}
	if err := r.Network.validate(); err != nil {
		return err
	}
	if err := validateSecrets(r.Secrets, r.Env); err != nil {
		return err
	}
	if err := r.validateTools(); err != nil {
		return err
	}
	if err := r.validateFileFields(); err != nil {
		return err
	}
	for _, c := range []struct {
		field string
		v     float64
	}{
		{"timeout_ms", float64(r.TimeoutMs)},
		{"memory_bytes", float64(r.MemoryBytes)},
		{"pids", float64(r.Pids)},
		{"cpus", r.CPUs},
		{"output_bytes", float64(r.OutputBytes)},
		{"tmp_bytes", float64(r.TmpBytes)},
	} {
		if c.v < 0 || c.v != c.v { // negative or NaN
			return Errorf(ErrBadRequest, c.field, "must not be negative")
		}
	}
	return nil
}

// Resolve fills unset limits from def and refuses any above max. It
// returns the limits that apply to the run.
func (r *RunRequest) Resolve(def, max Limits) (Limits, *Error) {
	l := def
	pickInt := func(field string, asked int64, dst *int64, max int64) *Error {
		if asked == 0 {
			return nil
		}
		if asked > max {
			return Errorf(ErrOverLimit, field, "%d is above the daemon's maximum of %d", asked, max)
		}
		*dst = asked
		return nil
	}
	if err := pickInt("timeout_ms", r.TimeoutMs, &l.TimeoutMs, max.TimeoutMs); err != nil {
		return l, err
	}
	if err := pickInt("memory_bytes", r.MemoryBytes, &l.MemoryBytes, max.MemoryBytes); err != nil {
		return l, err
	}
	if err := pickInt("pids", r.Pids, &l.Pids, max.Pids); err != nil {
		return l, err
	}
	if err := pickInt("output_bytes", r.OutputBytes, &l.OutputBytes, max.OutputBytes); err != nil {
		return l, err
	}
	if err := pickInt("tmp_bytes", r.TmpBytes, &l.TmpBytes, max.TmpBytes); err != nil {
		return l, err
	}
	if r.CPUs != 0 {
		if r.CPUs > max.CPUs {
			return l, Errorf(ErrOverLimit, "cpus", "%g is above the daemon's maximum of %g", r.CPUs, max.CPUs)
		}
		l.CPUs = r.CPUs
	}
	// Floors below which Python cannot start at all.
	switch {
	case l.MemoryBytes < 16<<20:
		return l, Errorf(ErrBadRequest, "memory_bytes", "%d is below the minimum of 16 MiB", l.MemoryBytes)
	case l.Pids < 1: // the program's own tasks: the jail's init comes on top
		return l, Errorf(ErrBadRequest, "pids", "%d is below the minimum of 1", l.Pids)
	case l.TimeoutMs < 10:
		return l, Errorf(ErrBadRequest, "timeout_ms", "%d is below the minimum of 10", l.TimeoutMs)
	case l.CPUs < 0.01:
		return l, Errorf(ErrBadRequest, "cpus", "%g is below the minimum of 0.01", l.CPUs)
	case l.TmpBytes < 1<<20:
		return l, Errorf(ErrBadRequest, "tmp_bytes", "%d is below the minimum of 1 MiB", l.TmpBytes)
	}
	return l, nil
}

func validVersion(v string) bool {
	if len(v) > 16 {
		return false
	}
	parts := strings.Split(v, ".")
	if len(parts) > 3 {
		return false
	}
	for _, p := range parts {
		if p == "" {
			return false
		}
		for _, c := range p {
			if c < '0' || c > '9' {
				return false
			}
		}
	}
	return true
}

func validEnvName(k string) bool {
	if k == "" || len(k) > 256 {
		return false
	}
	for i, c := range k {
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// StreamContentType is the Accept value that asks POST /v1/runs to stream
// newline-delimited Events while the run goes on instead of one Result.
const StreamContentType = "application/x-ndjson"

// Event is one line of a streamed run: a chunk of output, a tool call
// for the caller to answer or, last, the result.
type Event struct {
	// RunID is set on tool call events: the run the answer goes to.
	RunID string `json:"run_id,omitempty"`
	// ToolCall is a call of the run's code to one of its tools.
	ToolCall *ToolCall `json:"tool_call,omitempty"`
	// Stream is "stdout" or "stderr" for an output chunk.
	Stream string `json:"stream,omitempty"`
	// Data is the chunk, UTF-8 with invalid bytes replaced.
	Data string `json:"data,omitempty"`
	// Result is set on the final event only.
	Result *Result `json:"result,omitempty"`
}

// ValidUTF8 converts program output to a string, replacing each byte that
// is not part of valid UTF-8 with U+FFFD (as Python's errors="replace"
// does), so that the result says how many bytes were lost.
func ValidUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(len(b) + 16)
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n <= 1 {
			sb.WriteRune(utf8.RuneError)
			b = b[1:]
			continue
		}
		sb.Write(b[:n])
		b = b[n:]
	}
	return sb.String()
}
