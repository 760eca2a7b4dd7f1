package repotest

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/cellblock/cellblock/"

// TestLayers keeps the joins of docs/architecture.md: the packages below
// do not reach up to those above them. The in-jail runner's Go side
// depends on neither the API nor the rootfs store (what it shares with
// the API is in nsjail/runner/wire); the server knows the daemon's runs
// and sessions only through the interfaces of its Services; the session
// manager knows the runs only through its Jails.
func TestLayers(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not available")
	}
	for _, tc := range []struct {
		pkg       string
		forbidden []string
		except    []string
	}{
		{pkg: "nsjail/runner", forbidden: []string{"internal", "rootfs"}},
		{pkg: "nsjail/runner/wire", forbidden: []string{"internal", "nsjail", "rootfs", "cgroup"}},
		{pkg: "internal/api", forbidden: []string{"internal", "nsjail", "rootfs", "cgroup"}, except: []string{"nsjail/runner/wire"}},
		{pkg: "internal/server", forbidden: []string{"internal/runs", "internal/sessions", "internal/daemon", "cgroup", "rootfs"}},
		{pkg: "internal/sessions", forbidden: []string{"internal/runs", "internal/daemon"}},
		{pkg: "internal/runs", forbidden: []string{"internal/daemon"}},
	} {
		out, err := exec.Command(goCmd, "list", "-deps", module+tc.pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", tc.pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			rel, ok := strings.CutPrefix(dep, module)
			if !ok || rel == tc.pkg || slices.Contains(tc.except, rel) {
				continue
			}
			for _, f := range tc.forbidden {
				if rel == f || strings.HasPrefix(rel, f+"/") {
					t.Errorf("%s depends on %s", tc.pkg, rel)
				}
			}
		}
	}
}
