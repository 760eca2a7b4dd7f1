package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cellblock/cellblock/internal/api"
)

// cli runs bin/cellblock against d and returns stdout, stderr and the exit
// code.
func cli(t *testing.T, d *Daemon, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin(t, "cellblock"), args...)
	cmd.Env = append(os.Environ(), api.SocketEnv+"="+d.Socket)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

func TestCLI(t *testing.T) {
	d := daemon(t)
	script := filepath.Join(t.TempDir(), "greet.py")
	if err := os.WriteFile(script, []byte("import sys\nprint('hi', *sys.argv[1:])\nprint('warn', file=sys.stderr)\nsys.exit(4)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name       string
		stdin      string
		args       []string
		out, errs  string
		code       int
		errContain string
	}{
		{name: "file", args: []string{"run", script, "a", "b"}, out: "hi a b\n", errs: "warn\n", code: 4},
		{name: "-c", args: []string{"run", "-c", "print(6*7)"}, out: "42\n", code: 0},
		{name: "stdin", stdin: "print('from stdin')", args: []string{"run", "-"}, out: "from stdin\n", code: 0},
		{name: "timeout", args: []string{"run", "--timeout", "1s", "-c", "while True: pass"}, code: 124, errContain: "timed out"},
		{name: "oom", args: []string{"run", "--memory", "64M", "-c", "x = bytearray(1 << 30)"}, code: 137, errContain: "memory"},
		{name: "env", args: []string{"run", "--env", "A=b", "-c", "import os; print(os.environ['A'])"}, out: "b\n", code: 0},
		{name: "bad python", args: []string{"run", "--python", "3.99", "-c", "print(1)"}, code: 125, errContain: "unknown_python"},
		{name: "over limit", args: []string{"run", "--timeout", "10h", "-c", "print(1)"}, code: 125, errContain: "timeout_ms"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, errs, code := cli(t, d, c.stdin, c.args...)
			if code != c.code || (c.out != "" && out != c.out) || (c.errs != "" && errs != c.errs) || !strings.Contains(errs, c.errContain) {
				t.Errorf("exit %d stdout %q stderr %q; want exit %d stdout %q stderr %q (containing %q)", code, out, errs, c.code, c.out, c.errs, c.errContain)
			}
		})
	}
}

func TestCLIJSON(t *testing.T) {
	d := daemon(t)
	out, _, code := cli(t, d, "", "run", "--json", "--timeout", "1s", "-c", "import sys; print('x'); sys.exit(3)")
	if code != 0 {
		t.Fatalf("--json exit %d", code)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("not one JSON object: %q", out)
	}
	for _, f := range []string{"exit_code", "stdout", "stderr", "stdout_truncated", "stderr_truncated", "timed_out", "oom_killed", "duration_ms", "cpu_ms", "memory_peak_bytes", "error"} {
		if _, ok := res[f]; !ok {
			t.Errorf("result lacks %s: %s", f, out)
		}
	}
	if res["exit_code"].(float64) != 3 || res["stdout"] != "x\n" || res["error"] != nil {
		t.Errorf("result %s", out)
	}
	out, _, code = cli(t, d, "", "info", "--json")
	var info api.Info
	if code != 0 || json.Unmarshal([]byte(out), &info) != nil || len(info.Pythons) == 0 {
		t.Errorf("info --json: exit %d %q", code, out)
	}
}
