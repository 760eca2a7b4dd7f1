package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/client"
	"github.com/cellblock/cellblock/internal/peercred"
)

// fakeExecutor stands in for the jail in these unit tests of the HTTP
// layer; the integration suite runs the real one.
type fakeExecutor struct {
	block chan struct{} // if set, Execute waits for it or the context
	// started, if set, gets the code of every run as Execute begins.
	started chan string
	err     error
	mu      sync.Mutex
	calls   int
}

func (f *fakeExecutor) Execute(ctx context.Context, run *Run) (*api.Result, error) {
	req, onOutput := run.Request, run.Output
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()
	if f.started != nil {
		f.started <- req.Code
	}
	if f.err != nil {
		return nil, f.err
	}
	if f.block != nil {
		select {
		case <-f.block:
		case <-ctx.Done():
			return &api.Result{ExitCode: 137, Error: api.Errorf(api.ErrCanceled, "", "cancelled")}, nil
		}
	}
	if onOutput != nil {
		onOutput("stdout", []byte("chunk\xe6\x97"))
		onOutput("stdout", []byte("\xa5\n"))
	}
	return &api.Result{Stdout: "ran: " + req.Code, ExitCode: 0, Phases: &api.Phases{}}, nil
}

func (f *fakeExecutor) Info() api.Info { return api.Info{Version: "test"} }

var testLimits = api.Limits{TimeoutMs: 1000, MemoryBytes: 64 << 20, Pids: 16, CPUs: 1, OutputBytes: 1024, TmpBytes: 1 << 20}

// services are the services of x for a test: each that x is, and for the
// others a stand-in that refuses everything.
func services(x any) Services {
	svc := Services{Runs: refuse{}, Sessions: refuse{}, Envs: refuse{}, Artifacts: refuse{}, Files: refuse{}}
	if v, ok := x.(Runs); ok {
		svc.Runs = v
	}
	if v, ok := x.(Sessions); ok {
		svc.Sessions = v
	}
	if v, ok := x.(Envs); ok {
		svc.Envs = v
	}
	if v, ok := x.(Artifacts); ok {
		svc.Artifacts = v
	}
	if v, ok := x.(SessionFiles); ok {
		svc.Files = v
	}
	return svc
}

// newServer is New with the services of x, failing the test on an error.
func newServer(t *testing.T, cfg Config, x any) *Server {
	t.Helper()
	s, err := New(cfg, services(x))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// refuse is every service, refusing everything: the services a test does
// not use.
type refuse struct{}

var errRefused = api.Errorf(api.ErrUnavailable, "", "not in this test")

func (refuse) Execute(context.Context, *Run) (*api.Result, error) { return nil, errRefused }
func (refuse) Info() api.Info                                     { return api.Info{} }
func (refuse) CreateSession(context.Context, peercred.Peer, *api.SessionRequest, api.Limits) (*api.Session, error) {
	return nil, errRefused
}
func (refuse) Sessions(context.Context, peercred.Peer) (*api.SessionList, error) {
	return nil, errRefused
}
func (refuse) Session(context.Context, peercred.Peer, string) (*api.Session, error) {
	return nil, errRefused
}
func (refuse) DeleteSession(context.Context, peercred.Peer, string) error { return errRefused }
func (refuse) RunInSession(context.Context, *Run) (*api.Result, error)    { return nil, errRefused }
func (refuse) Envs(context.Context) (*api.EnvList, error)                 { return nil, errRefused }
func (refuse) BuildEnv(context.Context, *api.EnvBuildRequest) (*api.EnvBuildResult, error) {
	return nil, errRefused
}
func (refuse) RemoveEnv(context.Context, string) (*api.EnvRemoveResult, error) {
	return nil, errRefused
}
func (refuse) PruneEnvs(context.Context) (*api.EnvRemoveResult, error) { return nil, errRefused }
func (refuse) OpenArtifact(uint32, string) (io.ReadCloser, int64, error) {
	return nil, 0, api.Errorf(api.ErrNotFound, "sha256", "no artifact")
}
func (refuse) ArtifactUsage(uint32) (int64, int) { return 0, 0 }
func (refuse) ReadSessionFile(context.Context, peercred.Peer, string, string, func(int64) (io.Writer, error)) error {
	return errRefused
}
func (refuse) CanPutSessionFile(context.Context, peercred.Peer, string, int64) error {
	return errRefused
}
func (refuse) PutSessionFile(context.Context, peercred.Peer, string, string, []byte) error {
	return errRefused
}

// TestNewNeedsEveryService: a missing service is an error naming it.
func TestNewNeedsEveryService(t *testing.T) {
	svc := services(&fakeExecutor{})
	svc.Envs, svc.Files = nil, nil
	if _, err := New(Config{}, svc); err == nil || !strings.Contains(err.Error(), "Envs, Files") {
		t.Errorf("New without Envs and Files: %v", err)
	}
}

func serve(t *testing.T, exec any, cfg Config) (*client.Client, func()) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Defaults, cfg.Maxima = testLimits, testLimits
	if cfg.MaxConcurrent == 0 {
		cfg.MaxConcurrent = 2
	}
	if cfg.Allowed == nil {
		me := uint32(os.Getuid())
		cfg.Allowed = func(p peercred.Peer) bool { return p.UID == me }
	}
	s := newServer(t, cfg, exec)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln, time.Second) }()
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}
	return client.New(sock), stop
}

func TestRunAndInfo(t *testing.T) {
	c, stop := serve(t, &fakeExecutor{}, Config{})
	defer stop()
	res, err := c.Run(context.Background(), &api.RunRequest{Code: "print(1)"})
	if err != nil || res.Error != nil || res.Stdout != "ran: print(1)" || res.RunID == "" || res.Limits == nil {
		t.Fatalf("%+v %v", res, err)
	}
	info, err := c.Info(context.Background())
	if err != nil || info.Version != "test" || info.Defaults != testLimits || info.MaxConcurrent != 2 {
		t.Fatalf("%+v %v", info, err)
	}
	if err := c.Health(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestStreamKeepsSplitCharacters(t *testing.T) {
	c, stop := serve(t, &fakeExecutor{}, Config{})
	defer stop()
	var got strings.Builder
	res, err := c.RunStream(context.Background(), &api.RunRequest{Code: "x"}, func(stream, data string) {
		got.WriteString(data)
	})
	if err != nil || res.Stdout != "ran: x" {
		t.Fatalf("%+v %v", res, err)
	}
	if got.String() != "chunk日\n" {
		t.Fatalf("streamed %q", got.String())
	}
}

func TestRefusedPeer(t *testing.T) {
	c, stop := serve(t, &fakeExecutor{}, Config{Allowed: func(peercred.Peer) bool { return false }})
	defer stop()
	res, err := c.Run(context.Background(), &api.RunRequest{Code: "x"})
	if err != nil || res.Error == nil || res.Error.Type != api.ErrForbidden {
		t.Fatalf("%+v %v", res, err)
	}
	var aerr *api.Error
	if _, err := c.Info(context.Background()); !errors.As(err, &aerr) || aerr.Type != api.ErrForbidden {
		t.Fatalf("info: %v", err)
	}
}

// An executor's error reaches the caller by its class, wherever the class
// is in the chain; the daemon's own failures reach it only as a generic
// message naming the run, never with their text.
func TestErrorClasses(t *testing.T) {
	for _, c := range []struct {
		err   error
		want  api.ErrorType
		field string
	}{
		{api.Wrap(api.ErrUnknownPython, "python", errors.New("3.99 (have 3.11.7)")), api.ErrUnknownPython, "python"},
		{fmt.Errorf("resolve: %w", api.Errorf(api.ErrDependency, "dependencies", "no installer")), api.ErrDependency, "dependencies"},
		{fmt.Errorf("wrap: %w", api.ErrBadRequest), api.ErrBadRequest, ""},
		{fmt.Errorf("open /var/lib/cellblock/secret: %w", os.ErrPermission), api.ErrInternal, ""},
	} {
		var logs strings.Builder
		cl, stop := serve(t, &fakeExecutor{err: c.err}, Config{Log: slog.New(slog.NewTextHandler(&logs, nil))})
		res, err := cl.Run(context.Background(), &api.RunRequest{Code: "x"})
		stop()
		if err != nil || res.Error == nil || res.Error.Type != c.want || res.Error.Field != c.field {
			t.Errorf("%v: %+v %v", c.err, res, err)
			continue
		}
		if c.want != api.ErrInternal {
			continue
		}
		if strings.Contains(res.Error.Message, "secret") || !strings.Contains(res.Error.Message, res.RunID) {
			t.Errorf("internal error told the caller %q (run %s)", res.Error.Message, res.RunID)
		}
		if !strings.Contains(logs.String(), "secret") || !strings.Contains(logs.String(), res.RunID) {
			t.Errorf("internal error not logged with its run id: %s", logs.String())
		}
	}
}

func TestQueueBound(t *testing.T) {
	f := &fakeExecutor{block: make(chan struct{})}
	c, stop := serve(t, f, Config{MaxConcurrent: 1, QueueSize: 1})
	defer stop()
	results := make(chan *api.Result, 3)
	for i := 0; i < 3; i++ {
		go func() {
			res, err := c.Run(context.Background(), &api.RunRequest{Code: "x"})
			if err != nil {
				t.Error(err)
			}
			results <- res
		}()
	}
	// One runs, one waits, the third is turned away at once.
	first := <-results
	if first.Error == nil || first.Error.Type != api.ErrBusy {
		t.Fatalf("first answer %+v, want busy", first)
	}
	// The other two are admitted: one runs, one is queued. Keep it there
	// for a measured while.
	time.Sleep(50 * time.Millisecond)
	close(f.block)
	var waited int64
	for i := 0; i < 2; i++ {
		r := <-results
		if r.Error != nil {
			t.Errorf("queued run: %+v", r.Error)
			continue
		}
		waited = max(waited, r.Phases.QueueUs)
	}
	if waited < 50_000 {
		t.Errorf("the queued run reports %d µs in the queue; it waited at least 50 ms", waited)
	}
}

func TestDrainRefusesNewRunsAndKillsAfterGrace(t *testing.T) {
	f := &fakeExecutor{block: make(chan struct{}), started: make(chan string, 2)}
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	me := uint32(os.Getuid())
	s := newServer(t, Config{Defaults: testLimits, Maxima: testLimits, MaxConcurrent: 2, QueueSize: 2,
		Allowed: func(p peercred.Peer) bool { return p.UID == me }}, f)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln, 300*time.Millisecond) }()
	c := client.New(sock)
	inflight := make(chan *api.Result, 1)
	go func() {
		res, _ := c.Run(context.Background(), &api.RunRequest{Code: "x"})
		inflight <- res
	}()
	// The run is in flight once the executor has it; the server drains
	// once it has closed draining.
	if code := <-f.started; code != "x" {
		t.Fatalf("the executor got %q", code)
	}
	cancel()
	<-s.draining
	if res, err := c.Run(context.Background(), &api.RunRequest{Code: "y"}); err == nil && (res.Error == nil || res.Error.Type != api.ErrUnavailable) {
		t.Errorf("run accepted while draining: %+v", res)
	}
	res := <-inflight
	if res == nil || res.ExitCode != 137 || res.Error == nil || res.Error.Type != api.ErrUnavailable {
		t.Errorf("run in flight was not killed after the grace period: %+v", res)
	}
	if err := <-done; err != nil {
		t.Errorf("serve: %v", err)
	}
}

func TestDecodeRunRequest(t *testing.T) {
	for body, field := range map[string]string{
		`{"code":"x","nope":1}`:           "nope",
		`{"code":1}`:                      "code",
		`{"code":"x","env":{"A":1}}`:      "env",
		`{"code":"x","args":"a"}`:         "args",
		`{"code":"x","cpus":"many"}`:      "cpus",
		`{"code":"x","timeout_ms":1.5}`:   "timeout_ms",
		`{"code":"x","dependencies":[1]}`: "dependencies",
	} {
		_, err := DecodeRunRequest([]byte(body))
		if err == nil || !strings.HasPrefix(err.Field, field) {
			t.Errorf("%s: %v, want field %s", body, err, field)
		}
	}
	for _, body := range []string{``, `nul`, `[]`, `"x"`, `{"code":"x"}{}`, `{"code":"x"`} {
		if _, err := DecodeRunRequest([]byte(body)); err == nil || err.Type != api.ErrBadRequest {
			t.Errorf("%q: %v", body, err)
		}
	}
	req, err := DecodeRunRequest([]byte(`{"code":"print(1)","timeout_ms":500,"env":{"A":"b"}}`))
	if err != nil || req.Code != "print(1)" || req.TimeoutMs != 500 || req.Env["A"] != "b" {
		t.Fatalf("%+v %v", req, err)
	}
}

func FuzzDecodeRunRequest(f *testing.F) {
	for _, seed := range []string{
		`{"code":"print(1)"}`, `{"code":"x","env":{"A":"b"},"args":["1"],"timeout_ms":5}`,
		`{"code":"x","dependencies":["a>=1"],"python":"3.12","cpus":0.5}`, `{`, `[]`, `null`, `{"code":"\u0000"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := DecodeRunRequest(body)
		if (req == nil) == (err == nil) {
			t.Fatalf("exactly one of request and error must be set: %v %v", req, err)
		}
		if req != nil {
			if verr := req.Validate(); verr == nil {
				_, _ = req.Resolve(testLimits, testLimits)
			}
		}
	})
}
