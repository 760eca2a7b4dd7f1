package mcpserver

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/client"
)

// envDaemon answers POST /v1/envs on a Unix socket with answers, in turn
// (the last one again when they run out), and records the requests.
type envDaemon struct {
	socket string
	mu     sync.Mutex
	got    []api.EnvBuildRequest
}

func startEnvDaemon(t *testing.T, answers ...func(w http.ResponseWriter)) *envDaemon {
	t.Helper()
	d := &envDaemon{socket: filepath.Join(t.TempDir(), "d.sock")}
	ln, err := net.Listen("unix", d.socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != api.PathEnvs {
			http.NotFound(w, r)
			return
		}
		var req api.EnvBuildRequest
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &req)
		d.mu.Lock()
		n := len(d.got)
		d.got = append(d.got, req)
		d.mu.Unlock()
		answers[min(n, len(answers)-1)](w)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return d
}

func (d *envDaemon) requests() []api.EnvBuildRequest {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]api.EnvBuildRequest(nil), d.got...)
}

func answerJSON(status int, v any) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
}

func TestBuildWarmEnv(t *testing.T) {
	old := warmRetryMin
	warmRetryMin = 10 * time.Millisecond
	t.Cleanup(func() { warmRetryMin = old })
	built := answerJSON(200, api.EnvBuildResult{Environment: &api.Environment{ID: "e1"}, Python: "3.12.7", Preload: []string{"pandas"}})
	busy := answerJSON(503, api.Result{Error: api.Errorf(api.ErrUnavailable, "", "shutting down")})
	refused := answerJSON(400, api.Result{Error: api.Errorf(api.ErrDependency, "dependencies", "no such package")})
	w := &WarmEnv{Dependencies: []string{"pandas"}, Preload: []string{"pandas"}}

	// Unavailable, then built: it tries again, and sends the list.
	d := startEnvDaemon(t, busy, built)
	done := make(chan struct{})
	go func() { BuildWarmEnv(context.Background(), client.New(d.socket), w, nil); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("BuildWarmEnv did not return")
	}
	got := d.requests()
	if len(got) != 2 || got[1].Dependencies[0] != "pandas" || len(got[1].Preload) != 1 || got[1].Preload[0] != "pandas" {
		t.Errorf("requests: %+v", got)
	}

	// A refusal is final.
	d = startEnvDaemon(t, refused, built)
	BuildWarmEnv(context.Background(), client.New(d.socket), w, nil)
	if n := len(d.requests()); n != 1 {
		t.Errorf("%d requests after a refusal, want 1", n)
	}

	// Unreachable until the context ends.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	BuildWarmEnv(ctx, client.New(filepath.Join(t.TempDir(), "none.sock")), w, nil)
	if ctx.Err() == nil {
		t.Error("BuildWarmEnv gave up on an unreachable daemon before its context ended")
	}
}

// TestRunPythonNamesWarmEnv: the model learns which dependencies come
// prepared, and which modules preloaded.
func TestRunPythonNamesWarmEnv(t *testing.T) {
	info := testInfo()
	plain := runPythonTool(&info, nil).Description
	if d := runPythonTool(&info, &WarmEnv{}).Description; d != plain {
		t.Errorf("an empty warm environment changed the description")
	}
	d := runPythonTool(&info, &WarmEnv{Dependencies: []string{"pandas>=2", "numpy"}, Preload: []string{"pandas", "numpy"}}).Description
	mustContain(t, d, `"dependencies": ["pandas>=2", "numpy"] (exactly these`, "pandas, numpy already imported")
	d = runPythonTool(&info, &WarmEnv{Dependencies: []string{"rich"}}).Description
	mustContain(t, d, `"dependencies": ["rich"] are installed already`)
}
