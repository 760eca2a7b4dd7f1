package server

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/peercred"
	"github.com/cellblock/cellblock/internal/record"
)

// The observer hears about runs that ran and about requests refused
// before they ran; /metrics is served behind the peer check.
func TestObserverAndMetricsRoute(t *testing.T) {
	var mu sync.Mutex
	var seen []record.Run
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "cellblock_test 1\n") })
	cfg := Config{
		Observer: func(r record.Run) { mu.Lock(); seen = append(seen, r); mu.Unlock() },
		Metrics:  metrics,
		// The test's uid, root or not, may read them.
		MetricsAllowed: func(peercred.Peer) bool { return true },
	}
	c, stop := serve(t, &fakeExecutor{}, cfg)
	defer stop()
	if _, err := c.Run(context.Background(), &api.RunRequest{Code: "print(1)"}); err != nil {
		t.Fatal(err)
	}
	if res, err := c.Run(context.Background(), &api.RunRequest{Code: "x", MemoryBytes: 1 << 40}); err != nil || res.Error == nil {
		t.Fatalf("over the limit: %+v %v", res, err)
	}
	mu.Lock()
	if len(seen) != 2 || record.Outcome(seen[0].Result) != record.OutcomeOK || seen[0].Result.RunID == "" ||
		record.Outcome(seen[1].Result) != record.OutcomeRefused || seen[1].Request == nil || seen[1].Request.Code != "x" {
		t.Errorf("observer saw %+v", seen)
	}
	mu.Unlock()

	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", c.Socket())
	}}}
	resp, err := hc.Get("http://cellblockd/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "cellblock_test 1") {
		t.Errorf("GET /metrics: %d %q", resp.StatusCode, body)
	}
}

func TestMetricsRouteIsGuarded(t *testing.T) {
	cfg := Config{
		Allowed: func(peercred.Peer) bool { return false },
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "secret 1\n") }),
	}
	c, stop := serve(t, &fakeExecutor{}, cfg)
	defer stop()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", c.Socket())
	}}}
	resp, err := hc.Get("http://cellblockd/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("GET /metrics by a refused peer: %d", resp.StatusCode)
	}
}

// A caller the API admits (an --allow-uid) but MetricsAllowed does not
// is refused the metrics, and still runs code; without MetricsAllowed
// only root reads them.
func TestMetricsOnlyForTheirReaders(t *testing.T) {
	me := uint32(os.Getuid())
	for _, c := range []struct {
		name    string
		allowed func(peercred.Peer) bool
		want    int
	}{
		{"refused", func(p peercred.Peer) bool { return p.UID != me }, http.StatusForbidden},
		{"admitted", func(p peercred.Peer) bool { return p.UID == me }, http.StatusOK},
		{"default", nil, map[bool]int{true: http.StatusOK, false: http.StatusForbidden}[me == 0]},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := Config{
				Metrics:        http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "cellblock_file_bytes_total 1\n") }),
				MetricsAllowed: c.allowed,
			}
			cl, stop := serve(t, &fakeExecutor{}, cfg)
			defer stop()
			hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "unix", cl.Socket())
			}}}
			resp, err := hc.Get("http://cellblockd/metrics")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.want || (c.want != http.StatusOK) == strings.Contains(string(body), "cellblock_file_bytes_total") {
				t.Errorf("GET /metrics: %d %q, want %d", resp.StatusCode, body, c.want)
			}
			if c.want == http.StatusForbidden && !strings.Contains(string(body), `"forbidden"`) {
				t.Errorf("the refusal: %q", body)
			}
			if res, err := cl.Run(context.Background(), &api.RunRequest{Code: "print(1)"}); err != nil || res.Error != nil {
				t.Errorf("the same caller's run: %v %+v", err, res)
			}
		})
	}
}
