// Package servertest serves the real API server of package server on a
// real Unix socket, with stand-ins for its services, for the tests of cellblockd's
// clients (the CLI, the MCP front end). Requests go through everything the
// daemon does with them — the peer-credential check (the test's own uid is
// allowed), decoding, validation, limits, admission, the NDJSON stream and
// the mapping of errors to statuses — and only the runs are made up, by a
// function the test supplies.
//
// What it must not do: run anything, or be imported by anything but tests.
package servertest

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/peercred"
	"github.com/cellblock/cellblock/internal/server"
)

// RunFunc carries out one run in place of a jail. emit streams output to
// the caller; it does nothing when the caller did not ask for a stream.
// ctx ends when the caller goes away. An error is classified as the
// daemon's executor errors are (an *api.Error is passed on as it is).
type RunFunc func(ctx context.Context, req *api.RunRequest, emit func(stream, data string)) (*api.Result, error)

// Request is a run request that reached the executor.
type Request struct {
	api.RunRequest
	// Streamed is whether the caller asked for an NDJSON stream.
	Streamed bool
}

// Daemon is the real server with a stand-in executor, serving until the
// test ends.
type Daemon struct {
	// Socket is the path of the daemon's Unix socket.
	Socket string
	// Server is the server behind Socket.
	Server *server.Server

	mu       sync.Mutex
	run      RunFunc
	info     api.Info
	requests []Request
	canceled chan string

	sessions    map[string]*fakeSession
	sessionReqs []api.SessionRequest
	sessionSeq  int

	artifacts     map[string]*artifact
	artifactReads int
}

// gracePeriod is how long the server lets runs finish when the test ends.
const gracePeriod = time.Second

// Start serves the real server until t ends. info is what the executor
// reports; its Defaults, Maxima, MaxConcurrent and QueueSize configure the
// server, which reports them back as they are. run carries out every run
// until SetRun replaces it; nil answers every run with an empty result.
func Start(t testing.TB, info api.Info, run RunFunc) *Daemon {
	t.Helper()
	// t.TempDir can be too long for a socket path (108 bytes).
	dir, err := os.MkdirTemp("", "cbst")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	d := &Daemon{Socket: filepath.Join(dir, "d.sock"), run: run, info: info, canceled: make(chan string, 100)}
	ln, err := net.Listen("unix", d.Socket)
	if err != nil {
		t.Fatal(err)
	}
	me := uint32(os.Getuid())
	e := (*executor)(d)
	srv, err := server.New(server.Config{
		Defaults:      info.Defaults,
		Maxima:        info.Maxima,
		MaxConcurrent: info.MaxConcurrent,
		QueueSize:     info.QueueSize,
		Allowed:       func(p peercred.Peer) bool { return p.UID == me },
		Tools:         toolsConfig(info.Tools),
		Files:         filesOf(info),
	}, server.Services{Runs: e, Sessions: e, Envs: e, Artifacts: e, Files: e})
	if err != nil {
		t.Fatal(err)
	}
	d.Server = srv
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Server.Serve(ctx, ln, gracePeriod) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("servertest: serve: %v", err)
		}
	})
	return d
}

// SetRun replaces the function that carries out runs.
func (d *Daemon) SetRun(run RunFunc) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.run = run
}

// SetInfo replaces what the executor reports. The server's own settings
// stay those Start was given.
func (d *Daemon) SetInfo(info api.Info) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.info = info
}

// Requests returns the run requests that reached the executor, oldest
// first: those the server admitted after validating them.
func (d *Daemon) Requests() []Request {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Request(nil), d.requests...)
}

// LastRequest returns the most recent run request that reached the
// executor, and fails the test if there was none.
func (d *Daemon) LastRequest(t testing.TB) Request {
	t.Helper()
	reqs := d.Requests()
	if len(reqs) == 0 {
		t.Fatal("servertest: the daemon got no run request")
	}
	return reqs[len(reqs)-1]
}

// Canceled receives the code of every run whose context ended before its
// RunFunc returned.
func (d *Daemon) Canceled() <-chan string { return d.canceled }

// WaitLoad waits until the server has running runs executing and queued
// waiting for a slot. The admission queue offers no event to wait for, so
// it polls, and fails the test after timeout.
func (d *Daemon) WaitLoad(t testing.TB, running, queued int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		r, q := d.Server.Load()
		if r == running && q == queued {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("servertest: %d running and %d queued after %v, want %d and %d", r, q, timeout, running, queued)
		}
		time.Sleep(time.Millisecond)
	}
}

// executor is every service of a Daemon's server.
type executor Daemon

func (e *executor) Execute(ctx context.Context, r *server.Run) (*api.Result, error) {
	d := (*Daemon)(e)
	req, onOutput := r.Request, r.Output
	d.mu.Lock()
	d.requests = append(d.requests, Request{RunRequest: *req, Streamed: onOutput != nil})
	run := d.run
	d.mu.Unlock()
	if run == nil {
		return &api.Result{}, nil
	}
	emit := func(stream, data string) {
		if onOutput != nil {
			onOutput(stream, []byte(data))
		}
	}
	stop := withTools(req, r.Tools)
	res, err := run(ctx, req, emit)
	stop()
	if ctx.Err() != nil {
		d.canceled <- req.Code
	}
	if err == nil && res == nil {
		err = errors.New("servertest: the run function returned neither a result nor an error")
	}
	return res, err
}

func (e *executor) Info() api.Info {
	d := (*Daemon)(e)
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.info
}

// The stand-in has no dependency environments: listing them shows none,
// and the rest is refused.

var errNoEnvs = api.Errorf(api.ErrUnavailable, "", "the test daemon builds no environments")

func (e *executor) Envs(context.Context) (*api.EnvList, error) {
	return &api.EnvList{Envs: []api.EnvInfo{}}, nil
}

func (e *executor) BuildEnv(context.Context, *api.EnvBuildRequest) (*api.EnvBuildResult, error) {
	return nil, errNoEnvs
}

func (e *executor) RemoveEnv(context.Context, string) (*api.EnvRemoveResult, error) {
	return nil, errNoEnvs
}

func (e *executor) PruneEnvs(context.Context) (*api.EnvRemoveResult, error) { return nil, errNoEnvs }
