package integration

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// pyclientDir is the Python client's source tree.
var pyclientDir = filepath.Join(repoRoot, "clients", "python")

// TestPythonClient runs the Python client's own suite (clients/python/tests,
// the standard library's unittest) against the shared daemon, with the
// machine's python3 and, when there is one, Python 3.9, the oldest the
// client supports. A test that cannot reach the daemon fails here rather
// than skip (CELLBLOCK_TEST_REQUIRE_DAEMON).
func TestPythonClient(t *testing.T) {
	d := daemon(t)
	pythons := map[string]string{}
	if p, err := exec.LookPath("python3"); err == nil {
		pythons["python3"] = p
	} else {
		t.Fatalf("python3 is missing: %v", err)
	}
	if p := python39(); p != "" {
		pythons["python3.9"] = p
	}
	names := make([]string, 0, len(pythons))
	for name := range pythons {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		python := pythons[name]
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, python, "-m", "unittest", "discover", "-s", "tests", "-v")
			cmd.Dir = pyclientDir
			cmd.Env = append(os.Environ(), "CELLBLOCK_SOCKET="+d.Socket, "CELLBLOCK_TEST_REQUIRE_DAEMON=1",
				"PYTHONDONTWRITEBYTECODE=1", "PYTHONPATH=")
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			summary := lastLines(out.String(), 3)
			if err != nil {
				t.Fatalf("%s -m unittest (in %s): %v\n%s\ndaemon log:\n%s", python, pyclientDir, err, out.String(),
					lastLines(d.Log(), 40))
			}
			if !strings.Contains(summary, "OK") {
				t.Fatalf("the suite did not report OK:\n%s", out.String())
			}
			t.Logf("%s: %s", python, strings.Join(strings.Fields(summary), " "))
		})
	}
}

// python39 finds a Python 3.9 that runs (pyenv's, or one on PATH), or "".
func python39() string {
	candidates, _ := filepath.Glob("/root/.pyenv/versions/3.9*/bin/python3.9")
	sort.Sort(sort.Reverse(sort.StringSlice(candidates)))
	if p, err := exec.LookPath("python3.9"); err == nil {
		candidates = append(candidates, p)
	}
	for _, p := range candidates {
		if exec.Command(p, "-c", "import sys; assert sys.version_info[:2] == (3, 9)").Run() == nil {
			return p
		}
	}
	return ""
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
