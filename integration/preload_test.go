package integration

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/cellblock/cellblock/internal/api"
)

// preloadProbe reports, from its first line, whether cbmod was imported
// before the code ran; then what cbmod saw of the environment when it was
// imported, and what importing cbbroken does.
const preloadProbe = `import sys
first = 'cbmod' in sys.modules
import os, time, cbmod
print('preloaded' if first else 'not preloaded', cbmod.SEEN, os.environ.get('CB_PRELOAD_PROBE'))
try:
    import cbbroken
except RuntimeError as e:
    print('cbbroken:', e)
`

// TestPreloadedImports: an environment built with a preload list gets a
// prestarted jail whose runner has imported the modules before the run
// came (the code finds them in sys.modules at its first line, imported
// under the jail's environment, with nothing they printed in the run's
// output); a module that fails to import breaks nothing, and the run's
// own import of it fails as ever. Controls: a jail built for its request
// of the same environment, and a prestarted jail of an environment with
// no preload list, have not imported it. A new list makes a new pool.
func TestPreloadedImports(t *testing.T) {
	d, _ := depsDaemon(t, false, "--prestart", "1", "--prestart-shapes", "4", "--prestart-idle", "10m")
	waitPrestarted(t, d)
	ctx := context.Background()
	shapesReady := func(n int) bool {
		info, err := d.Client.Info(ctx)
		return err == nil && info.PrestartShapesReady == n
	}
	deps := []string{"cbmod", "cbbroken"}

	out, errs, code := cli(t, d, "", "env", "build", "--with", "cbmod", "--with", "cbbroken", "--preload", "cbmod,cbbroken")
	if code != 0 || !strings.Contains(errs, "preload cbmod, cbbroken") {
		t.Fatalf("env build --preload: exit %d stdout %q stderr %q", code, out, errs)
	}
	envID := strings.TrimSpace(out)
	out, _, _ = cli(t, d, "", "env", "ls", "--json")
	var list api.EnvList
	mustJSON(t, out, &list)
	if len(list.Envs) != 1 || list.Envs[0].ID != envID || !slices.Equal(list.Envs[0].Preload, []string{"cbmod", "cbbroken"}) {
		t.Fatalf("env ls: %+v", list.Envs)
	}
	// The build prestarts a jail of the environment's shape: the first
	// run already finds it.
	if !waitFor(60*time.Second, func() bool { return shapesReady(1) }) {
		t.Fatalf("no prestarted jail for the preloading environment:\n%s", d.Log())
	}
	probe := func(req *api.RunRequest, prestarted bool, want string) *api.Result {
		t.Helper()
		res := runOK(t, d, req)
		if res.Phases == nil || res.Phases.Prestarted != prestarted || res.Stdout != want || res.Stderr != "" {
			t.Fatalf("prestarted %v (want %v), stdout %q (want %q), stderr %q",
				res.Phases != nil && res.Phases.Prestarted, prestarted, res.Stdout, want, res.Stderr)
		}
		return res
	}
	const broken = "cbbroken: cbbroken cannot be imported\n"
	res := probe(&api.RunRequest{Code: preloadProbe, Dependencies: deps, Env: map[string]string{"CB_PRELOAD_PROBE": "request"}},
		true, "preloaded None request\n"+broken)
	if res.Environment == nil || res.Environment.ID != envID {
		t.Errorf("the run used environment %+v, want %s", res.Environment, envID)
	}
	if preloadWarnings(d) == 0 || !strings.Contains(d.Log(), "cbbroken") {
		t.Errorf("the failed preload of cbbroken is not in the daemon's log:\n%s", d.Log())
	}

	// Control: the same environment in a jail built for its request (its
	// shape's first run, another tmp size) does not preload.
	probe(&api.RunRequest{Code: preloadProbe, Dependencies: deps, TmpBytes: 32 << 20, Env: map[string]string{"CB_PRELOAD_PROBE": "request"}},
		false, "cbmod is being imported\nnot preloaded request request\n"+broken)

	// Control: a prestarted jail of an environment without a preload
	// list (cbmod alone) has not imported it.
	const plainProbe = "import sys\nfirst = 'cbmod' in sys.modules\nimport cbmod\nprint('preloaded' if first else 'not preloaded')\n"
	alone := &api.RunRequest{Code: plainProbe, Dependencies: []string{"cbmod"}}
	probe(alone, false, "cbmod is being imported\nnot preloaded\n")
	if !waitFor(60*time.Second, func() bool { return shapesReady(3) }) {
		t.Fatalf("no prestarted jails for three shapes:\n%s", d.Log())
	}
	probe(alone, true, "cbmod is being imported\nnot preloaded\n")

	// A new list replaces the old one and makes a new pool, prestarted by
	// the build: cbmod alone now, so no failure to log.
	logged := preloadWarnings(d)
	out, errs, code = cli(t, d, "", "env", "build", "--json", "--with", "cbbroken", "--with", "CBMod", "--preload", "cbmod")
	var built api.EnvBuildResult
	mustJSON(t, out, &built)
	if code != 0 || built.Environment.ID != envID || !slices.Equal(built.Preload, []string{"cbmod"}) {
		t.Fatalf("env build with a new list: exit %d %+v %s", code, built, errs)
	}
	if !waitFor(60*time.Second, func() bool { return shapesReady(4) }) {
		t.Fatalf("no prestarted jail for the new preload list:\n%s", d.Log())
	}
	probe(&api.RunRequest{Code: preloadProbe, Dependencies: deps}, true, "preloaded None None\n"+broken)
	if n := preloadWarnings(d); n != logged {
		t.Errorf("a jail preloading cbmod alone logged a failure:\n%s", d.Log())
	}

	// --no-preload clears the list: the environment's next run is of a
	// shape that has no jail yet, and the one after finds one that
	// imported nothing.
	if _, errs, code := cli(t, d, "", "env", "build", "--with", "cbmod", "--with", "cbbroken", "--no-preload"); code != 0 {
		t.Fatalf("env build --no-preload: exit %d %s", code, errs)
	}
	out, _, _ = cli(t, d, "", "env", "ls", "--json")
	var raw struct {
		Envs []map[string]json.RawMessage `json:"envs"`
	}
	mustJSON(t, out, &raw)
	for _, e := range raw.Envs {
		if string(e["id"]) == `"`+envID+`"` && string(e["preload"]) != "[]" {
			t.Errorf("env ls after --no-preload: %s", out)
		}
	}
	probe(&api.RunRequest{Code: preloadProbe, Dependencies: deps}, false, "cbmod is being imported\nnot preloaded None None\n"+broken)
	if !waitFor(60*time.Second, func() bool { return shapesReady(4) }) {
		t.Fatalf("no prestarted jail for the environment without its list:\n%s", d.Log())
	}
	probe(&api.RunRequest{Code: preloadProbe, Dependencies: deps}, true, "cbmod is being imported\nnot preloaded None None\n"+broken)
	assertNothingLeft(t, mountCount(t))
}

// preloadWarnings counts the daemon's warnings of a module that did not
// preload, in its text or JSON log.
func preloadWarnings(d *Daemon) int {
	n := 0
	for _, line := range strings.Split(d.Log(), "\n") {
		if strings.Contains(line, "did not import") && strings.Contains(line, "WARN") {
			n++
		}
	}
	return n
}

// TestMCPPreloadEnv: cellblock-mcp --preload-env REQ --preload MODS has
// the daemon build the environment with its list when it starts, names
// the prepared dependencies to the model, and run_python with exactly
// those dependencies gets a prestarted jail with the module imported.
func TestMCPPreloadEnv(t *testing.T) {
	d, _ := depsDaemon(t, false, "--prestart", "1")
	c := mcpStdioArgs(t, d.Socket, []string{"--preload-env", "cbmod", "--preload", "cbmod"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tools, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		if tool.Name == "run_python" && !strings.Contains(tool.Description, `"dependencies": ["cbmod"] (exactly these`) {
			t.Errorf("run_python's description does not name the prepared dependencies:\n%s", tool.Description)
		}
	}
	if !waitFor(60*time.Second, func() bool {
		info, err := d.Client.Info(ctx)
		return err == nil && info.PrestartShapesReady == 1
	}) {
		t.Fatalf("no prestarted jail for the --preload-env environment:\n%s", d.Log())
	}
	list, err := d.Client.Envs(ctx)
	if err != nil || len(list.Envs) != 1 || !slices.Equal(list.Envs[0].Preload, []string{"cbmod"}) {
		t.Fatalf("environments: %+v %v", list, err)
	}
	res := mcpCall(t, ctx, c, "run_python", map[string]any{
		"code":         "import sys\nfirst = 'cbmod' in sys.modules\nimport cbmod\nprint('preloaded' if first else 'not preloaded')\n",
		"dependencies": []string{"cbmod"},
	}, nil)
	var r api.Result
	mcpStructured(t, res, &r)
	if res.IsError || r.Stdout != "preloaded\n" || r.Phases == nil || !r.Phases.Prestarted {
		t.Errorf("run_python: %s\n%+v", mcpText(res), r)
	}
}
