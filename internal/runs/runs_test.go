package runs

import (
	"testing"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/nsjail/runner"
)

// TestPreloadBoundsAgree: a preload list the API accepts is one the jail
// and its runner take whole.
func TestPreloadBoundsAgree(t *testing.T) {
	if api.MaxPreload != runner.MaxPreload || api.MaxModuleName != runner.MaxModuleName {
		t.Fatalf("api allows %d modules of %d bytes, the runner %d of %d",
			api.MaxPreload, api.MaxModuleName, runner.MaxPreload, runner.MaxModuleName)
	}
	for _, name := range []string{"pandas", "matplotlib.pyplot", "_x", "a.b.c", "x,y", "a-b", "1a", "", "é"} {
		if api.ValidModuleName(name) != runner.ValidModule(name) {
			t.Errorf("%q: api says %v, the runner %v", name, api.ValidModuleName(name), runner.ValidModule(name))
		}
	}
}
