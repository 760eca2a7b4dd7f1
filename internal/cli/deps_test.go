package cli

import (
	"os/exec"
	"strings"
	"testing"
)

// TestCLIDependencies keeps the cellblock command small: it starts once per
// run, and what it links it initialises before it does anything. net/http
// (with crypto/tls, x509 and their initialisers) made it 2 ms slower to
// start and talk than its own HTTP client over the socket does.
func TestCLIDependencies(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not available")
	}
	out, err := exec.Command(goCmd, "list", "-deps", "github.com/cellblock/cellblock/cmd/cellblock").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, bad := range []string{"net/http", "crypto/tls", "crypto/x509", "github.com/opencontainers/", "github.com/mark3labs/"} {
			if pkg == bad || strings.HasPrefix(pkg, bad+"/") || strings.HasSuffix(bad, "/") && strings.HasPrefix(pkg, bad) {
				t.Errorf("cmd/cellblock links %s", pkg)
			}
		}
	}
}
