package sessions

// Tests of the manager with a fake interpreter and opener: no jail, no
// root, no sleeps. Expiry is driven by calling expire with a chosen time;
// runs that must be in progress block in the fake until the test lets
// them go.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/peercred"
	"github.com/cellblock/cellblock/internal/server"
	"github.com/cellblock/cellblock/nsjail"
	"github.com/cellblock/cellblock/nsjail/runner"
	"github.com/cellblock/cellblock/nsjail/workdir"
)

var (
	alice = peercred.Peer{UID: 1000, GID: 1000, PID: 11}
	bob   = peercred.Peer{UID: 2000, GID: 2000, PID: 22}
	root  = peercred.Peer{UID: 0, GID: 0, PID: 1}
)

// fakeInterp is an Interp that counts how it is ended and runs what the
// test gives it.
type fakeInterp struct {
	id     string
	closed chan struct{} // closed by the first Close

	mu       sync.Mutex
	closes   int
	releases int
	// releaseEarly: Release came before Close.
	releaseEarly bool
	lost         bool
	runs         int
	vars         []runner.Variable
	varsMore     bool
	// before, when set, is called as Run begins, before anything else:
	// what happens between the manager's checks and the run.
	before func()
	// run carries out a run; nil: it ends at once with exit 0.
	run func(ctx context.Context, f *fakeInterp, r *nsjail.SessionRun) (*nsjail.Outcome, error)
}

func (f *fakeInterp) Run(ctx context.Context, r *nsjail.SessionRun, onOutput nsjail.OutputFunc) (*nsjail.Outcome, error) {
	f.mu.Lock()
	before := f.before
	f.mu.Unlock()
	if before != nil {
		before()
	}
	f.mu.Lock()
	if f.lost {
		// As nsjail.Session: a lost (or closed) interpreter runs nothing.
		f.mu.Unlock()
		return nil, nsjail.ErrSessionLost
	}
	f.runs++
	run := f.run
	f.mu.Unlock()
	if run == nil {
		return &nsjail.Outcome{}, nil
	}
	return run(ctx, f, r)
}

func (f *fakeInterp) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closes++
	f.lost = true // as nsjail.Session: closing kills
	if f.closes == 1 {
		close(f.closed)
	}
}

func (f *fakeInterp) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.releases++
	if f.closes == 0 {
		f.releaseEarly = true
	}
}

func (f *fakeInterp) Lost() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lost
}

func (f *fakeInterp) Variables() ([]runner.Variable, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]runner.Variable(nil), f.vars...), f.varsMore
}

func (f *fakeInterp) MemoryUsage() int64 { return 4 << 20 }

// Work: the fake has no /work to read; its files are the fake Files'.
func (f *fakeInterp) Work() *workdir.Dir { return nil }

// PutFiles takes any files (filesInterp records them).
func (f *fakeInterp) PutFiles(context.Context, []nsjail.InputFile) error { return nil }

func (f *fakeInterp) set(fn func(f *fakeInterp)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// ended reports how many times f was closed and released.
func (f *fakeInterp) ended() (closes, releases int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closes, f.releases
}

// harness is a Manager over fakes; it is the manager's Jails.
type harness struct {
	t *testing.T
	m *Manager
	// files moves the sessions' files; wrap, when set, changes what
	// OpenSession opened.
	files *fakeFiles
	wrap  func(id string, o *Opened) *Opened

	mu      sync.Mutex
	interps map[string]*fakeInterp
	events  map[string]int
	opens   int
	openErr error
	// hold, when set, makes Open say so on opening and wait for hold to
	// close (or its ctx to end).
	hold    chan struct{}
	opening chan string
}

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	h := &harness{t: t, interps: map[string]*fakeInterp{}, events: map[string]int{}, opening: make(chan string), files: &fakeFiles{}}
	cfg.Jails = h
	cfg.Event = func(kind string) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.events[kind]++
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.m = m
	t.Cleanup(func() {
		m.Close()
		h.checkEnded()
	})
	return h
}

// OpenSession opens a fake interpreter (Jails).
func (h *harness) OpenSession(ctx context.Context, id string, _ uint32, req *api.SessionRequest, l api.Limits) (*Opened, error) {
	o, err := h.open(ctx, id, req, l)
	if err == nil && h.wrap != nil {
		o = h.wrap(id, o)
	}
	return o, err
}

// Result is the outcome's exit code and timeout (Jails).
func (h *harness) Result(out *nsjail.Outcome) *api.Result {
	return &api.Result{ExitCode: out.ExitCode, TimedOut: out.TimedOut}
}

// The files go to the fake Files (Jails).
func (h *harness) Inputs(files []api.FileInput) ([]nsjail.InputFile, error) {
	return h.files.Inputs(files)
}
func (h *harness) InputError(err error, field string) error    { return h.files.InputError(err, field) }
func (h *harness) SnapshotOut(w *workdir.Dir) workdir.Snapshot { return h.files.SnapshotOut(w) }
func (h *harness) CollectOut(w *workdir.Dir, owner uint32, inline bool, since workdir.Snapshot) ([]api.File, []api.FileSkipped) {
	return h.files.CollectOut(w, owner, inline, since)
}
func (h *harness) ReadWorkFile(w *workdir.Dir, p string, begin func(int64) (io.Writer, error)) error {
	return h.files.ReadWorkFile(w, p, begin)
}

// runIn is RunInSession of a run by who.
func runIn(m *Manager, ctx context.Context, who peercred.Peer, id string, req *api.RunRequest, l api.Limits, onOutput func(string, []byte)) (*api.Result, error) {
	return m.RunInSession(ctx, &server.Run{ID: id, Owner: who, Request: req, Limits: l, Output: onOutput})
}

func (h *harness) open(ctx context.Context, id string, req *api.SessionRequest, l api.Limits) (*Opened, error) {
	h.mu.Lock()
	hold, err := h.hold, h.openErr
	h.opens++
	h.mu.Unlock()
	if hold != nil {
		h.opening <- id
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if err != nil {
		return nil, err
	}
	f := &fakeInterp{id: id, closed: make(chan struct{})}
	h.mu.Lock()
	h.interps[id] = f
	h.mu.Unlock()
	return &Opened{Interp: f, Python: "3.12.4", Release: f.release}, nil
}

// checkEnded: every interpreter opened was closed once and released
// once, after its close. Call after the manager's Close.
func (h *harness) checkEnded() {
	h.t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, f := range h.interps {
		f.mu.Lock()
		if f.closes != 1 || f.releases != 1 || f.releaseEarly {
			h.t.Errorf("session %s: closed %d times, released %d times (released before closed: %v); want once each",
				id, f.closes, f.releases, f.releaseEarly)
		}
		f.mu.Unlock()
	}
}

func (h *harness) interp(id string) *fakeInterp {
	h.mu.Lock()
	defer h.mu.Unlock()
	f := h.interps[id]
	if f == nil {
		h.t.Fatalf("no interpreter opened for session %s", id)
	}
	return f
}

// eventCounts is a copy of the events so far.
func (h *harness) eventCounts() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
	for k, v := range h.events {
		out[k] = v
	}
	return out
}

func (h *harness) wantEvents(want map[string]int) {
	h.t.Helper()
	got := h.eventCounts()
	for _, k := range []string{"created", "expired", "deleted", "lost", "ended"} {
		if got[k] != want[k] {
			h.t.Errorf("events: %v, want %v", got, want)
			return
		}
	}
	if len(got) > len(want) {
		h.t.Errorf("events: %v, want %v", got, want)
	}
}

func (h *harness) create(who peercred.Peer, req *api.SessionRequest) *api.Session {
	h.t.Helper()
	if req == nil {
		req = &api.SessionRequest{}
	}
	s, err := h.m.CreateSession(context.Background(), who, req, api.Limits{MemoryBytes: 256 << 20, TimeoutMs: 30000})
	if err != nil {
		h.t.Fatalf("create session for uid %d: %v", who.UID, err)
	}
	return s
}

func (h *harness) run(ctx context.Context, who peercred.Peer, id, code string) (*api.Result, error) {
	return runIn(h.m, ctx, who, "r-"+code, &api.RunRequest{Session: id, Code: code},
		api.Limits{TimeoutMs: 5000, OutputBytes: 1 << 20}, nil)
}

// goRun starts a run and returns where its answer arrives.
func (h *harness) goRun(who peercred.Peer, id, code string) <-chan answer {
	ch := make(chan answer, 1)
	go func() {
		res, err := h.run(context.Background(), who, id, code)
		ch <- answer{res, err}
	}()
	return ch
}

type answer struct {
	res *api.Result
	err error
}

// blocking makes f's runs wait, each saying it is in on entered, until
// the test sends an outcome on release, the run's ctx ends, or f is
// closed; the ctx's error, if that ended it, goes to sawCancel.
type blocking struct {
	entered   chan struct{}
	release   chan *nsjail.Outcome
	sawCancel chan error
	// onCtx, onClose: whether the run ends when its ctx ends, when the
	// interpreter is closed.
	onCtx, onClose bool
}

func block(f *fakeInterp, onCtx, onClose bool) *blocking {
	b := &blocking{entered: make(chan struct{}), release: make(chan *nsjail.Outcome),
		sawCancel: make(chan error, 1), onCtx: onCtx, onClose: onClose}
	f.set(func(f *fakeInterp) { f.run = b.run })
	return b
}

func (b *blocking) run(ctx context.Context, f *fakeInterp, r *nsjail.SessionRun) (*nsjail.Outcome, error) {
	b.entered <- struct{}{}
	var done <-chan struct{}
	var closed <-chan struct{}
	if b.onCtx {
		done = ctx.Done()
	}
	if b.onClose {
		closed = f.closed
	}
	select {
	case out := <-b.release:
		return out, nil
	case <-done:
		b.sawCancel <- ctx.Err()
		// As nsjail.Session: interrupted, then killed when it closes.
		return &nsjail.Outcome{Canceled: true, Lost: true, ExitCode: 130}, nil
	case <-closed:
		// nsjail.Session's Close killed it before its ctx was seen.
		return &nsjail.Outcome{Lost: true, ExitCode: 137}, nil
	}
}

// apiErr is err as an *api.Error of type want, or fails the test.
func apiErr(t *testing.T, err error, want api.ErrorType) *api.Error {
	t.Helper()
	var e *api.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T), want an *api.Error of type %s", err, err, want)
	}
	if e.Type != want {
		t.Fatalf("error %v, want type %s", err, want)
	}
	return e
}

// words is an error's message with the session id replaced, to compare
// the answers about two ids.
func words(e *api.Error, id string) string {
	return e.Field + "|" + strings.ReplaceAll(e.Message, id, "ID")
}

// unknownID is an id this daemon could have made but did not.
func (h *harness) unknownID() string { return "s" + h.m.boot + "-0123456789abcdef" }

func TestIDsCarryTheBoot(t *testing.T) {
	h := newHarness(t, Config{})
	s := h.create(alice, nil)
	if !strings.HasPrefix(s.ID, "s"+h.m.boot+"-") || len(s.ID) != len(h.unknownID()) {
		t.Fatalf("id %q, want s%s-<16 hex>", s.ID, h.m.boot)
	}
	if s.State != api.SessionAlive || s.OwnerUID != alice.UID || s.Python != "3.12.4" || s.ExpiresAt.IsZero() {
		t.Errorf("new session: %+v", s)
	}
}

// The owner sees and uses a session, root sees and deletes it but runs
// nothing in it (forbidden, saying whose it is); any other uid is told
// session_not_found in exactly the words an unknown id gets, whatever
// it tries, and its tries change nothing.
func TestOwnership(t *testing.T) {
	h := newHarness(t, Config{})
	s := h.create(alice, nil)
	other := h.create(bob, nil)
	ctx := context.Background()

	_, err := h.m.Session(ctx, bob, h.unknownID())
	unknown := words(apiErr(t, err, api.ErrSessionNotFound), h.unknownID())
	_, err = h.run(ctx, bob, h.unknownID(), "1")
	unknownRun := words(apiErr(t, err, api.ErrSessionNotFound), h.unknownID())
	err = h.m.DeleteSession(ctx, bob, h.unknownID())
	unknownDel := words(apiErr(t, err, api.ErrSessionNotFound), h.unknownID())
	if unknown != unknownRun || unknown != unknownDel {
		t.Errorf("unknown id: GET %q, run %q, DELETE %q: want the same words", unknown, unknownRun, unknownDel)
	}

	_, err = h.m.Session(ctx, bob, s.ID)
	if got := words(apiErr(t, err, api.ErrSessionNotFound), s.ID); got != unknown {
		t.Errorf("another uid's GET: %q, want the unknown id's %q", got, unknown)
	}
	_, err = h.run(ctx, bob, s.ID, "1")
	if got := words(apiErr(t, err, api.ErrSessionNotFound), s.ID); got != unknown {
		t.Errorf("another uid's run: %q, want the unknown id's %q", got, unknown)
	}
	err = h.m.DeleteSession(ctx, bob, s.ID)
	if got := words(apiErr(t, err, api.ErrSessionNotFound), s.ID); got != unknown {
		t.Errorf("another uid's DELETE: %q, want the unknown id's %q", got, unknown)
	}
	list, err := h.m.Sessions(ctx, bob)
	if err != nil || len(list.Sessions) != 1 || list.Sessions[0].ID != other.ID {
		t.Errorf("bob's list: %+v, %v; want his session alone", list, err)
	}

	// Bob's tries left it alone.
	f := h.interp(s.ID)
	if c, r := f.ended(); c != 0 || r != 0 || f.runs != 0 {
		t.Fatalf("after another uid's tries: closed %d, released %d, ran %d", c, r, f.runs)
	}

	// The owner and root.
	if got, err := h.m.Session(ctx, alice, s.ID); err != nil || got.ID != s.ID {
		t.Fatalf("owner's GET: %+v, %v", got, err)
	}
	if res, err := h.run(ctx, alice, s.ID, "1"); err != nil || res.Session.ExecutionCount != 1 {
		t.Fatalf("owner's run: %+v, %v", res, err)
	}
	if got, err := h.m.Session(ctx, root, s.ID); err != nil || got.OwnerUID != alice.UID || got.ExecutionCount != 1 {
		t.Fatalf("root's GET: %+v, %v", got, err)
	}
	_, err = h.run(ctx, root, s.ID, "2")
	if e := apiErr(t, err, api.ErrForbidden); !strings.Contains(e.Message, fmt.Sprintf("belongs to uid %d", alice.UID)) || !strings.Contains(e.Message, "only its owner runs code") {
		t.Errorf("root's run in alice's session: %q", e.Message)
	}
	if f.runs != 1 {
		t.Errorf("root's refused run reached the interpreter: %d runs", f.runs)
	}
	if res, err := h.run(ctx, alice, s.ID, "2"); err != nil || res.Session.ExecutionCount != 2 {
		t.Fatalf("owner's second run: %+v, %v", res, err)
	}
	list, err = h.m.Sessions(ctx, root)
	if err != nil || len(list.Sessions) != 2 {
		t.Errorf("root's list: %+v, %v; want both", list, err)
	}
	list, _ = h.m.Sessions(ctx, alice)
	if len(list.Sessions) != 1 || list.Sessions[0].ID != s.ID {
		t.Errorf("alice's list: %+v", list)
	}

	// Deleted by its owner: she is told so, root too; bob still gets the
	// unknown id's words.
	if err := h.m.DeleteSession(ctx, alice, s.ID); err != nil {
		t.Fatal(err)
	}
	_, err = h.m.Session(ctx, alice, s.ID)
	if e := apiErr(t, err, api.ErrSessionNotFound); !strings.Contains(e.Message, "it was deleted") {
		t.Errorf("owner after DELETE: %q", e.Message)
	}
	_, err = h.run(ctx, root, s.ID, "3")
	if e := apiErr(t, err, api.ErrSessionNotFound); !strings.Contains(e.Message, "it was deleted") {
		t.Errorf("root after DELETE: %q", e.Message)
	}
	_, err = h.m.Session(ctx, bob, s.ID)
	if got := words(apiErr(t, err, api.ErrSessionNotFound), s.ID); got != unknown {
		t.Errorf("another uid after DELETE: %q, want the unknown id's %q", got, unknown)
	}
	err = h.m.DeleteSession(ctx, alice, s.ID)
	apiErr(t, err, api.ErrSessionNotFound)
	if c, r := f.ended(); c != 1 || r != 1 {
		t.Errorf("after DELETE twice: closed %d, released %d", c, r)
	}
	h.wantEvents(map[string]int{"created": 2, "deleted": 1})
}

// Root may delete anyone's session.
func TestRootDeletes(t *testing.T) {
	h := newHarness(t, Config{})
	s := h.create(alice, nil)
	if err := h.m.DeleteSession(context.Background(), root, s.ID); err != nil {
		t.Fatal(err)
	}
	if c, r := h.interp(s.ID).ended(); c != 1 || r != 1 {
		t.Errorf("closed %d, released %d", c, r)
	}
	if h.m.Open() != 0 {
		t.Errorf("Open() = %d after the only session was deleted", h.m.Open())
	}
}

// A second run while one is in progress is refused at once, not queued.
func TestBusy(t *testing.T) {
	h := newHarness(t, Config{})
	s := h.create(alice, nil)
	f := h.interp(s.ID)
	b := block(f, true, true)
	first := h.goRun(alice, s.ID, "long")
	<-b.entered

	_, err := h.run(context.Background(), alice, s.ID, "second")
	apiErr(t, err, api.ErrSessionBusy)
	_, err = h.run(context.Background(), root, s.ID, "root too")
	apiErr(t, err, api.ErrForbidden)
	// Another uid still learns nothing, not even that it is busy.
	_, err = h.run(context.Background(), bob, s.ID, "bob")
	apiErr(t, err, api.ErrSessionNotFound)
	got, err := h.m.Session(context.Background(), alice, s.ID)
	if err != nil || !got.Busy {
		t.Errorf("GET during a run: %+v, %v; want busy", got, err)
	}

	b.release <- &nsjail.Outcome{ExitCode: 0}
	a := <-first
	if a.err != nil || a.res.Session.ExecutionCount != 1 || a.res.Session.State != api.SessionAlive {
		t.Fatalf("the long run: %+v, %v", a.res, a.err)
	}
	f.set(func(f *fakeInterp) { f.run = nil })
	res, err := h.run(context.Background(), alice, s.ID, "after")
	if err != nil || res.Session.ExecutionCount != 2 {
		t.Fatalf("a run after the long one: %+v, %v", res, err)
	}
	if got, _ := h.m.Session(context.Background(), alice, s.ID); got.Busy {
		t.Errorf("GET after the runs: busy")
	}
	if f.runs != 2 {
		t.Errorf("the interpreter ran %d times, want 2 (refused runs must not reach it)", f.runs)
	}
}

// A run's result carries the session's state, limits and interpreter.
func TestRunResult(t *testing.T) {
	h := newHarness(t, Config{})
	s := h.create(alice, nil)
	f := h.interp(s.ID)
	var seen *nsjail.SessionRun
	f.set(func(f *fakeInterp) {
		f.run = func(ctx context.Context, f *fakeInterp, r *nsjail.SessionRun) (*nsjail.Outcome, error) {
			seen = r
			return &nsjail.Outcome{ExitCode: 3}, nil
		}
	})
	res, err := runIn(h.m, context.Background(), alice, "run-1",
		&api.RunRequest{Session: s.ID, Code: "x = 1", Stdin: "in"}, api.Limits{TimeoutMs: 1500, OutputBytes: 77}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if seen.ID != "run-1" || seen.Mode != api.ModeCell || seen.Code != "x = 1" || string(seen.Stdin) != "in" ||
		seen.Timeout != 1500*time.Millisecond || seen.OutputBytes != 77 {
		t.Errorf("the interpreter was asked: %+v", seen)
	}
	if res.ExitCode != 3 || res.Python != "3.12.4" || res.Limits == nil || res.Limits.TimeoutMs != 1500 ||
		res.Limits.OutputBytes != 77 || res.Limits.MemoryBytes != 256<<20 {
		t.Errorf("result: %+v, limits %+v", res, res.Limits)
	}
	if res.Session == nil || res.Session.ID != s.ID || res.Session.ExecutionCount != 1 || res.Session.State != api.SessionAlive ||
		!res.Session.ExpiresAt.After(s.ExpiresAt.Add(-time.Millisecond)) {
		t.Errorf("result's session: %+v (created %+v)", res.Session, s)
	}
}

// GET shows the variables and memory the interpreter reports.
func TestSessionVariables(t *testing.T) {
	h := newHarness(t, Config{})
	s := h.create(alice, nil)
	h.interp(s.ID).set(func(f *fakeInterp) {
		f.vars = []runner.Variable{{Name: "rows", Type: "list", Repr: "<list of 3 items>"}}
		f.varsMore = true
	})
	got, err := h.m.Session(context.Background(), alice, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Variables) != 1 || got.Variables[0] != (api.Variable{Name: "rows", Type: "list", Repr: "<list of 3 items>"}) ||
		!got.VariablesTruncated || got.MemoryBytes != 4<<20 {
		t.Errorf("GET: %+v", got)
	}
	list, _ := h.m.Sessions(context.Background(), alice)
	if len(list.Sessions[0].Variables) != 0 {
		t.Errorf("the list shows variables: %+v", list.Sessions[0])
	}
}

// An interpreter that dies in a run leaves the session lost: the result
// says so, later runs get session_lost (never a fresh interpreter), the
// lost event is counted once, and DELETE still ends it.
func TestLostInRun(t *testing.T) {
	h := newHarness(t, Config{})
	s := h.create(alice, nil)
	f := h.interp(s.ID)
	f.set(func(f *fakeInterp) {
		f.run = func(ctx context.Context, f *fakeInterp, r *nsjail.SessionRun) (*nsjail.Outcome, error) {
			f.mu.Lock()
			f.lost = true // as nsjail.Session once it killed the jail
			f.mu.Unlock()
			return &nsjail.Outcome{TimedOut: true, Lost: true, ExitCode: 137}, nil
		}
	})
	res, err := h.run(context.Background(), alice, s.ID, "while True: pass")
	if err != nil {
		t.Fatal(err)
	}
	if res.Session.State != api.SessionLost || !res.TimedOut || res.Error != nil || res.Session.ExecutionCount != 1 {
		t.Errorf("the run that lost it: %+v, session %+v", res, res.Session)
	}
	for i := 0; i < 3; i++ {
		_, err = h.run(context.Background(), alice, s.ID, "x")
		if e := apiErr(t, err, api.ErrSessionLost); !strings.Contains(e.Message, s.ID) {
			t.Errorf("session_lost: %q", e.Message)
		}
	}
	got, err := h.m.Session(context.Background(), alice, s.ID)
	if err != nil || got.State != api.SessionLost {
		t.Errorf("GET: %+v, %v; want lost", got, err)
	}
	if f.runs != 1 {
		t.Errorf("the interpreter ran %d times, want 1", f.runs)
	}
	h.wantEvents(map[string]int{"created": 1, "lost": 1})
	if err := h.m.DeleteSession(context.Background(), alice, s.ID); err != nil {
		t.Fatal(err)
	}
	h.wantEvents(map[string]int{"created": 1, "lost": 1, "deleted": 1})
}

// An interpreter that died between runs (out of memory in a thread, a
// crash) is lost too: noticed by the next run, counted once.
func TestLostBetweenRuns(t *testing.T) {
	h := newHarness(t, Config{})
	s := h.create(alice, nil)
	f := h.interp(s.ID)
	if _, err := h.run(context.Background(), alice, s.ID, "ok"); err != nil {
		t.Fatal(err)
	}
	f.set(func(f *fakeInterp) { f.lost = true })
	for i := 0; i < 3; i++ {
		_, err := h.run(context.Background(), alice, s.ID, "x")
		apiErr(t, err, api.ErrSessionLost)
	}
	if got, _ := h.m.Session(context.Background(), alice, s.ID); got.State != api.SessionLost {
		t.Errorf("GET: state %s, want lost", got.State)
	}
	h.wantEvents(map[string]int{"created": 1, "lost": 1})
}

// The interpreter dies after the manager's checks, as the run begins:
// Run says ErrSessionLost; the caller gets session_lost, counted once.
func TestLostAsRunBegins(t *testing.T) {
	h := newHarness(t, Config{})
	s := h.create(alice, nil)
	f := h.interp(s.ID)
	f.set(func(f *fakeInterp) {
		f.before = func() { f.set(func(f *fakeInterp) { f.lost = true }) }
	})
	_, err := h.run(context.Background(), alice, s.ID, "x")
	apiErr(t, err, api.ErrSessionLost)
	_, err = h.run(context.Background(), alice, s.ID, "y")
	apiErr(t, err, api.ErrSessionLost)
	if got, _ := h.m.Session(context.Background(), alice, s.ID); got.State != api.SessionLost || got.Busy {
		t.Errorf("GET: %+v; want lost, not busy", got)
	}
	h.wantEvents(map[string]int{"created": 1, "lost": 1})
}

// Any other error of Run is passed on, and the session stays usable.
func TestRunError(t *testing.T) {
	h := newHarness(t, Config{})
	s := h.create(alice, nil)
	f := h.interp(s.ID)
	boom := errors.New("stdout pipe: too many open files")
	f.set(func(f *fakeInterp) {
		f.run = func(context.Context, *fakeInterp, *nsjail.SessionRun) (*nsjail.Outcome, error) { return nil, boom }
	})
	if _, err := h.run(context.Background(), alice, s.ID, "x"); !errors.Is(err, boom) {
		t.Fatalf("run: %v, want %v", err, boom)
	}
	f.set(func(f *fakeInterp) { f.run = nil })
	res, err := h.run(context.Background(), alice, s.ID, "y")
	if err != nil || res.Session.ExecutionCount != 1 {
		t.Errorf("the next run: %+v, %v", res, err)
	}
}

// DELETE during a run cancels it: the run's ctx ends, the result says the
// session was deleted, and the interpreter is closed once.
func TestDeleteDuringRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		// The fake's run ends on its ctx, on Close, or either.
		onCtx, onClose bool
	}{
		{"run sees its ctx", true, false},
		{"run sees its interpreter closed", false, true},
		{"run sees either", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Config{})
			s := h.create(alice, nil)
			f := h.interp(s.ID)
			b := block(f, tc.onCtx, tc.onClose)
			run := h.goRun(alice, s.ID, "long")
			<-b.entered
			if err := h.m.DeleteSession(context.Background(), alice, s.ID); err != nil {
				t.Fatal(err)
			}
			a := <-run
			if a.err != nil {
				t.Fatalf("the run: %v", a.err)
			}
			if tc.onCtx && !tc.onClose {
				if err := <-b.sawCancel; !errors.Is(err, context.Canceled) {
					t.Errorf("the run's ctx: %v, want canceled", err)
				}
			}
			if a.res.Error == nil || a.res.Error.Type != api.ErrSessionNotFound || !strings.Contains(a.res.Error.Message, "deleted") {
				t.Errorf("the run's error: %+v; want session_not_found saying it was deleted", a.res.Error)
			}
			if a.res.Session == nil || a.res.Session.State != api.SessionLost {
				t.Errorf("the run's session: %+v; want lost", a.res.Session)
			}
			if c, r := f.ended(); c != 1 || r != 1 {
				t.Errorf("closed %d, released %d", c, r)
			}
			_, err := h.run(context.Background(), alice, s.ID, "after")
			if e := apiErr(t, err, api.ErrSessionNotFound); !strings.Contains(e.Message, "it was deleted") {
				t.Errorf("a run after: %q", e.Message)
			}
			h.wantEvents(map[string]int{"created": 1, "deleted": 1})
		})
	}
}

// DELETE lands between the manager's checks and the interpreter's run:
// the caller is told the session was deleted, not that it was lost.
func TestDeleteAsRunBegins(t *testing.T) {
	h := newHarness(t, Config{})
	s := h.create(alice, nil)
	f := h.interp(s.ID)
	var derr error
	f.set(func(f *fakeInterp) {
		f.before = func() { derr = h.m.DeleteSession(context.Background(), alice, s.ID) }
	})
	res, err := h.run(context.Background(), alice, s.ID, "x")
	if derr != nil {
		t.Fatalf("DELETE: %v", derr)
	}
	var e *api.Error
	switch {
	case err != nil && errors.As(err, &e):
	case err == nil && res.Error != nil:
		e = res.Error
	default:
		t.Fatalf("run: %+v, %v; want session_not_found", res, err)
	}
	if e.Type != api.ErrSessionNotFound || !strings.Contains(e.Message, "deleted") {
		t.Errorf("run: %v; want session_not_found saying it was deleted", e)
	}
	h.wantEvents(map[string]int{"created": 1, "deleted": 1})
}

// A session ends after its idle timeout without a run: its owner (and
// root) are told why, others get the unknown id's words.
func TestExpireIdle(t *testing.T) {
	h := newHarness(t, Config{})
	s := h.create(alice, &api.SessionRequest{IdleTimeoutMs: 60_000})
	if want := s.LastUsedAt.Add(time.Minute); !s.ExpiresAt.Equal(want) || s.IdleTimeoutMs != 60_000 {
		t.Fatalf("expires_at %v, want %v (idle %d ms)", s.ExpiresAt, want, s.IdleTimeoutMs)
	}
	// A run moves the expiry on.
	res, err := h.run(context.Background(), alice, s.ID, "x")
	if err != nil {
		t.Fatal(err)
	}
	exp := res.Session.ExpiresAt
	if exp.Before(s.ExpiresAt) {
		t.Errorf("expires_at after a run %v, before %v", exp, s.ExpiresAt)
	}
	if got, _ := h.m.Session(context.Background(), alice, s.ID); !got.ExpiresAt.Equal(exp) {
		t.Errorf("GET's expires_at %v, the run's %v", got.ExpiresAt, exp)
	}

	h.m.expire(exp)
	if _, err := h.m.Session(context.Background(), alice, s.ID); err != nil {
		t.Fatalf("at exactly expires_at it ended: %v", err)
	}
	h.m.expire(exp.Add(time.Millisecond))
	f := h.interp(s.ID)
	if c, r := f.ended(); c != 1 || r != 1 {
		t.Fatalf("after expiry: closed %d, released %d", c, r)
	}
	for _, who := range []peercred.Peer{alice, root} {
		_, err := h.run(context.Background(), who, s.ID, "x")
		if e := apiErr(t, err, api.ErrSessionNotFound); !strings.Contains(e.Message, "expired after 1m0s without a run") {
			t.Errorf("uid %d after idle expiry: %q", who.UID, e.Message)
		}
	}
	_, err = h.m.Session(context.Background(), bob, h.unknownID())
	unknown := words(apiErr(t, err, api.ErrSessionNotFound), h.unknownID())
	_, err = h.m.Session(context.Background(), bob, s.ID)
	if got := words(apiErr(t, err, api.ErrSessionNotFound), s.ID); got != unknown {
		t.Errorf("another uid after expiry: %q, want %q", got, unknown)
	}
	h.m.expire(exp.Add(time.Hour))
	if c, r := f.ended(); c != 1 || r != 1 {
		t.Errorf("after another expiry pass: closed %d, released %d", c, r)
	}
	h.wantEvents(map[string]int{"created": 1, "expired": 1})
}

// However busy, a session ends at the maximum lifetime.
func TestExpireLifetime(t *testing.T) {
	h := newHarness(t, Config{MaxLifetime: 30 * time.Minute})
	s := h.create(alice, &api.SessionRequest{IdleTimeoutMs: 3_600_000})
	if want := s.CreatedAt.Add(30 * time.Minute); !s.ExpiresAt.Equal(want) {
		t.Fatalf("expires_at %v, want the lifetime's end %v", s.ExpiresAt, want)
	}
	res, err := h.run(context.Background(), alice, s.ID, "x")
	if err != nil || !res.Session.ExpiresAt.Equal(s.ExpiresAt) {
		t.Fatalf("a run moved expires_at past the lifetime: %+v, %v", res.Session, err)
	}
	h.m.expire(s.ExpiresAt.Add(time.Millisecond))
	for _, who := range []peercred.Peer{alice, root} {
		_, err = h.m.Session(context.Background(), who, s.ID)
		if e := apiErr(t, err, api.ErrSessionNotFound); !strings.Contains(e.Message, "longest a session may live (30m0s)") {
			t.Errorf("uid %d after the lifetime: %q", who.UID, e.Message)
		}
	}
	_, err = h.m.Session(context.Background(), bob, s.ID)
	if e := apiErr(t, err, api.ErrSessionNotFound); strings.Contains(e.Message, "longest") {
		t.Errorf("another uid learns why: %q", e.Message)
	}
	h.wantEvents(map[string]int{"created": 1, "expired": 1})
}

// A run in progress is never expired under it; once it is over, the
// session expires as ever.
func TestExpireSkipsBusy(t *testing.T) {
	h := newHarness(t, Config{})
	s := h.create(alice, &api.SessionRequest{IdleTimeoutMs: 1000})
	f := h.interp(s.ID)
	b := block(f, true, true)
	run := h.goRun(alice, s.ID, "long")
	<-b.entered
	h.m.expire(time.Now().Add(24 * time.Hour))
	b.release <- &nsjail.Outcome{}
	if a := <-run; a.err != nil || a.res.Error != nil {
		t.Fatalf("the run: %+v, %v", a.res, a.err)
	}
	if c, _ := f.ended(); c != 0 {
		t.Fatalf("expired during its run")
	}
	h.m.expire(time.Now().Add(24 * time.Hour))
	if c, r := f.ended(); c != 1 || r != 1 {
		t.Errorf("after the run and expiry: closed %d, released %d", c, r)
	}
}

// A run that comes after the session's time but before the reaper's pass
// ends it and is told why, as the reaper's pass would say.
func TestRunAfterExpiry(t *testing.T) {
	for _, tc := range []struct {
		name string
		back time.Duration // how far created and last used are moved back
		life time.Duration
		want string
	}{
		{"idle", 2 * time.Minute, time.Hour, "expired after 1m0s without a run"},
		{"lifetime", 2 * time.Hour, time.Hour, "longest a session may live (1h0m0s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Config{MaxLifetime: tc.life})
			s := h.create(alice, &api.SessionRequest{IdleTimeoutMs: 60_000})
			if tc.name == "lifetime" {
				// Used a moment ago, made long ago.
				h.m.mu.Lock()
				h.m.sessions[s.ID].created = time.Now().Add(-tc.back)
				h.m.mu.Unlock()
			} else {
				h.m.mu.Lock()
				e := h.m.sessions[s.ID]
				e.created, e.lastUsed = e.created.Add(-tc.back), e.lastUsed.Add(-tc.back)
				h.m.mu.Unlock()
			}
			_, err := h.run(context.Background(), alice, s.ID, "x")
			if e := apiErr(t, err, api.ErrSessionNotFound); !strings.Contains(e.Message, tc.want) {
				t.Errorf("run after expiry: %q, want it to say %q", e.Message, tc.want)
			}
			if f := h.interp(s.ID); f.runs != 0 {
				t.Errorf("an expired session ran code")
			}
			if c, r := h.interp(s.ID).ended(); c != 1 || r != 1 {
				t.Errorf("closed %d, released %d", c, r)
			}
			h.wantEvents(map[string]int{"created": 1, "expired": 1})
		})
	}
}

// Tombstones are forgotten after tombTTL: the owner then gets the
// generic words.
func TestTombstonesAge(t *testing.T) {
	h := newHarness(t, Config{})
	s := h.create(alice, nil)
	if err := h.m.DeleteSession(context.Background(), alice, s.ID); err != nil {
		t.Fatal(err)
	}
	h.m.expire(time.Now().Add(tombTTL + time.Hour))
	_, err := h.m.Session(context.Background(), alice, h.unknownID())
	unknown := words(apiErr(t, err, api.ErrSessionNotFound), h.unknownID())
	_, err = h.m.Session(context.Background(), alice, s.ID)
	if got := words(apiErr(t, err, api.ErrSessionNotFound), s.ID); got != unknown {
		t.Errorf("after the tombstone's time: %q, want %q", got, unknown)
	}
	h.m.mu.Lock()
	n, o := len(h.m.ended), len(h.m.order)
	h.m.mu.Unlock()
	if n != 0 || o != 0 {
		t.Errorf("tombstones kept: %d, order %d", n, o)
	}
}

// An id of an earlier boot of the daemon is said to have ended at a
// restart, to everyone.
func TestPreviousBoot(t *testing.T) {
	h := newHarness(t, Config{})
	boot := "000000"
	if h.m.boot == boot {
		boot = "ffffff"
	}
	old := "s" + boot + "-0123456789abcdef"
	var msgs []string
	for _, who := range []peercred.Peer{alice, bob, root} {
		_, err := h.run(context.Background(), who, old, "x")
		e := apiErr(t, err, api.ErrSessionNotFound)
		if !strings.Contains(e.Message, "restart") {
			t.Errorf("uid %d, an id of an earlier boot: %q; want it to say it ended at a restart", who.UID, e.Message)
		}
		msgs = append(msgs, e.Message)
		_, err = h.m.Session(context.Background(), who, old)
		if e := apiErr(t, err, api.ErrSessionNotFound); e.Message != msgs[0] {
			t.Errorf("GET says %q, run says %q", e.Message, msgs[0])
		}
	}
	if msgs[0] != msgs[1] || msgs[0] != msgs[2] {
		t.Errorf("different words for different uids: %q", msgs)
	}
	// This boot's unknown ids, and ids of no boot, are not said to be old.
	for _, id := range []string{h.unknownID(), "nonsense", "s-", "sabc-1", ""} {
		_, err := h.m.Session(context.Background(), alice, id)
		if e := apiErr(t, err, api.ErrSessionNotFound); strings.Contains(e.Message, "made before its last start") {
			t.Errorf("id %q: %q", id, e.Message)
		}
	}
}

// At most MaxPerUID sessions per uid, sessions being opened included;
// others' are not counted against it.
func TestMaxPerUID(t *testing.T) {
	h := newHarness(t, Config{MaxPerUID: 2, MaxTotal: 10})
	first := h.create(alice, nil)

	hold, opening, _ := h.openHeld(alice)

	_, err := h.m.CreateSession(context.Background(), alice, &api.SessionRequest{}, api.Limits{})
	if e := apiErr(t, err, api.ErrBusy); !strings.Contains(e.Message, "uid 1000 has 2 sessions") {
		t.Errorf("third of alice's: %q", e.Message)
	}
	h.create(bob, nil) // bob's count is his own
	close(hold)
	if err := <-opening; err != nil {
		t.Fatalf("the session being opened: %v", err)
	}
	_, err = h.m.CreateSession(context.Background(), alice, &api.SessionRequest{}, api.Limits{})
	apiErr(t, err, api.ErrBusy)

	// A lost session still counts (until deleted).
	h.interp(first.ID).set(func(f *fakeInterp) { f.lost = true })
	_, err = h.m.CreateSession(context.Background(), alice, &api.SessionRequest{}, api.Limits{})
	apiErr(t, err, api.ErrBusy)
	if err := h.m.DeleteSession(context.Background(), alice, first.ID); err != nil {
		t.Fatal(err)
	}
	h.create(alice, nil)
	if h.m.Open() != 3 {
		t.Errorf("Open() = %d, want 3", h.m.Open())
	}
}

// At most MaxTotal sessions in all, sessions being opened included.
func TestMaxTotal(t *testing.T) {
	h := newHarness(t, Config{MaxPerUID: 10, MaxTotal: 2})
	h.create(alice, nil)

	hold, opening, _ := h.openHeld(bob)

	for _, who := range []peercred.Peer{alice, root} {
		_, err := h.m.CreateSession(context.Background(), who, &api.SessionRequest{}, api.Limits{})
		if e := apiErr(t, err, api.ErrBusy); !strings.Contains(e.Message, "holds 2 sessions") {
			t.Errorf("uid %d, past the total: %q", who.UID, e.Message)
		}
	}
	close(hold)
	if err := <-opening; err != nil {
		t.Fatal(err)
	}
	_, err := h.m.CreateSession(context.Background(), alice, &api.SessionRequest{}, api.Limits{})
	apiErr(t, err, api.ErrBusy)
	h.mu.Lock()
	opens := h.opens
	h.mu.Unlock()
	if opens != 2 {
		t.Errorf("Open called %d times, want 2: refused sessions must not be opened", opens)
	}
}

// A failed open leaves nothing: no session, no count against the limits,
// no event; the error is the opener's.
func TestOpenFailure(t *testing.T) {
	h := newHarness(t, Config{MaxPerUID: 1, MaxTotal: 1})
	bad := api.Errorf(api.ErrBadRequest, "python", "no python 3.99 here")
	h.mu.Lock()
	h.openErr = bad
	h.mu.Unlock()
	for i := 0; i < 3; i++ {
		_, err := h.m.CreateSession(context.Background(), alice, &api.SessionRequest{Python: "3.99"}, api.Limits{})
		if !errors.Is(err, api.ErrBadRequest) || err != error(bad) {
			t.Fatalf("open failure: %v", err)
		}
	}
	h.mu.Lock()
	h.openErr = nil
	h.mu.Unlock()
	h.create(alice, nil) // the failures took no room
	h.m.mu.Lock()
	opening := len(h.m.opening)
	h.m.mu.Unlock()
	if opening != 0 || h.m.Open() != 1 {
		t.Errorf("opening %d, open %d", opening, h.m.Open())
	}
	h.wantEvents(map[string]int{"created": 1})
}

// A cancelled open (the caller went away while the jail was built)
// leaves nothing either.
func TestOpenCancelled(t *testing.T) {
	h := newHarness(t, Config{MaxPerUID: 1})
	h.mu.Lock()
	h.hold = make(chan struct{})
	h.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := h.m.CreateSession(ctx, alice, &api.SessionRequest{}, api.Limits{})
		done <- err
	}()
	<-h.opening
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled open: %v", err)
	}
	h.mu.Lock()
	h.hold = nil
	h.mu.Unlock()
	h.create(alice, nil)
}

// An idle timeout above the daemon's maximum is refused before anything
// is opened.
func TestIdleTimeoutOverMax(t *testing.T) {
	h := newHarness(t, Config{MaxIdle: time.Minute})
	_, err := h.m.CreateSession(context.Background(), alice, &api.SessionRequest{IdleTimeoutMs: 120_000}, api.Limits{})
	apiErr(t, err, api.ErrOverLimit)
	// No timeout asked: the default, cut to the maximum.
	s := h.create(alice, nil)
	if s.IdleTimeoutMs != 60_000 {
		t.Errorf("idle timeout %d ms, want the maximum", s.IdleTimeoutMs)
	}
	if h.opens != 1 {
		t.Errorf("Open called %d times", h.opens)
	}
}

// Close ends every session (a run in progress is cancelled), refuses new
// ones and ends one that was being opened; each interpreter is closed
// and released once.
func TestClose(t *testing.T) {
	h := newHarness(t, Config{})
	a := h.create(alice, nil)
	b := h.create(bob, nil)
	fa := h.interp(a.ID)
	blk := block(fa, true, true)
	run := h.goRun(alice, a.ID, "long")
	<-blk.entered

	hold, opening, id := h.openHeld(root)

	h.m.Close()
	r := <-run
	if r.err == nil && (r.res.Error == nil || r.res.Session.State != api.SessionLost) {
		t.Errorf("the run in progress: %+v, %+v", r.res, r.res.Session)
	}
	if r.err == nil && r.res.Error != nil && strings.Contains(r.res.Error.Message, "deleted") {
		t.Errorf("the run in progress is told its session was deleted: %q", r.res.Error.Message)
	}
	for _, s := range []string{a.ID, b.ID} {
		if c, rel := h.interp(s).ended(); c != 1 || rel != 1 {
			t.Errorf("session %s after Close: closed %d, released %d", s, c, rel)
		}
	}
	close(hold)
	err := <-opening
	apiErr(t, err, api.ErrUnavailable)
	if c, rel := h.interp(id).ended(); c != 1 || rel != 1 {
		t.Errorf("the session opened during Close: closed %d, released %d", c, rel)
	}
	h.mu.Lock()
	h.hold = nil
	h.mu.Unlock()
	_, err = h.m.CreateSession(context.Background(), alice, &api.SessionRequest{}, api.Limits{})
	apiErr(t, err, api.ErrUnavailable)
	_, err = h.run(context.Background(), alice, b.ID, "x")
	apiErr(t, err, api.ErrSessionNotFound)
	if h.m.Open() != 0 {
		t.Errorf("Open() = %d after Close", h.m.Open())
	}
	h.m.Close() // again: nothing more
	h.m.expire(time.Now().Add(48 * time.Hour))
	h.wantEvents(map[string]int{"created": 2, "ended": 3})
}

// Many sessions through every ending at once: each interpreter is closed
// and released exactly once (checked as the test ends), whatever races.
func TestEndingsRace(t *testing.T) {
	h := newHarness(t, Config{MaxPerUID: 100, MaxTotal: 100})
	var ids []string
	for i := 0; i < 40; i++ {
		ids = append(ids, h.create(alice, &api.SessionRequest{IdleTimeoutMs: 1000}).ID)
	}
	var wg sync.WaitGroup
	far := time.Now().Add(time.Hour)
	for _, id := range ids {
		wg.Add(3)
		go func() { defer wg.Done(); _ = h.m.DeleteSession(context.Background(), alice, id) }()
		go func() { defer wg.Done(); _, _ = h.run(context.Background(), alice, id, "x") }()
		go func() { defer wg.Done(); h.m.expire(far) }()
	}
	wg.Wait()
	h.m.Close()
	ev := h.eventCounts()
	if ev["created"] != 40 || ev["deleted"]+ev["expired"]+ev["ended"] != 40 || ev["lost"] != 0 {
		t.Errorf("events %v: want each of 40 sessions created and ended once", ev)
	}
}

// openHeld starts creating a session for who and holds it in the middle
// of its Open, until hold is closed; opening gets the creation's error,
// id is the session's id. Sessions created after it are not held.
func (h *harness) openHeld(who peercred.Peer) (hold chan struct{}, opening <-chan error, id string) {
	hold = make(chan struct{})
	h.mu.Lock()
	h.hold = hold
	h.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		_, err := h.m.CreateSession(context.Background(), who, &api.SessionRequest{}, api.Limits{})
		done <- err
	}()
	id = <-h.opening
	h.mu.Lock()
	h.hold = nil
	h.mu.Unlock()
	return hold, done, id
}
