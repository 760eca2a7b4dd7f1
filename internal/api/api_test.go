package api

import (
	"math"
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
