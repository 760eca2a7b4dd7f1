package mcpserver

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const mcpCommand = "github.com/cellblock/cellblock/cmd/cellblock-mcp"

// goTool finds the go command that is running the tests: go test puts the
// bin directory of its own GOROOT first in PATH.
func goTool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not available")
	}
	return p
}

// TestBinaryDependencies keeps cellblock-mcp an unprivileged, cgo-free
// client: no libcontainer, no seccomp bindings, no containerd, none of the
// daemon's own packages.
func TestBinaryDependencies(t *testing.T) {
	goCmd := goTool(t)
	cmd := exec.Command(goCmd, "list", "-deps", "-f", "{{.ImportPath}} {{if .Standard}}std{{end}} {{len .CgoFiles}}", mcpCommand)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	forbidden := []string{
		"github.com/opencontainers/",
		"github.com/seccomp/",
		"github.com/containerd/",
		"github.com/cilium/ebpf",
		"github.com/vishvananda/",
		"github.com/godbus/",
		"github.com/coreos/go-systemd",
	}
	// The only cellblock packages it may contain.
	allowed := map[string]bool{
		mcpCommand: true,
		"github.com/cellblock/cellblock/internal/api":       true,
		"github.com/cellblock/cellblock/internal/client":    true,
		"github.com/cellblock/cellblock/internal/mcpserver": true,
		"github.com/cellblock/cellblock/internal/pep723":    true,
		// What the runner's channel and the API both carry (api's
		// results alias its types).
		"github.com/cellblock/cellblock/nsjail/runner/wire": true,
		// The daemon's checks of input schemas, to declare only those
		// it takes.
		"github.com/cellblock/cellblock/internal/toolschema": true,
		// The socket access check of --http unix:PATH (x/sys and os/user).
		"github.com/cellblock/cellblock/internal/peercred": true,
	}
	n := 0
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		n++
		pkg := fields[0]
		std := len(fields) == 3 && fields[1] == "std"
		cgoFiles := fields[len(fields)-1]
		for _, f := range forbidden {
			if strings.HasPrefix(pkg, f) {
				t.Errorf("cellblock-mcp depends on %s", pkg)
			}
		}
		if strings.HasPrefix(pkg, "github.com/cellblock/cellblock/") || pkg == "github.com/cellblock/cellblock" {
			if !allowed[pkg] {
				t.Errorf("cellblock-mcp depends on %s, which is not one of the client-side packages", pkg)
			}
		}
		// The standard library's net and os/user have optional cgo
		// parts; anything else with cgo files is out.
		if !std && cgoFiles != "0" {
			t.Errorf("cellblock-mcp depends on %s, which uses cgo", pkg)
		}
	}
	if n < 10 {
		t.Fatalf("go list printed only %d packages:\n%s", n, out)
	}
}

// TestBuildsWithoutCgo builds cellblock-mcp with CGO_ENABLED=0.
func TestBuildsWithoutCgo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	goCmd := goTool(t)
	bin := filepath.Join(t.TempDir(), "cellblock-mcp")
	cmd := exec.Command(goCmd, "build", "-o", bin, mcpCommand)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "cellblock-mcp ") {
		t.Fatalf("cellblock-mcp --version = %q, %v", out, err)
	}
}
