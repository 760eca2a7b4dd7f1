package integration

import (
	"context"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
)

// Runs of other shapes than the default (dependencies, another tmp size)
// get a prestarted jail after their first run; it carries nothing of the
// run that made the daemon keep it, gives way to shapes used more lately
// and decays when unused, and a waiting jail never keeps an environment
// from being removed.
func TestPrestartedJailsForOtherShapes(t *testing.T) {
	d, _ := depsDaemon(t, false, "--prestart", "1", "--prestart-shapes", "2", "--prestart-idle", "4s")
	waitPrestarted(t, d)
	shapesReady := func(n int) bool {
		info, err := d.Client.Info(context.Background())
		return err == nil && info.PrestartShapesReady == n
	}
	info, err := d.Client.Info(context.Background())
	if err != nil || info.PrestartShapes != 2 || info.PrestartShapesReady != 0 {
		t.Fatalf("info at start: %+v %v", info, err)
	}
	mustPrestart := func(req *api.RunRequest, want bool) *api.Result {
		t.Helper()
		res := runOK(t, d, req)
		if res.Phases == nil || res.Phases.Prestarted != want {
			t.Fatalf("prestarted %v, want %v: %+v", res.Phases != nil && res.Phases.Prestarted, want, res)
		}
		return res
	}

	// Dependencies: the first run builds its jail, the next finds one.
	dep := &api.RunRequest{Code: pep723Script}
	mustPrestart(dep, false)
	if !waitFor(60*time.Second, func() bool { return shapesReady(1) }) {
		t.Fatalf("no prestarted jail for the dependency shape:\n%s", d.Log())
	}
	res := mustPrestart(dep, true)
	if res.Stdout != "alpha 42\n" || res.Environment == nil || !res.Environment.CacheHit {
		t.Fatalf("a prestarted run with dependencies: %q %+v", res.Stdout, res.Environment)
	}
	depEnv := res.Environment.ID

	// Another tmp size. The run that made the daemon keep a jail of its
	// shape had a secret in its environment; the next run's jail was
	// built without it.
	tmp8 := func(code string, env map[string]string) *api.RunRequest {
		return &api.RunRequest{Code: code, TmpBytes: 8 << 20, Env: env}
	}
	mustPrestart(tmp8("print(1)", map[string]string{"SECRET_X": "hush-hush"}), false)
	if !waitFor(60*time.Second, func() bool { return shapesReady(2) }) {
		t.Fatalf("no prestarted jails for two shapes:\n%s", d.Log())
	}
	res = mustPrestart(tmp8(`
import os
s = os.statvfs("/tmp")
print(s.f_blocks * s.f_frsize >> 20, b"hush-hush" in open("/proc/self/environ", "rb").read(), os.environ.get("SECRET_X"))
`, nil), true)
	if res.Stdout != "8 False None\n" {
		t.Errorf("a prestarted run with tmp 8 MiB: %q %q", res.Stdout, res.Stderr)
	}

	// A third shape makes room: the dependency shape, used least lately,
	// loses its jail.
	mustPrestart(&api.RunRequest{Code: "print(3)", TmpBytes: 9 << 20}, false)
	if !waitFor(60*time.Second, func() bool { return shapesReady(2) }) {
		t.Fatalf("no prestarted jails for two shapes after a third:\n%s", d.Log())
	}
	if !waitFor(10*time.Second, func() bool { return envIDs(t, d)[depEnv] == 0 }) {
		t.Errorf("the dependency shape's jail gave way but its environment is still held: %v", envIDs(t, d))
	}

	// A waiting jail does not keep its environment from removal.
	env := mustPrestart(dep, false).Environment
	if !waitFor(60*time.Second, func() bool { return envIDs(t, d)[env.ID] == 1 }) {
		t.Fatalf("the dependency shape's waiting jail does not hold its environment: %v", envIDs(t, d))
	}
	if _, err := d.Client.RemoveEnv(context.Background(), env.ID); err != nil {
		t.Errorf("remove an environment a waiting jail holds: %v", err)
	}

	// Unused, every other shape's jail goes after --prestart-idle; the
	// default shape's stays.
	if !waitFor(30*time.Second, func() bool { return shapesReady(0) }) {
		t.Errorf("other shapes' jails did not decay")
	}
	waitPrestarted(t, d)
	assertNothingLeft(t, mountCount(t))
}
