package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/peercred"
	"github.com/cellblock/cellblock/internal/record"
)

func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("status %d", rec.Code)
	}
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

func TestObserve(t *testing.T) {
	m := New("v-test")
	m.SetLoad(func() (int, int) { return 3, 7 })
	ran := func(res *api.Result) record.Run {
		res.RunID = "r1"
		return record.Run{Result: res, Duration: 300 * time.Millisecond}
	}
	for _, rec := range []record.Run{
		ran(&api.Result{Phases: &api.Phases{CreateUs: 20_000, StartUs: 30_000}}),
		ran(&api.Result{ExitCode: 137, TimedOut: true}),
		ran(&api.Result{ExitCode: 137, OOMKilled: true}),
		ran(&api.Result{Environment: &api.Environment{ID: "e1", CacheHit: true}}),
		ran(&api.Result{Environment: &api.Environment{ID: "e2"}}),
		ran(&api.Result{Error: &api.Error{Type: api.ErrDependency}}),
		{Result: &api.Result{Error: &api.Error{Type: api.ErrBusy}}},
		{Result: &api.Result{Error: &api.Error{Type: api.ErrOverLimit}}},
	} {
		m.Observe(rec)
	}
	m.NetworkDenial(api.DenyNotAllowed)
	m.NetworkDenial(api.DenyNotAllowed)
	m.NetworkDenial("an unbounded label")
	out := scrape(t, m)
	if strings.Contains(out, "unbounded") {
		t.Errorf("a reason outside the closed set became a label")
	}
	for _, want := range []string{
		`cellblock_network_denials_total{reason="not_allowed"} 2`,
		`cellblock_network_denials_total{reason="byte_limit"} 0`,
		`cellblock_runs_total{outcome="ok"} 3`,
		`cellblock_runs_total{outcome="timeout"} 1`,
		`cellblock_runs_total{outcome="oom"} 1`,
		`cellblock_runs_total{outcome="dependency_error"} 1`,
		`cellblock_runs_total{outcome="busy"} 1`,
		`cellblock_runs_total{outcome="refused"} 1`,
		`cellblock_runs_total{outcome="error"} 0`,
		`cellblock_run_duration_seconds_count 6`,
		`cellblock_jail_setup_seconds_count 1`,
		`cellblock_jail_setup_seconds_sum 0.05`,
		`cellblock_env_cache_hits_total 1`,
		`cellblock_env_cache_misses_total 2`,
		`cellblock_env_cache_builds_total 1`,
		`cellblock_runs_in_flight 3`,
		`cellblock_queue_length 7`,
		`cellblock_build_info{version="v-test"} 1`,
		`go_goroutines `,
		`process_open_fds `,
	} {
		if !strings.Contains(out, want+"\n") && !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}

func TestLoadUnset(t *testing.T) {
	out := scrape(t, New("x"))
	if !strings.Contains(out, "cellblock_runs_in_flight 0\n") || !strings.Contains(out, "cellblock_queue_length 0\n") {
		t.Errorf("gauges without a server:\n%s", out)
	}
}

// The secrets' series are root's: their names are the operator's secrets
// and their counts other users' uses of them, which info shows to root
// alone. Other callers get every other series.
func TestSecretSeriesForRootOnly(t *testing.T) {
	m := New("test")
	m.DeclareSecrets([]string{"PROD_DB_TOKEN"})
	m.SecretUse("PROD_DB_TOKEN", api.SecretInjected)
	for uid, want := range map[uint32]bool{0: true, 1000: false} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/metrics", nil)
		req = req.WithContext(peercred.NewContext(req.Context(), peercred.Peer{UID: uid}))
		m.Handler().ServeHTTP(rec, req)
		body := rec.Body.String()
		if shown := strings.Contains(body, "PROD_DB_TOKEN"); rec.Code != 200 || shown != want || !strings.Contains(body, "cellblock_runs_total") {
			t.Errorf("uid %d: %d, the secret's series shown %v, want %v", uid, rec.Code, shown, want)
		}
	}
}
