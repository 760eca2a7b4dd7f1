// Package nsjail turns a run spec into a jail and carries the run out: it
// builds the libcontainer configuration (namespaces, mounts, pivot_root,
// rlimits, no capabilities, no_new_privs, seccomp last), starts the jail's
// init (package jailinit), hands it the program over a socket, enforces
// the wall-clock timeout by killing the run's cgroup, collects bounded
// output and the cgroup's statistics, and tears everything down. A Pool
// keeps jails started ahead of requests; each still carries out one run.
//
// The Runner owns every kernel object of a run (the cgroup through package
// cgroup, the libcontainer container, the output pipes and the launch
// socket) and releases each on every path. What the jail looks like from
// inside is package layout's. It does not decide policy: limits arrive in
// the Spec already validated and capped by the server. Named after the
// technique; Google's nsjail binary is not involved.
package nsjail

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/cellblock/cellblock/cgroup"
	"github.com/cellblock/cellblock/nsjail/jailinit"
	"github.com/cellblock/cellblock/nsjail/layout"
	"github.com/cellblock/cellblock/nsjail/runner"
)

// Limits are the resource limits of one run; all must be set.
type Limits struct {
	Timeout     time.Duration
	MemoryBytes int64
	Pids        int64
	CPUs        float64
	OutputBytes int64 // per stream
	TmpBytes    int64 // each of /tmp, the working directory and /dev/shm
	OpenFiles   uint64
}

// Mount is an extra bind mount, e.g. a dependency environment. It is
// read-only unless Writable is set.
type Mount struct {
	Source      string // host path
	Destination string // path in the jail
	// Writable leaves the bind mount writable. Only the daemon's own build
	// jails use it, for the one directory a build may write (a new
	// dependency environment); runs never get a writable bind.
	Writable bool
}

// Spec describes one run as plain data.
type Spec struct {
	// ID names the run; [a-zA-Z0-9_-], at most 64 bytes.
	ID string
	// Rootfs is the host directory mounted read-only as the jail's /.
	Rootfs string
	// Python is the interpreter's path inside Rootfs.
	Python string
	// PythonArgs go between the interpreter and the script path.
	PythonArgs []string
	// Script is the program's source; the jail's init writes it to
	// ScriptName in layout.Work.
	Script     []byte
	ScriptName string
	// Args are the program's sys.argv[1:].
	Args []string
	// Env is added to the jail's own environment; callers have already
	// refused reserved names.
	Env map[string]string
	// Stdin is the program's standard input; nil means /dev/null.
	Stdin []byte
	// Mounts are extra bind mounts, read-only unless marked Writable.
	Mounts []Mount
	Limits Limits
	// Egress, when set, is the network the jail may reach: the jail's
	// namespace keeps only its loopback, and Egress gets a socket
	// listening there when the program is handed over (see Egress). It is
	// no part of the jail's shape: a prestarted jail serves a run with or
	// without it.
	Egress Egress
	// egressEnv is what Egress said the program's environment needs.
	egressEnv map[string]string
	// Runner, when set, carries the program out through the runner (package
	// runner): an interpreter the jail's init starts with the jail, which
	// gets the program over its own channel and reports values, exceptions
	// and rich output. Nil starts Python on the script at launch (build
	// jails, which need none of that).
	Runner *RunnerSpec
	// Files are placed under /work by the runner before the program runs
	// (a session's, before it is ready); not part of the jail's shape.
	// Only with a Runner.
	Files []InputFile
	// OpenWork opens the jail's /work at the hand-over, before any of the
	// program's code runs, for the caller to read what the program left:
	// Outcome.Work of a run, Session.Work of a session.
	OpenWork bool
	// Preload names modules (runner.ValidModule) that the runner of a
	// jail built ahead of its run (a Pool's) imports before it says it is
	// ready, so that the run finds them imported. A jail built for its
	// run does not preload: its program is waiting already, and the
	// imports would only delay it. Part of the jail's shape; only with a
	// Runner.
	Preload []string
}

// RunnerSpec is what a run through the runner adds to a Spec.
type RunnerSpec struct {
	// Mode is runner.ModeScript or ModeCell (PROTOCOL.md).
	Mode string
	// Inputs are bound as the program's globals before it runs.
	Inputs map[string]json.RawMessage
	// Limits cap what the runner may send back.
	Limits runner.Limits
	// Tools, when set, relays the tool calls of the run's code; nil for
	// a run that declares no tools.
	Tools ToolRelay
}

// ErrInvalidSpec is wrapped by every Validate error.
var ErrInvalidSpec = errors.New("invalid jail spec")

// Validate checks the spec without touching the system.
func (s *Spec) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidSpec, fmt.Sprintf(format, args...))
	}
	if cgroup.ValidateID(s.ID) != nil {
		return bad("id %q must be 1-64 of [a-zA-Z0-9_-]", s.ID)
	}
	if !path.IsAbs(s.Rootfs) {
		return bad("rootfs %q is not an absolute path", s.Rootfs)
	}
	if !path.IsAbs(s.Python) {
		return bad("python %q is not an absolute path", s.Python)
	}
	if s.ScriptName == "" || strings.ContainsAny(s.ScriptName, "/\x00") || strings.HasPrefix(s.ScriptName, ".") {
		return bad("script name %q is not a plain file name", s.ScriptName)
	}
	if s.Runner != nil {
		if err := s.Runner.Limits.Validate(); err != nil {
			return bad("%v", err)
		}
	}
	if len(s.Files) > 0 && s.Runner == nil {
		return bad("input files need the runner")
	}
	for _, f := range s.Files {
		if !validFilePath(f.Path) {
			return bad("input file path %.140q is not a path under /work", f.Path)
		}
	}
	if len(s.Preload) > 0 && s.Runner == nil {
		return bad("preload needs the runner")
	}
	if len(s.Preload) > runner.MaxPreload {
		return bad("%d modules to preload; the most is %d", len(s.Preload), runner.MaxPreload)
	}
	for _, m := range s.Preload {
		if !runner.ValidModule(m) {
			return bad("preload %.140q is not a module name", m)
		}
	}
	for _, m := range s.Mounts {
		if !path.IsAbs(m.Source) || !path.IsAbs(m.Destination) || path.Clean(m.Destination) != m.Destination || m.Destination == "/" {
			return bad("mount %q -> %q needs clean absolute paths", m.Source, m.Destination)
		}
	}
	l := s.Limits
	switch {
	case l.Timeout <= 0:
		return bad("timeout must be positive")
	case l.MemoryBytes <= 0:
		return bad("memory limit must be positive")
	case l.Pids <= 0:
		return bad("pids limit must be positive")
	case l.CPUs <= 0:
		return bad("cpu limit must be positive")
	case l.OutputBytes <= 0:
		return bad("output limit must be positive")
	case l.TmpBytes <= 0:
		return bad("tmp size must be positive")
	case l.OpenFiles == 0:
		return bad("open files limit must be positive")
	}
	return nil
}

// threads is the thread count to suggest to numeric libraries for a CPU
// quota: the quota rounded up, at least 1.
func threads(cpus float64) int {
	n := int(cpus)
	if float64(n) < cpus {
		n++
	}
	if n < 1 {
		n = 1
	}
	return n
}

// environ is the program's whole environment: the jail's own variables,
// then the caller's, then the proxy's (which a caller cannot point
// elsewhere), sorted for reproducibility.
func (s *Spec) environ() []string {
	n := fmt.Sprint(threads(s.Limits.CPUs))
	base := map[string]string{
		"PATH":                    "/usr/local/bin:/usr/bin:/bin",
		"HOME":                    layout.Work,
		"USER":                    layout.User,
		"LOGNAME":                 layout.User,
		"LANG":                    "C.UTF-8",
		"TMPDIR":                  layout.Tmp,
		"PYTHONDONTWRITEBYTECODE": "1",
		"PYTHONUNBUFFERED":        "1",
		// import cellblock, in the program and every Python it starts
		// (the runner's directory is mounted in every jail).
		"PYTHONPATH": layout.RunnerDir,
		// Thread pools sized to the CPU quota, not the host's cores.
		"OMP_NUM_THREADS":        n,
		"OPENBLAS_NUM_THREADS":   n,
		"MKL_NUM_THREADS":        n,
		"NUMEXPR_NUM_THREADS":    n,
		"NUMEXPR_MAX_THREADS":    n,
		"VECLIB_MAXIMUM_THREADS": n,
		"BLIS_NUM_THREADS":       n,
		"RAYON_NUM_THREADS":      n,
		"GOMAXPROCS":             n,
	}
	for k, v := range s.Env {
		base[k] = v
	}
	for k, v := range s.egressEnv {
		base[k] = v
	}
	env := make([]string, 0, len(base))
	for k, v := range base {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	return env
}

// launch is the message that starts the program in a jail: the script,
// the interpreter's command line and the whole environment; only the
// standard input through the runner, which gets the rest (runMessage).
func (s *Spec) launch() *jailinit.Launch {
	if s.Runner != nil {
		return &jailinit.Launch{Stdin: s.Stdin}
	}
	name := s.ScriptName
	if name == "-c" || name == "-" {
		name = "main.py" // without the runner, a file all the same
	}
	script := path.Join(layout.Work, name)
	argv := append([]string{s.Python}, s.PythonArgs...)
	argv = append(argv, script)
	argv = append(argv, s.Args...)
	return &jailinit.Launch{ScriptPath: script, Script: s.Script, Argv: argv, Env: s.environ(), Stdin: s.Stdin}
}

// runMessage is the program as the runner gets it.
func (s *Spec) runMessage() runner.Run {
	env := make(map[string]string)
	for _, kv := range s.environ() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	m := runner.Run{
		Mode:      s.Runner.Mode,
		Code:      string(s.Script),
		Argv0:     s.argv0(),
		Argv:      s.Args,
		Env:       env,
		Inputs:    s.Runner.Inputs,
		Limits:    s.Runner.Limits,
		StdinNull: s.Stdin == nil,
	}
	if s.Runner.Tools != nil {
		tools, limits := s.Runner.Tools.Declared()
		m.Tools, m.ToolLimits = tools, &limits
	}
	return m
}

// argv0 is what python is given for the program: the script's path in
// the working directory, or "-c" or "-" for code given those ways.
func (s *Spec) argv0() string {
	if s.ScriptName == "-c" || s.ScriptName == "-" {
		return s.ScriptName
	}
	return path.Join(layout.Work, s.ScriptName)
}

// initArgs is the jail's init's command line: in a runner jail, the
// runner's, which the init starts with the jail.
func (s *Spec) initArgs() []string {
	if s.Runner == nil {
		return []string{layout.Init}
	}
	return []string{layout.Init, jailinit.RunnerFlag, s.Python, layout.RunnerScript}
}

// Shape names what sameJail compares: two specs with the same Shape can
// use each other's jails. It is a key for pools, not for display.
func (s *Spec) Shape() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rootfs=%q tmp=%d nofile=%d", s.Rootfs, s.Limits.TmpBytes, s.Limits.OpenFiles)
	if s.Runner != nil {
		fmt.Fprintf(&b, " runner=%q", s.Python)
	}
	for _, m := range s.Mounts {
		fmt.Fprintf(&b, " mount=%q:%q:%t", m.Source, m.Destination, m.Writable)
	}
	if len(s.Preload) > 0 {
		fmt.Fprintf(&b, " preload=%q", strings.Join(s.Preload, ","))
	}
	return b.String()
}

// sameJail reports whether a jail built for s can carry out o: everything
// fixed when a jail starts (its root, mounts, tmpfs sizes, rlimits and
// the modules its runner preloads) must be equal. The program, its environment and the cgroup
// limits are given when the jail is launched.
func (s *Spec) sameJail(o *Spec) bool {
	return s.Rootfs == o.Rootfs &&
		slices.Equal(s.Mounts, o.Mounts) &&
		s.Limits.TmpBytes == o.Limits.TmpBytes &&
		s.Limits.OpenFiles == o.Limits.OpenFiles &&
		(s.Runner == nil) == (o.Runner == nil) &&
		(s.Runner == nil || s.Python == o.Python) &&
		slices.Equal(s.Preload, o.Preload)
}

// cgroupLimits are the limits of the run's cgroup.
func (l Limits) cgroupLimits() cgroup.Limits {
	return cgroup.Limits{MemoryBytes: l.MemoryBytes, Pids: l.Pids, CPUs: l.CPUs}
}
