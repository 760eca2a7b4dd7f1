package integration

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRefusesToStartWithoutSeccomp builds the daemon without libcontainer's
// seccomp support and checks that it refuses to run jails at all.
func TestRefusesToStartWithoutSeccomp(t *testing.T) {
	requireRoot(t)
	exe := filepath.Join(t.TempDir(), "cellblockd-noseccomp")
	build := exec.Command("go", "build", "-o", exe, "./cmd/cellblockd")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build without the seccomp tag: %v\n%s", err, out)
	}
	cmd := exec.Command(exe, "--socket", filepath.Join(t.TempDir(), "s.sock"), "--state-dir", t.TempDir())
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the daemon started without seccomp support:\n%s", out)
	}
	if !strings.Contains(string(out), "seccomp") {
		t.Fatalf("the refusal does not say why:\n%s", out)
	}
}
