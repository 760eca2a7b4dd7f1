package mcpserver

import (
	"context"
	"testing"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/server/servertest"
)

// fakeDaemon is the real API server (package servertest) with made-up
// runs. Each test decides what a run does by setting run.
type fakeDaemon struct {
	*servertest.Daemon
	socket string
	info   api.Info

	// run carries out one run: it may call emit to stream output (sent as
	// events when the client asked for a stream) and returns the result.
	// ctx ends when the client goes away.
	run func(ctx context.Context, req *api.RunRequest, emit func(stream, data string)) *api.Result
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
		Tools: &api.ToolCaps{Defaults: api.ToolLimits{Calls: 256, ArgumentBytes: 1 << 20, ResultBytes: 1 << 20, TimeoutMs: 30000},
			Maxima: api.ToolLimits{Calls: 10000, ArgumentBytes: 8 << 20, ResultBytes: 8 << 20, TimeoutMs: 600000}},
	}
}

// startFakeDaemon serves a fake daemon until the test ends.
func startFakeDaemon(t *testing.T) *fakeDaemon {
	t.Helper()
	return startFakeDaemonFor(t, testInfo())
}

// startFakeDaemonFor serves a fake daemon that reports, and is configured
// with, info.
func startFakeDaemonFor(t *testing.T, info api.Info) *fakeDaemon {
	t.Helper()
	fd := &fakeDaemon{
		info: info,
		run: func(_ context.Context, req *api.RunRequest, emit func(string, string)) *api.Result {
			return &api.Result{Stdout: "ran\n", Python: "3.12.7"}
		},
	}
	fd.Daemon = servertest.Start(t, fd.info, func(ctx context.Context, req *api.RunRequest, emit func(string, string)) (*api.Result, error) {
		return fd.run(ctx, req, emit), nil
	})
	fd.socket = fd.Socket
	return fd
}

// lastRequest returns the most recent run request.
func (fd *fakeDaemon) lastRequest(t *testing.T) api.RunRequest {
	t.Helper()
	return fd.LastRequest(t).RunRequest
}

// streamed counts the run requests that asked for an event stream.
func (fd *fakeDaemon) streamed() int {
	n := 0
	for _, r := range fd.Requests() {
		if r.Streamed {
			n++
		}
	}
	return n
}

// asServed is res as the daemon answers it: with the run's id, which the
// daemon assigns, and, when the run did not report its limits, those of
// the request, here the daemon's defaults.
func asServed(t *testing.T, res, got api.Result) api.Result {
	t.Helper()
	if got.RunID == "" {
		t.Error("the result has no run id")
	}
	res.RunID = got.RunID
	if res.Limits == nil {
		l := testInfo().Defaults
		res.Limits = &l
	}
	return res
}
