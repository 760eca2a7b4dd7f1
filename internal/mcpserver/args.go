package mcpserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/pep723"
)

// Arguments are checked here rather than by mcp-go's schema validation,
// whose messages ("/timeout_seconds: &{Got:100000/1 Want:600/1}") a model
// cannot act on. Each message names the argument, says what it must be,
// and gives an example.

// argKind describes what an argument must be, for messages.
var argKind = map[string]string{
	"code":            `a string holding the whole program, such as "print(1)"`,
	"dependencies":    `an array of requirement strings, such as ["numpy", "requests>=2"]`,
	"timeout_seconds": "a number of seconds, such as 10",
	"python":          `a version string, such as "3.12"`,
	"env":             `an object mapping names to string values, such as {"DEBUG": "1"}`,
	"memory_mb":       "a number of MiB, such as 256",
	"inputs":          `an object mapping names to JSON values, such as {"n": 3, "rows": [[1, 2], [3, 4]]}`,
	"session":         `a string naming the session, such as "analysis"`,
	"network_allow":   `an array of host:port strings, such as ["api.github.com:443"]`,
	"files":           `an array of files, such as [{"path": "data.csv", "content": "a,b\n1,2\n"}]`,
}

var versionPattern = regexp.MustCompile(`^[0-9]+(\.[0-9]+){0,2}$`)

// decodeArgs reads a call's arguments into v, refusing names outside known
// and values of the wrong type.
func decodeArgs(req mcp.CallToolRequest, v any, known ...string) error {
	raw, err := json.Marshal(req.GetRawArguments())
	if err != nil {
		return fmt.Errorf("the arguments could not be read: %v", err)
	}
	if s := strings.TrimSpace(string(raw)); s == "null" || s == "" {
		raw = []byte("{}")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return fmt.Errorf(`the arguments must be a JSON object, such as {"code": "print(1)"}`)
	}
	for name := range fields {
		if !slices.Contains(known, name) {
			return fmt.Errorf("unknown argument %q: this tool takes %s", name, strings.Join(known, ", "))
		}
	}
	if err := json.Unmarshal(raw, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			name, _, _ := strings.Cut(te.Field, ".")
			return fmt.Errorf("%q must be %s, not %s", name, argKind[name], jsonKind(te.Value))
		}
		return fmt.Errorf("the arguments could not be read: %v", err)
	}
	return nil
}

// jsonKind names a JSON value kind as json.UnmarshalTypeError reports it
// ("string", "number 1.5", "bool", ...).
func jsonKind(v string) string {
	switch {
	case v == "bool":
		return "a boolean"
	case v == "array", v == "object":
		return "an " + v
	case v == "string", strings.HasPrefix(v, "number"):
		return "a " + strings.Fields(v)[0]
	}
	return v
}

// runArgs are run_python's arguments.
type runArgs struct {
	Code           string            `json:"code"`
	Dependencies   []string          `json:"dependencies"`
	TimeoutSeconds *float64          `json:"timeout_seconds"`
	Python         string            `json:"python"`
	Env            map[string]string `json:"env"`
	MemoryMB       *float64          `json:"memory_mb"`
	// Inputs keep each value's JSON as the caller wrote it, so that large
	// integers and the like reach Python unchanged.
	Inputs map[string]json.RawMessage `json:"inputs"`
	// Session names the session to run in; "" runs in a fresh jail.
	Session string `json:"session"`
	// NetworkAllow is the run's network allowlist (only on a server
	// that allows network; see network.go).
	NetworkAllow []string `json:"network_allow"`
	// Files are placed under /work before the code runs.
	Files []api.FileInput `json:"files"`
}

var runArgNames = []string{"code", "dependencies", "timeout_seconds", "python", "env", "memory_mb", "inputs", "session", "files"}

// request checks the arguments and turns them into the daemon's run
// request. With info it checks the limits too, so that the message speaks
// in the tool's units; the daemon checks them again either way.
func (a *runArgs) request(info *api.Info) (*api.RunRequest, error) {
	if strings.TrimSpace(a.Code) == "" {
		return nil, errors.New(`"code" is required: pass the whole Python program to run as a string, such as {"code": "print(1)"}`)
	}
	if len(a.Code) > api.MaxCodeBytes {
		return nil, fmt.Errorf(`"code" is %d bytes; the most the sandbox takes is %d`, len(a.Code), api.MaxCodeBytes)
	}
	python := strings.TrimSpace(a.Python)
	if python != "" && !versionPattern.MatchString(python) {
		return nil, fmt.Errorf(`"python" must be a version such as "3.12", not %q; available: %s`, a.Python, pythonsText(info))
	}
	env := a.Env
	if _, set := env["PYTHONUNBUFFERED"]; !set && len(env) < api.MaxEnv {
		// Output streams to the caller as the program writes it.
		env = make(map[string]string, len(a.Env)+1)
		for k, v := range a.Env {
			env[k] = v
		}
		env["PYTHONUNBUFFERED"] = "1"
	}
	if err := checkInputs(a.Inputs); err != nil {
		return nil, err
	}
	if a.Session != "" {
		if err := checkSessionName(a.Session); err != nil {
			return nil, err
		}
	}
	req := &api.RunRequest{
		Code:   a.Code,
		Python: python,
		Env:    env,
		// The daemon merges these with the script's PEP 723 block.
		Dependencies: pep723.Merge(nil, a.Dependencies),
		// run_python always runs a notebook cell: the value of the last
		// expression, exceptions and plots come back as data.
		Mode:   api.ModeCell,
		Inputs: a.Inputs,
		Files:  a.Files,
		// Small text files come back with their text, to embed.
		ReturnFiles: api.ReturnFilesInline,
	}
	if a.TimeoutSeconds != nil {
		s := *a.TimeoutSeconds
		if math.IsNaN(s) || math.IsInf(s, 0) || s <= 0 {
			return nil, errors.New(`"timeout_seconds" must be a positive number of seconds, such as 10`)
		}
		if info != nil && info.Maxima.TimeoutMs > 0 && s*1000 > float64(info.Maxima.TimeoutMs) {
			return nil, fmt.Errorf(`"timeout_seconds" is %g; the most this sandbox allows is %g (the default is %g)`,
				s, float64(info.Maxima.TimeoutMs)/1000, float64(info.Defaults.TimeoutMs)/1000)
		}
		req.TimeoutMs = int64(math.Ceil(min(s, 1e9) * 1000))
	}
	if a.MemoryMB != nil {
		m := *a.MemoryMB
		if math.IsNaN(m) || math.IsInf(m, 0) || m <= 0 {
			return nil, errors.New(`"memory_mb" must be a positive number of MiB, such as 256`)
		}
		if info != nil && info.Maxima.MemoryBytes > 0 && m*(1<<20) > float64(info.Maxima.MemoryBytes) {
			return nil, fmt.Errorf(`"memory_mb" is %g; the most this sandbox allows is %d (the default is %d)`,
				m, info.Maxima.MemoryBytes>>20, info.Defaults.MemoryBytes>>20)
		}
		req.MemoryBytes = int64(min(m, 1<<30) * (1 << 20))
	}
	return req, nil
}

// inputsHint says what "inputs" must be, after a refusal.
var inputsHint = fmt.Sprintf(`"inputs" maps names of Python globals to JSON values, such as {"n": 3, "rows": [[1, 2], [3, 4]]}: `+
	"each name an identifier that is not a keyword and does not start with __; at most %d names and %s of JSON in all",
	api.MaxInputs, fmtBytes(api.MaxInputsBytes))

// checkInputs applies the daemon's own rules for inputs (those of
// api.RunRequest.Validate, on a request that has nothing else to refuse)
// and words a refusal in terms of the argument.
func checkInputs(inputs map[string]json.RawMessage) error {
	if len(inputs) == 0 {
		return nil
	}
	probe := api.RunRequest{Code: "pass", Inputs: inputs}
	e := probe.Validate()
	if e == nil {
		return nil
	}
	what := e.Message
	if name, ok := strings.CutPrefix(e.Field, "inputs."); ok {
		what = fmt.Sprintf("the value of %q %s", name, e.Message)
	}
	return fmt.Errorf(`"inputs": %s. %s`, what, inputsHint)
}

// resetArgs are reset_session's arguments.
type resetArgs struct {
	Session string `json:"session"`
}

var resetArgNames = []string{"session"}

func (a *resetArgs) check() error {
	if a.Session == "" {
		return errors.New(`"session" is required: pass the name of the session to reset, as given to run_python, such as {"session": "analysis"}`)
	}
	return checkSessionName(a.Session)
}

// validateArgs are validate_python's arguments.
type validateArgs struct {
	Code   string `json:"code"`
	Python string `json:"python"`
}

var validateArgNames = []string{"code", "python"}

func (a *validateArgs) check(info *api.Info) error {
	if strings.TrimSpace(a.Code) == "" {
		return errors.New(`"code" is required: pass the Python program to check as a string, such as {"code": "print(1)"}`)
	}
	if len(a.Code) > api.MaxStdinBytes {
		return fmt.Errorf(`"code" is %d bytes; validate_python checks at most %d`, len(a.Code), api.MaxStdinBytes)
	}
	if p := strings.TrimSpace(a.Python); p != "" && !versionPattern.MatchString(p) {
		return fmt.Errorf(`"python" must be a version such as "3.12", not %q; available: %s`, a.Python, pythonsText(info))
	}
	return nil
}
