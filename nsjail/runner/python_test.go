package runner

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// pythons lists the CPythons 3.8 to 3.13 on this machine: pyenv's
// versions and /usr/bin/python3.
func pythons() []string {
	root := os.Getenv("PYENV_ROOT")
	if root == "" {
		if home, err := os.UserHomeDir(); err == nil {
			root = filepath.Join(home, ".pyenv")
		}
	}
	var out []string
	matches, _ := filepath.Glob(filepath.Join(root, "versions", "3.*", "bin", "python3"))
	for _, m := range matches {
		v := filepath.Base(filepath.Dir(filepath.Dir(m)))
		parts := strings.Split(v, ".")
		if len(parts) < 2 {
			continue
		}
		if minor, err := strconv.Atoi(parts[1]); err == nil && minor >= 8 && minor <= 13 {
			out = append(out, m)
		}
	}
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		out = append(out, "/usr/bin/python3")
	}
	return out
}

// TestPythonSuite runs py_tests/test_runner.py, test_session.py, test_tools.py and test_files.py
// (unittest) with every CPython found: the runner is started as the jail's
// init will start it, with a socketpair as its channel; script mode is
// compared with plain python, and session mode gets its runs' descriptors
// as the daemon sends them. With -short, only the first Python found.
func TestPythonSuite(t *testing.T) {
	found := pythons()
	if len(found) == 0 {
		t.Skip("no CPython 3.8-3.13 found (pyenv versions or /usr/bin/python3)")
	}
	if testing.Short() {
		found = found[:1]
	}
	dir, err := filepath.Abs("py_tests")
	if err != nil {
		t.Fatal(err)
	}
	for _, py := range found {
		name := strings.TrimPrefix(py, "/")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(py, "-B", "-m", "unittest", "test_runner", "test_session", "test_tools", "test_files")
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", py, err, out)
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			t.Logf("%s: %s", py, lines[len(lines)-1])
		})
	}
}
