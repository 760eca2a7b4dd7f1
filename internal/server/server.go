// Package server serves cellblockd's HTTP/JSON API on a Unix socket: it
// checks every caller's peer credentials, decodes and validates requests,
// admits runs through a bounded queue, streams or returns results, and maps
// error classes to HTTP statuses and the result's error.type. It does not
// run anything itself: the Services it is built with do (services.go).
package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/peercred"
	"github.com/cellblock/cellblock/internal/record"
	"github.com/cellblock/cellblock/internal/toolrelay"
)

// Config configures a Server.
type Config struct {
	Defaults, Maxima api.Limits
	MaxConcurrent    int
	QueueSize        int
	// Allowed decides whether a peer may use the API.
	Allowed func(peercred.Peer) bool
	Log     *slog.Logger
	// Observer, if set, is told about every finished run (audit, metrics),
	// and about every run request refused before it ran.
	Observer func(record.Run)
	// Metrics, if set, is served at GET /metrics to the callers
	// MetricsAllowed admits (root alone when it is nil), besides the API's
	// own check: the metrics count what every uid's runs did, which the
	// API tells no uid but root of the others.
	Metrics        http.Handler
	MetricsAllowed func(peercred.Peer) bool
	// Tools caps the tool calls of runs (toolrelay.DefaultConfig when
	// its defaults are unset).
	Tools toolrelay.Config
	// Files caps the files a request may carry (none when InCount is 0);
	// FileObserver, if set, is told about every file put into or read
	// from a session, and every artifact fetched.
	Files        api.FileCaps
	FileObserver func(record.FileOp)
	// MaxConnsPerUID caps the open connections of one uid, MaxConns those
	// of all uids but root together; 0 is no cap. The connections of the
	// callers Uncounted names (nil: none) count against neither
	// (conns.go).
	MaxConnsPerUID int
	MaxConns       int
	Uncounted      func(peercred.Peer) bool
}

// Server is the API. Create it with New and serve with Serve.
type Server struct {
	cfg   Config
	svc   Services
	log   *slog.Logger
	admit *admission
	// runs is the context of every run; cancelled to kill runs in flight
	// when shutdown's grace period is over.
	runs       context.Context
	cancelRuns context.CancelFunc
	draining   chan struct{}
	// tools holds the relays of the runs with tools, for their answers.
	tools *toolrelay.Registry
	// mu orders entering (enter) against the start of draining, so that
	// no run is added to inflight once Serve waits on it.
	mu       sync.Mutex
	drained  bool
	inflight sync.WaitGroup
	// bodies counts the bytes the bodies of requests hold (bodies.go).
	bodies byteBudget
}

// New returns a server of svc, every one of which is required.
func New(cfg Config, svc Services) (*Server, error) {
	if err := svc.check(); err != nil {
		return nil, err
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Allowed == nil {
		cfg.Allowed = func(p peercred.Peer) bool { return p.UID == 0 }
	}
	if cfg.Tools.Defaults.Calls == 0 {
		cfg.Tools = toolrelay.DefaultConfig()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{
		cfg:        cfg,
		svc:        svc,
		log:        cfg.Log,
		admit:      newAdmission(cfg.MaxConcurrent, cfg.QueueSize),
		runs:       ctx,
		cancelRuns: cancel,
		draining:   make(chan struct{}),
		tools:      toolrelay.NewRegistry(),
	}, nil
}

// Handler returns the API's HTTP handler.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+api.PathRuns, s.handleRun)
	mux.HandleFunc("GET "+api.PathInfo, s.handleInfo)
	mux.HandleFunc("GET "+api.PathHealth, s.handleHealth)
	s.registerEnvs(mux)
	s.registerSessions(mux)
	s.registerTools(mux)
	s.registerFiles(mux)
	if s.cfg.Metrics != nil {
		mux.HandleFunc("GET "+api.PathMetrics, s.handleMetrics)
	}
	return s.guard(mux)
}

// idleTimeout closes a kept-alive connection idle this long between
// requests (Go's client lets its own go after 90 s).
const idleTimeout = 2 * time.Minute

// maxHeaderBytes bounds a request's headers: cellblock's clients send a
// few hundred bytes.
const maxHeaderBytes = 64 << 10

// Serve serves the API on ln until ctx ends, then drains: it stops taking
// runs, lets those in flight finish for up to grace, kills the rest, and
// returns when all are done. Connections past the caps of
// Config.MaxConnsPerUID and MaxConns are refused as they are accepted.
func (s *Server) Serve(ctx context.Context, ln net.Listener, grace time.Duration) error {
	ln = &limitListener{Listener: ln, s: s, uncounted: s.cfg.Uncounted,
		count: &connCounter{perUID: s.cfg.MaxConnsPerUID, total: s.cfg.MaxConns}}
	hs := &http.Server{
		Handler:           s.Handler(),
		ConnContext:       withPeer,
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    maxHeaderBytes,
		// Between requests only: no ReadTimeout or WriteTimeout, which
		// would cut runs that stream for minutes. Bodies get a read
		// deadline of their own (boundBody), answers that send files a
		// write deadline (fileAnswer).
		IdleTimeout: idleTimeout,
		ErrorLog:    slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		s.cancelRuns()
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	s.mu.Lock()
	if !s.drained {
		s.drained = true
		close(s.draining)
	}
	s.mu.Unlock()
	s.log.Info("draining", "grace", grace)
	timer := time.AfterFunc(grace, func() {
		s.log.Warn("grace period over; killing runs in flight")
		s.cancelRuns()
	})
	defer timer.Stop()
	done := make(chan struct{})
	go func() { s.inflight.Wait(); close(done) }()
	<-done
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := hs.Shutdown(shutdownCtx)
	s.cancelRuns()
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// enter counts a request that will run something as in flight, unless
// draining has begun: then it reports false and the request must be
// refused. Done on inflight ends it.
func (s *Server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.drained {
		return false
	}
	s.inflight.Add(1)
	return true
}

func (s *Server) isDraining() bool {
	select {
	case <-s.draining:
		return true
	default:
		return false
	}
}

// guard checks peer credentials, bounds the request's body (boundBody)
// and turns panics into 500s.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				ref := newRef("e")
				s.log.Error("panic in handler", "ref", ref, "path", r.URL.Path, "panic", v)
				writeError(w, internalError(ref))
			}
		}()
		p, ok := PeerFrom(r.Context())
		if !ok || !s.cfg.Allowed(p) {
			s.log.Warn("refused caller", "uid", p.UID, "gid", p.GID, "pid", p.PID)
			writeError(w, api.Errorf(api.ErrForbidden, "", "uid %d is not allowed to use cellblockd", p.UID))
			return
		}
		r, release, ok := s.boundBody(w, r)
		if !ok {
			return
		}
		defer release()
		next.ServeHTTP(w, r)
	})
}

// handleMetrics serves the metrics to the callers allowed them.
func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	p, _ := PeerFrom(r.Context())
	allowed := s.cfg.MetricsAllowed
	if allowed == nil {
		allowed = func(p peercred.Peer) bool { return p.UID == 0 }
	}
	if !allowed(p) {
		writeError(w, api.Errorf(api.ErrForbidden, "", "uid %d may run code but not read the metrics: they count what every user's runs did, and are for root and the members of the socket group", p.UID))
		return
	}
	s.cfg.Metrics.ServeHTTP(w, r)
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	status := "ok"
	if s.isDraining() {
		status = "draining"
	}
	writeJSON(w, http.StatusOK, api.Health{Status: status})
}

func (s *Server) handleInfo(w http.ResponseWriter, r *http.Request) {
	info := s.svc.Runs.Info()
	info.Defaults = s.cfg.Defaults
	info.Maxima = s.cfg.Maxima
	info.MaxConcurrent = s.cfg.MaxConcurrent
	info.QueueSize = s.cfg.QueueSize
	info.Running, info.Queued = s.admit.load()
	info.Tools = &api.ToolCaps{Defaults: s.cfg.Tools.Defaults, Maxima: s.cfg.Tools.Maxima}
	peer, _ := PeerFrom(r.Context())
	s.callerFiles(&info, peer)
	if peer.UID != 0 {
		// Which secrets exist, where they go and who may use them is
		// the operator's to know.
		info.Secrets = nil
	}
	writeJSON(w, http.StatusOK, info)
}

func (s *Server) handleRun(w http.ResponseWriter, r *http.Request) {
	started := time.Now()
	peer, _ := PeerFrom(r.Context())
	if s.isDraining() {
		s.refuse(w, peer, nil, started, api.Errorf(api.ErrUnavailable, "", "cellblockd is shutting down"))
		return
	}
	req, aerr := decodeRunRequest(w, r, s.requestBytes())
	if aerr == nil {
		aerr = req.Validate()
	}
	var limits api.Limits
	if aerr == nil {
		limits, aerr = req.Resolve(s.cfg.Defaults, s.cfg.Maxima)
	}
	stream := r.Header.Get("Accept") == api.StreamContentType
	if aerr == nil {
		aerr = s.checkTools(req, stream)
	}
	if aerr == nil {
		aerr = s.checkRunFiles(req, limits)
	}
	if aerr != nil {
		s.refuse(w, peer, req, started, aerr)
		return
	}

	queued := time.Now()
	release, aerr := s.admit.acquire(r.Context())
	queueTime := time.Since(queued)
	if aerr != nil {
		s.refuse(w, peer, req, started, aerr)
		return
	}
	defer release()
	if !s.enter() {
		s.refuse(w, peer, req, started, api.Errorf(api.ErrUnavailable, "", "cellblockd is shutting down"))
		return
	}
	defer s.inflight.Done()
	tools, aerr := s.prepareTools(req)
	if aerr != nil {
		s.refuse(w, peer, req, started, aerr)
		return
	}

	// The run ends when the caller goes away or when shutdown kills it.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(s.runs, cancel)
	defer stop()

	id := newRunID()
	var sw *streamWriter
	var onOutput func(string, []byte)
	if stream {
		sw = newStreamWriter(w, cancel)
		onOutput = sw.output
	}
	run := &Run{ID: id, Owner: peer, Request: req, Limits: limits, Output: onOutput, Tools: tools.open(s, id, peer, sw)}
	res, err := s.execute(ctx, run)
	switch {
	case err == nil:
	case r.Context().Err() != nil:
		res = &api.Result{Error: api.Errorf(api.ErrCanceled, "", "the caller went away")}
	case ctx.Err() != nil:
		// Shutdown killed it (see below), whatever the executor said.
		res = &api.Result{Error: api.Errorf(api.ErrCanceled, "", "the run was cancelled")}
	default:
		res = &api.Result{Error: s.callerError(err, id, peer)}
	}
	if sw != nil {
		res = sw.explain(res)
	}
	if res.Phases != nil {
		res.Phases.QueueUs = queueTime.Microseconds()
	}
	if s.runs.Err() != nil && res.Error != nil && res.Error.Type == api.ErrCanceled {
		res.Error = api.Errorf(api.ErrUnavailable, "", "cellblockd shut down and killed the run")
	}
	res.RunID = id
	if res.Limits == nil {
		res.Limits = &limits
	}
	rec := record.Run{Peer: peer, Request: req, Result: res, Started: started}
	tools.finish(res, &rec)
	s.logRun(peer, id, res, started)
	if s.cfg.Observer != nil {
		rec.Duration = time.Since(started)
		s.cfg.Observer(rec)
	}
	if sw != nil {
		sw.result(res)
		return
	}
	status := http.StatusOK
	if res.Error != nil {
		status = StatusOf(res.Error.Type)
	}
	writeResult(w, status, res)
}

// refuse answers a run request that will not be carried out, and tells the
// observer.
func (s *Server) refuse(w http.ResponseWriter, p peercred.Peer, req *api.RunRequest, started time.Time, e *api.Error) {
	if s.cfg.Observer != nil {
		s.cfg.Observer(record.Run{Peer: p, Request: req, Result: &api.Result{Error: e}, Started: started, Duration: time.Since(started)})
	}
	writeError(w, e)
}

// Load reports how many runs execute now and how many wait for a slot.
func (s *Server) Load() (running, queued int) { return s.admit.load() }

func (s *Server) logRun(p peercred.Peer, id string, res *api.Result, started time.Time) {
	attrs := []any{
		"run", id, "uid", p.UID, "pid", p.PID, "python", res.Python,
		"exit_code", res.ExitCode, "timed_out", res.TimedOut, "oom_killed", res.OOMKilled,
		"duration_ms", res.DurationMs, "cpu_ms", res.CPUMs, "memory_peak", res.MemoryPeakBytes,
		"total_ms", time.Since(started).Milliseconds(),
	}
	if res.Error != nil {
		attrs = append(attrs, "error", string(res.Error.Type))
	}
	s.log.Info("run", attrs...)
}

// callerError is what the caller of request ref (a run id) is told about
// err. A caller's mistake, or a class of failure the caller can act on,
// comes back as it is; the daemon's own failure is logged here with its
// text, and the caller gets a generic message naming ref, which finds the
// log line.
func (s *Server) callerError(err error, ref string, peer peercred.Peer) *api.Error {
	e := api.ErrorOf(err)
	if e.Type != api.ErrInternal {
		return e
	}
	s.log.Error("request failed", "ref", ref, "uid", peer.UID, "err", err)
	return internalError(ref)
}

// internalError is the one message a caller gets for the daemon's own
// failures: their text may name host paths and is for the operator.
func internalError(ref string) *api.Error {
	return api.Errorf(api.ErrInternal, "", "cellblockd failed to carry out the request (reference %s in its log)", ref)
}

// StatusOf maps an error class to its HTTP status: the only place that
// does.
func StatusOf(t api.ErrorType) int {
	switch t {
	case api.ErrBadRequest, api.ErrOverLimit, api.ErrUnknownPython:
		return http.StatusBadRequest
	case api.ErrTooLarge:
		return http.StatusRequestEntityTooLarge
	case api.ErrDependency:
		return http.StatusUnprocessableEntity
	case api.ErrForbidden:
		return http.StatusForbidden
	case api.ErrNotFound, api.ErrSessionNotFound:
		return http.StatusNotFound
	case api.ErrInUse, api.ErrSessionBusy:
		return http.StatusConflict
	case api.ErrSessionLost:
		return http.StatusGone
	case api.ErrBusy:
		return http.StatusTooManyRequests
	case api.ErrUnavailable:
		return http.StatusServiceUnavailable
	case api.ErrCanceled:
		return 499 // client closed request; nobody reads it
	default:
		return http.StatusInternalServerError
	}
}

func writeError(w http.ResponseWriter, e *api.Error) {
	writeJSON(w, StatusOf(e.Type), &api.Result{Error: e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}

func newRunID() string { return newRef("r") }

// newRef is a fresh random id with prefix: run ids ("r") and references
// to log lines about requests that are not runs ("e").
func newRef(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
