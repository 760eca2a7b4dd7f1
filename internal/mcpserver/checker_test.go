package mcpserver

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckerScript runs validate_python's checker with the host's python3,
// as the sandbox runs it (the script as main.py, the code on stdin), to
// show that it reports what the front end expects and never runs the code.
func TestCheckerScript(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not on PATH")
	}
	// Skip wrappers such as pyenv's shims, which take a second a start.
	if out, err := exec.Command(python, "-c", "import sys; print(sys.executable)").Output(); err == nil {
		if exe := strings.TrimSpace(string(out)); exe != "" {
			python = exe
		}
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "main.py")
	if err := os.WriteFile(script, []byte(checkerCode(">=3.8", "")), 0o644); err != nil {
		t.Fatal(err)
	}
	sideEffect := filepath.Join(dir, "ran")

	tests := []struct {
		name      string
		code      string
		ok        bool
		errType   string
		line      int
		column    int
		msg       string
		warning   string
		errorText string
	}{
		{name: "valid", code: "import os\nprint(os.getcwd())\n", ok: true},
		{name: "valid with a future import", code: "from __future__ import annotations\ndef f(x: Undefined) -> None: ...\n", ok: true},
		{name: "empty", code: "", ok: true},
		{
			name: "side effects are not run",
			code: "open(" + pyString(sideEffect) + ", 'w').write('x')\nraise SystemExit(3)\n",
			ok:   true,
		},
		{name: "print statement", code: "x = 1\nprint 'x'\n", errType: "SyntaxError", line: 2, column: 1, errorText: "print 'x'"},
		{name: "unclosed bracket", code: "x = [1,\n", errType: "SyntaxError", line: 1},
		{name: "error on a line the checker also has", code: "\n\n\n\nimport json as\n", errType: "SyntaxError", line: 5, errorText: "import json as"},
		{name: "indentation", code: "if True:\nprint(1)\n", errType: "IndentationError", line: 2},
		{name: "return outside a function (a compiler error, not a parser one)", code: "x = 1\nreturn x\n", errType: "SyntaxError", line: 2, msg: "'return' outside function"},
		{name: "late future import", code: "x = 1\nfrom __future__ import annotations\n", errType: "SyntaxError", line: 2, msg: "__future__"},
		{name: "invalid escape is a warning", code: "import re\nr = re.compile('\\d+')\n", ok: true, warning: "invalid escape sequence"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(python, script)
			cmd.Dir = dir
			cmd.Stdin = strings.NewReader(tt.code)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("checker: %v\n%s", err, stderr.String())
			}
			var rep checkReport
			if err := json.Unmarshal(out, &rep); err != nil {
				t.Fatalf("checker printed %q: %v", out, err)
			}
			if rep.Python == "" {
				t.Error("no python version in the report")
			}
			if rep.OK != tt.ok {
				t.Fatalf("ok = %v, want %v: %+v", rep.OK, tt.ok, rep.Error)
			}
			if tt.ok {
				if rep.Error != nil {
					t.Errorf("error %+v with ok", rep.Error)
				}
			} else {
				e := rep.Error
				if e == nil {
					t.Fatal("no error in the report")
				}
				if e.Type != tt.errType || e.Line != tt.line || (tt.column > 0 && e.Column != tt.column) ||
					!strings.Contains(e.Message, tt.msg) || (tt.errorText != "" && e.Text != tt.errorText) {
					t.Errorf("error = %+v, want %s at line %d col %d containing %q", e, tt.errType, tt.line, tt.column, tt.msg)
				}
			}
			if tt.warning != "" {
				found := false
				for _, w := range rep.Warnings {
					found = found || strings.Contains(w.Message, tt.warning) && w.Line == 2
				}
				if !found {
					t.Errorf("warnings = %+v, want one containing %q on line 2", rep.Warnings, tt.warning)
				}
			}
			if _, err := os.Stat(sideEffect); err == nil {
				t.Fatal("the checked code was executed")
			}
		})
	}
}

// pyString quotes s as a Python string literal.
func pyString(s string) string {
	data, _ := json.Marshal(s)
	return string(data)
}
