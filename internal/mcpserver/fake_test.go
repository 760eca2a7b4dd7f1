package mcpserver

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/cellblock/cellblock/internal/api"
)

// fakeDaemon stands in for cellblockd: an HTTP server on a Unix socket
// speaking the socket API of package api. Each test decides what a run
// does by setting run.
type fakeDaemon struct {
	socket string
	info   api.Info

	// run carries out one run: it may call emit to stream output (sent as
	// events when the client asked for a stream) and returns the result.
	// ctx is the HTTP request's context: it ends when the client goes away.
	run func(ctx context.Context, req *api.RunRequest, emit func(stream, data string)) *api.Result

	mu       sync.Mutex
	requests []api.RunRequest
	streamed int // requests that asked for an event stream
	// canceled receives the code of every run whose request context ended
	// before run returned.
	canceled chan string
}

// testInfo is the info the fake daemon reports, with limits unlike any
// default so that tests can see them in the descriptions.
func testInfo() api.Info {
	return api.Info{
		Version: "9.9.9-test",
		Pythons: []api.Python{
			{ID: "3.12", Version: "3.12.7", Default: true},
			{ID: "3.11", Version: "3.11.9"},
		},
		CgroupMode:    "v2",
		UserNamespace: true,
		Seccomp:       true,
		Network:       "none",
		Defaults:      api.Limits{TimeoutMs: 7000, MemoryBytes: 200 << 20, Pids: 48, CPUs: 1, OutputBytes: 1 << 20, TmpBytes: 32 << 20},
		Maxima:        api.Limits{TimeoutMs: 123000, MemoryBytes: 3 << 30, Pids: 512, CPUs: 2, OutputBytes: 8 << 20, TmpBytes: 256 << 20},
		MaxConcurrent: 6,
		QueueSize:     17,
		Filesystem:    "read-only root; writable /tmp and working directory",
		Dependencies: &api.DependencyInfo{
			Installer: "pip", NoIndex: true, FindLinks: []string{"/srv/wheels"}, OnlyBinary: true,
			CacheEntries: 2, CacheBytes: 5 << 20, CacheBudget: 1 << 30,
		},
	}
}

// startFakeDaemon serves a fake daemon until the test ends.
func startFakeDaemon(t *testing.T) *fakeDaemon {
	t.Helper()
	// Unix socket paths are short (108 bytes); t.TempDir can be long.
	dir, err := os.MkdirTemp("", "cbmcp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	fd := &fakeDaemon{
		socket:   filepath.Join(dir, "d.sock"),
		info:     testInfo(),
		canceled: make(chan string, 100),
		run: func(_ context.Context, req *api.RunRequest, emit func(string, string)) *api.Result {
			return &api.Result{Stdout: "ran\n", Python: "3.12.7"}
		},
	}
	ln, err := net.Listen("unix", fd.socket)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+api.PathInfo, func(w http.ResponseWriter, r *http.Request) {
		fd.mu.Lock()
		info := fd.info
		fd.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(info)
	})
	mux.HandleFunc("POST "+api.PathRuns, fd.serveRun)
	srv := httptest.NewUnstartedServer(mux)
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return fd
}

func (fd *fakeDaemon) serveRun(w http.ResponseWriter, r *http.Request) {
	var req api.RunRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(api.Result{Error: &api.Error{Type: api.ErrBadRequest, Message: err.Error()}})
		return
	}
	stream := r.Header.Get("Accept") == api.StreamContentType
	fd.mu.Lock()
	fd.requests = append(fd.requests, req)
	if stream {
		fd.streamed++
	}
	fd.mu.Unlock()

	// The stream starts with the first output, as a refusal before any
	// output is answered with a plain JSON result and an error status.
	var mu sync.Mutex // emit may be called from the run's goroutines
	started := false
	enc := json.NewEncoder(w)
	flusher, _ := w.(http.Flusher)
	startLocked := func() {
		if !started {
			started = true
			w.Header().Set("Content-Type", api.StreamContentType)
			w.WriteHeader(http.StatusOK)
		}
	}
	emit := func(s, data string) {
		if !stream {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		startLocked()
		_ = enc.Encode(api.Event{Stream: s, Data: data})
		flusher.Flush()
	}
	res := fd.run(r.Context(), &req, emit)
	if r.Context().Err() != nil {
		fd.canceled <- req.Code
		return
	}
	mu.Lock()
	defer mu.Unlock()
	if stream && (started || res.Error == nil) {
		startLocked()
		_ = enc.Encode(api.Event{Result: res})
		return
	}
	status := http.StatusOK
	if res.Error != nil {
		status = http.StatusBadRequest
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = enc.Encode(res)
}

// lastRequest returns the most recent run request.
func (fd *fakeDaemon) lastRequest(t *testing.T) api.RunRequest {
	t.Helper()
	fd.mu.Lock()
	defer fd.mu.Unlock()
	if len(fd.requests) == 0 {
		t.Fatal("the daemon got no run request")
	}
	return fd.requests[len(fd.requests)-1]
}
