package api

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
)

func TestValidUTF8(t *testing.T) {
	for in, want := range map[string]string{
		"plain":              "plain",
		"ok \xff\xfe end":    "ok \uFFFD\uFFFD end",
		"héllo ✓":            "héllo ✓",
		"\xc3":               "\uFFFD",
		"cut \xe6\x97":       "cut \uFFFD\uFFFD",
		"\xe6\x97\xa5 whole": "日 whole",
	} {
		if got := ValidUTF8([]byte(in)); got != want {
			t.Errorf("ValidUTF8(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestValidateNamesTheField(t *testing.T) {
	for _, c := range []struct {
		req   RunRequest
		field string
		typ   ErrorType
	}{
		{RunRequest{}, "code", ErrBadRequest},
		{RunRequest{Code: "x\x00"}, "code", ErrBadRequest},
		{RunRequest{Code: "x", Filename: "../x.py"}, "filename", ErrBadRequest},
		{RunRequest{Code: "x", Filename: ".hidden.py"}, "filename", ErrBadRequest},
		{RunRequest{Code: "x", Python: "3.x"}, "python", ErrBadRequest},
		{RunRequest{Code: "x", Env: map[string]string{"PATH": "/x"}}, "env", ErrBadRequest},
		{RunRequest{Code: "x", Env: map[string]string{"LD_DEBUG": "all"}}, "env", ErrBadRequest},
		{RunRequest{Code: "x", Env: map[string]string{"1X": "y"}}, "env", ErrBadRequest},
		{RunRequest{Code: "x", Dependencies: []string{""}}, "dependencies[0]", ErrBadRequest},
		{RunRequest{Code: "x", Args: []string{"ok", "a\x00"}}, "args[1]", ErrBadRequest},
		{RunRequest{Code: "x", TimeoutMs: -5}, "timeout_ms", ErrBadRequest},
		{RunRequest{Code: "x", CPUs: math.NaN()}, "cpus", ErrBadRequest},
		{RunRequest{Code: string(make([]byte, MaxCodeBytes+1))}, "code", ErrTooLarge},
	} {
		err := c.req.Validate()
		if err == nil || err.Field != c.field || err.Type != c.typ {
			t.Errorf("%+v: got %v, want %s on %q", c.req.Env, err, c.typ, c.field)
		}
	}
	ok := RunRequest{Code: "print(1)", Filename: "tool.py", Python: "3.12", Env: map[string]string{"A_B": "c"}, Dependencies: []string{"requests>=2"}}
	if err := ok.Validate(); err != nil {
		t.Errorf("valid request refused: %v", err)
	}
}

func TestResolve(t *testing.T) {
	def := Limits{TimeoutMs: 1000, MemoryBytes: 64 << 20, Pids: 16, CPUs: 1, OutputBytes: 1024, TmpBytes: 1 << 20}
	max := Limits{TimeoutMs: 5000, MemoryBytes: 128 << 20, Pids: 64, CPUs: 2, OutputBytes: 4096, TmpBytes: 8 << 20}
	got, err := (&RunRequest{Code: "x"}).Resolve(def, max)
	if err != nil || got != def {
		t.Fatalf("defaults: %+v %v", got, err)
	}
	got, err = (&RunRequest{Code: "x", TimeoutMs: 5000, Pids: 64, CPUs: 0.5}).Resolve(def, max)
	if err != nil || got.TimeoutMs != 5000 || got.Pids != 64 || got.CPUs != 0.5 {
		t.Fatalf("asked limits: %+v %v", got, err)
	}
	for _, c := range []struct {
		req   RunRequest
		field string
		typ   ErrorType
	}{
		{RunRequest{TimeoutMs: 5001}, "timeout_ms", ErrOverLimit},
		{RunRequest{MemoryBytes: 129 << 20}, "memory_bytes", ErrOverLimit},
		{RunRequest{Pids: 65}, "pids", ErrOverLimit},
		{RunRequest{CPUs: 2.5}, "cpus", ErrOverLimit},
		{RunRequest{OutputBytes: 4097}, "output_bytes", ErrOverLimit},
		{RunRequest{TmpBytes: 9 << 20}, "tmp_bytes", ErrOverLimit},
		{RunRequest{MemoryBytes: 1 << 20}, "memory_bytes", ErrBadRequest},
		{RunRequest{Pids: -1}, "pids", ErrBadRequest},
	} {
		_, err := c.req.Resolve(def, max)
		if err == nil || err.Field != c.field || err.Type != c.typ {
			t.Errorf("%+v: got %v, want %s on %s", c.req, err, c.typ, c.field)
		}
	}
}

func TestValidateModeAndInputs(t *testing.T) {
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	for _, c := range []struct {
		name   string
		req    RunRequest
		field  string // "" for valid
		errTyp ErrorType
	}{
		{"script", RunRequest{Code: "x", Mode: ModeScript}, "", ""},
		{"cell with inputs", RunRequest{Code: "x", Mode: ModeCell, Inputs: map[string]json.RawMessage{"n": raw("3"), "df_rows": raw(`[{"a": 1}]`)}}, "", ""},
		{"bad mode", RunRequest{Code: "x", Mode: "repl"}, "mode", ErrBadRequest},
		{"keyword", RunRequest{Code: "x", Inputs: map[string]json.RawMessage{"class": raw("1")}}, "inputs", ErrBadRequest},
		{"dunder", RunRequest{Code: "x", Inputs: map[string]json.RawMessage{"__builtins__": raw("1")}}, "inputs", ErrBadRequest},
		{"not an identifier", RunRequest{Code: "x", Inputs: map[string]json.RawMessage{"a-b": raw("1")}}, "inputs", ErrBadRequest},
		{"not JSON", RunRequest{Code: "x", Inputs: map[string]json.RawMessage{"a": raw("{")}}, "inputs.a", ErrBadRequest},
		{"too deep", RunRequest{Code: "x", Inputs: map[string]json.RawMessage{"a": raw(strings.Repeat("[", 65) + strings.Repeat("]", 65))}}, "inputs.a", ErrBadRequest},
		{"too large", RunRequest{Code: "x", Inputs: map[string]json.RawMessage{"a": raw(`"` + strings.Repeat("x", MaxInputsBytes) + `"`)}}, "inputs", ErrTooLarge},
		{"runner's variable", RunRequest{Code: "x", Env: map[string]string{"CELLBLOCK_RUNNER_FD": "9"}}, "env", ErrBadRequest},
	} {
		err := c.req.Validate()
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.field != "" && (err == nil || err.Field != c.field || err.Type != c.errTyp):
			t.Errorf("%s: %v, want %s on %s", c.name, err, c.errTyp, c.field)
		}
	}
	many := map[string]json.RawMessage{}
	for i := range MaxInputs + 1 {
		many[fmt.Sprintf("v%d", i)] = raw("1")
	}
	if err := (&RunRequest{Code: "x", Inputs: many}).Validate(); err == nil || err.Field != "inputs" {
		t.Errorf("too many inputs: %v", err)
	}
}

func TestPythonList(t *testing.T) {
	got := PythonList([]Python{{ID: "cpython-3.11.7", Version: "3.11.7", Default: true}, {ID: "cpython-3.12.1", Version: "3.12.1"}, {ID: "odd"}})
	if want := "3.11.7 (default), 3.12.1, odd"; got != want {
		t.Errorf("PythonList = %q, want %q", got, want)
	}
	if got := PythonList(nil); got != "" {
		t.Errorf("PythonList(nil) = %q", got)
	}
}

// A request's secrets: names, no repeats, not also in env, and not in a
// run of a session (the session's are fixed).
func TestValidateSecrets(t *testing.T) {
	ok := &RunRequest{Code: "1", Secrets: []string{"GITHUB_TOKEN", "OTHER_1"}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		req   *RunRequest
		field string
	}{
		{&RunRequest{Code: "1", Secrets: []string{"A", "bad-name"}}, "secrets[1]"},
		{&RunRequest{Code: "1", Secrets: []string{"A", "A"}}, "secrets[1]"},
		{&RunRequest{Code: "1", Secrets: []string{"A"}, Env: map[string]string{"A": "x"}}, "secrets[0]"},
		{&RunRequest{Code: "1", Secrets: make([]string, MaxSecrets+1)}, "secrets"},
		{&RunRequest{Code: "1", Secrets: []string{"A"}, Session: "s1"}, "secrets"},
	} {
		err := c.req.Validate()
		if err == nil || err.Type != ErrBadRequest || err.Field != c.field {
			t.Errorf("%+v: %v, want bad_request naming %s", c.req.Secrets, err, c.field)
		}
	}
	sess := &SessionRequest{Secrets: []string{"A"}}
	if err := sess.Validate(); err != nil || sess.AsRun().Secrets[0] != "A" {
		t.Errorf("session: %v", err)
	}
	for name, reserved := range map[string]bool{"GITHUB_TOKEN": false, "HTTPS_PROXY": true, "https_proxy": true, "SSL_CERT_FILE": true,
		"LD_PRELOAD": true, "PYTHONPATH": true, "PATH": true, "CELLBLOCK_X": true, "PIP_CERT": true} {
		if ReservedSecretName(name) != reserved {
			t.Errorf("ReservedSecretName(%s) = %v", name, !reserved)
		}
	}
}
