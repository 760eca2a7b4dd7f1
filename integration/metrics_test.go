package integration

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
)

// unixHTTP is an HTTP client for a daemon's socket that keeps no idle
// connections, so that it leaves nothing open in the daemon between calls.
func unixHTTP(socket string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		},
		DisableKeepAlives: true,
	}}
}

// scrapeMetrics reads GET /metrics from the daemon: each sample's name with
// its labels, as printed, mapped to its value.
func scrapeMetrics(t *testing.T, socket string) map[string]float64 {
	t.Helper()
	resp, err := unixHTTP(socket).Get("http://cellblockd/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("GET /metrics: Content-Type %q, want the Prometheus text format", ct)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

func TestMetricsCountRuns(t *testing.T) {
	d := startDaemon(t, "--max-concurrent", "2")
	before := scrapeMetrics(t, d.Socket)
	for _, name := range []string{`cellblock_runs_total{outcome="ok"}`, "cellblock_runs_in_flight", "cellblock_queue_length",
		"cellblock_env_cache_hits_total", "cellblock_env_cache_misses_total", "cellblock_env_cache_builds_total",
		"cellblock_run_duration_seconds_count", "cellblock_jail_setup_seconds_count", "cellblock_runs_prestarted_total", "go_goroutines", "process_open_fds"} {
		if v, ok := before[name]; !ok || (strings.HasPrefix(name, "cellblock_") && v != 0) {
			t.Errorf("fresh daemon: %s = %v (present %v), want 0", name, v, ok)
		}
	}

	waitPrestarted(t, d)
	if got := scrapeMetrics(t, d.Socket)["cellblock_prestarted_jails_ready"]; got != 2 {
		t.Errorf("cellblock_prestarted_jails_ready = %v, want 2", got)
	}
	if res := runOK(t, d, &api.RunRequest{Code: "print(1)"}); !res.Phases.Prestarted {
		t.Errorf("the first run on a ready daemon did not get a prestarted jail: %+v", res.Phases)
	}
	runOK(t, d, &api.RunRequest{Code: "print(2)"})
	if res := run(t, d, &api.RunRequest{Code: "import sys; sys.exit(3)"}); res.ExitCode != 3 {
		t.Fatalf("exit %d", res.ExitCode)
	}
	if res := run(t, d, &api.RunRequest{Code: "import time; time.sleep(30)", TimeoutMs: 300}); !res.TimedOut {
		t.Fatalf("not timed out: %+v", res)
	}
	if res := run(t, d, &api.RunRequest{Code: "x = bytearray(1 << 30)", MemoryBytes: 64 << 20}); !res.OOMKilled {
		t.Fatalf("not oom-killed: %+v", res)
	}
	if res := run(t, d, &api.RunRequest{Code: "x", MemoryBytes: 1 << 50}); res.Error == nil || res.Error.Type != api.ErrOverLimit {
		t.Fatalf("not refused: %+v", res)
	}

	// A run in flight shows while it runs.
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.Client.Run(context.Background(), &api.RunRequest{Code: "import time; time.sleep(2)"})
	}()
	if !waitFor(10*time.Second, func() bool { return scrapeMetrics(t, d.Socket)["cellblock_runs_in_flight"] == 1 }) {
		t.Errorf("cellblock_runs_in_flight never showed the sleeping run")
	}
	<-done

	m := scrapeMetrics(t, d.Socket)
	for name, want := range map[string]float64{
		`cellblock_runs_total{outcome="ok"}`:           3,
		`cellblock_runs_total{outcome="exit_nonzero"}`: 1,
		`cellblock_runs_total{outcome="timeout"}`:      1,
		`cellblock_runs_total{outcome="oom"}`:          1,
		`cellblock_runs_total{outcome="refused"}`:      1,
		`cellblock_runs_total{outcome="error"}`:        0,
		"cellblock_run_duration_seconds_count":         6,
		"cellblock_jail_setup_seconds_count":           6,
		"cellblock_runs_in_flight":                     0,
		"cellblock_queue_length":                       0,
	} {
		if m[name] != want {
			t.Errorf("%s = %v, want %v", name, m[name], want)
		}
	}
	if n := m["cellblock_runs_prestarted_total"]; n < 1 || n > 6 {
		t.Errorf("cellblock_runs_prestarted_total = %v, want between 1 and the 6 runs", n)
	}
	if s := m["cellblock_jail_setup_seconds_sum"]; s <= 0 || s > 60 {
		t.Errorf("cellblock_jail_setup_seconds_sum = %v", s)
	}
	if s := m["cellblock_run_duration_seconds_sum"]; s < 2.3 {
		t.Errorf("cellblock_run_duration_seconds_sum = %v; the runs slept 2.3 s", s)
	}

	// The same over curl, as an operator would read it.
	if curl, err := exec.LookPath("curl"); err == nil {
		out, err := exec.Command(curl, "-sf", "--unix-socket", d.Socket, "http://cellblockd/metrics").Output()
		if err != nil || !strings.Contains(string(out), `cellblock_runs_total{outcome="ok"} 3`) {
			t.Errorf("curl --unix-socket .../metrics: %v\n%s", err, out)
		}
	} else {
		if os.Getenv("CI") != "" {
			t.Errorf("curl is not installed: .ci/run must install it to check /metrics as an operator reads it")
		} else {
			t.Log("curl is not installed; read /metrics with Go's client only")
		}
	}
}
