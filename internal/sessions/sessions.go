// Package sessions keeps cellblockd's sessions: interpreters that stay
// alive between runs (nsjail.Session), each owned by the uid that created
// it. It decides who may use a session: its owner runs code in it and
// writes files to it; root may list, show, read its files and delete it,
// and is refused (forbidden) code and files, which would reach an
// interpreter that the owner's earlier code may still be running in (a
// thread it left can read a later run's code and inputs and answer for
// it); anyone else is told session_not_found, exactly as for an id that
// never existed. It lets one run at a time into each (session_busy),
// bounds how many there are
// (per uid and in all), ends them after their idle timeout or maximum
// lifetime, and remembers for a while why a session ended, so that its
// owner is told (expired, deleted, restarted) rather than handed a fresh
// interpreter. It is the server's Sessions and Files. It does not build
// jails (its Jails, the daemon's runs, do: a session is a long-lived run
// on the path of every run) and does not listen.
package sessions

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/peercred"
	"github.com/cellblock/cellblock/internal/server"
	"github.com/cellblock/cellblock/nsjail"
	"github.com/cellblock/cellblock/nsjail/runner"
	"github.com/cellblock/cellblock/nsjail/workdir"
)

// Interp is a session's live interpreter (an *nsjail.Session).
type Interp interface {
	Run(ctx context.Context, run *nsjail.SessionRun, onOutput nsjail.OutputFunc) (*nsjail.Outcome, error)
	Close()
	Lost() bool
	Variables() ([]runner.Variable, bool)
	MemoryUsage() int64
	// Work is the session's /work, open (nil when the daemon could not
	// open it); readers clone it.
	Work() *workdir.Dir
	// PutFiles writes files under /work through the runner.
	PutFiles(ctx context.Context, files []nsjail.InputFile) error
}

// Jails are what the manager needs of the daemon's runs (runs.Executor):
// the jail of a new session, opened on the path of every run, the result
// of a run's outcome, and files in and out of a session's /work.
type Jails interface {
	// OpenSession builds the jail of session id, owned by uid owner, for
	// req under limits l.
	OpenSession(ctx context.Context, id string, owner uint32, req *api.SessionRequest, l api.Limits) (*Opened, error)
	// Result maps a run's outcome to the result object.
	Result(out *nsjail.Outcome) *api.Result
	Files
}

// Opened is a session's jail, open, with what the session holds for it
// (Jails.OpenSession).
type Opened struct {
	Interp      Interp
	Python      string
	Environment *api.Environment
	// Release gives up what the session held besides its interpreter,
	// after Interp is closed.
	Release func()
	// Denials, if set, returns what the sandbox refused the session since
	// the last call: taken after each run, for its result. SecretUses,
	// if set, returns the uses of its secrets likewise.
	Denials    func() []api.Denial
	SecretUses func() []api.SecretUse
}

// Defaults of Config.
const (
	DefaultMaxTotal    = 32
	DefaultMaxPerUID   = 8
	DefaultMaxIdle     = time.Hour
	DefaultMaxLifetime = 8 * time.Hour
	// tombs is how many ended sessions are remembered, tombTTL for how
	// long.
	tombs   = 4096
	tombTTL = 24 * time.Hour
)

// Config bounds the sessions of a daemon.
type Config struct {
	// MaxTotal sessions may exist at once, MaxPerUID of them one uid's.
	MaxTotal, MaxPerUID int
	// MaxIdle is the longest idle timeout a request may ask for;
	// MaxLifetime ends a session however busy it was.
	MaxIdle, MaxLifetime time.Duration
	// Off turns sessions off (--max-sessions 0): creating one is refused,
	// and there are none to list, run in or read.
	Off bool
	// Jails opens the sessions' jails. Required.
	Jails Jails
	// FileCaps are the caps on files in (the server's).
	FileCaps api.FileCaps
	// Event, if set, is told "created", "expired", "deleted", "lost" and
	// "ended" (shutdown), once per session and event.
	Event func(kind string)
	Log   *slog.Logger
}

// Manager keeps the sessions: the server's Sessions and Files.
type Manager struct {
	cfg  Config
	boot string // in every id: tells a previous daemon's ids apart

	mu       sync.Mutex
	sessions map[string]*entry
	opening  map[uint32]int // sessions being opened, per uid
	ended    map[string]tomb
	order    []string // ended, oldest first
	closed   bool
	stop     chan struct{}
	done     chan struct{}
}

type entry struct {
	id        string
	owner     uint32
	created   time.Time
	lastUsed  time.Time
	idle      time.Duration
	count     int
	busy      bool
	lost      bool
	limits    api.Limits
	network   *api.Network
	secrets   []string
	opened    *Opened
	cancelRun context.CancelFunc // the run in progress, if any
}

type tomb struct {
	owner uint32
	why   string
	at    time.Time
}

// New starts a Manager; Close it to end every session.
func New(cfg Config) (*Manager, error) {
	if cfg.Jails == nil {
		return nil, errors.New("sessions: Jails is required")
	}
	if cfg.MaxTotal <= 0 {
		cfg.MaxTotal = DefaultMaxTotal
	}
	if cfg.MaxPerUID <= 0 {
		cfg.MaxPerUID = DefaultMaxPerUID
	}
	if cfg.MaxIdle <= 0 {
		cfg.MaxIdle = DefaultMaxIdle
	}
	if cfg.MaxLifetime <= 0 {
		cfg.MaxLifetime = DefaultMaxLifetime
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Event == nil {
		cfg.Event = func(string) {}
	}
	m := &Manager{cfg: cfg, boot: randHex(3), sessions: map[string]*entry{}, opening: map[uint32]int{},
		ended: map[string]tomb{}, stop: make(chan struct{}), done: make(chan struct{})}
	go m.reap()
	return m, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newID is a fresh session id: "s", this daemon's boot tag, "-", random.
func (m *Manager) newID() string { return "s" + m.boot + "-" + randHex(8) }

// notFound is the error for id, told to caller: why it ended when caller
// owned it (or is root), the same words as for an unknown id otherwise.
// Call with m.mu held.
func (m *Manager) notFound(caller peercred.Peer, id string) *api.Error {
	if t, ok := m.ended[id]; ok && (caller.UID == 0 || caller.UID == t.owner) {
		return api.SessionNotFound(id, t.why)
	}
	if boot, _, ok := strings.Cut(strings.TrimPrefix(id, "s"), "-"); ok && strings.HasPrefix(id, "s") && len(boot) == len(m.boot) && boot != m.boot {
		// Not this daemon's: every caller gets the same words.
		return api.SessionNotFound(id, "sessions end when cellblockd restarts, and this one was made before its last start")
	}
	return api.SessionNotFound(id, "")
}

// lookup returns the session caller may use. Call with m.mu held.
func (m *Manager) lookup(caller peercred.Peer, id string) (*entry, *api.Error) {
	e := m.sessions[id]
	if e == nil || (caller.UID != 0 && caller.UID != e.owner) {
		return nil, m.notFound(caller, id)
	}
	return e, nil
}

// lookupOwned returns the session caller may run code in or write files
// to: only its owner may. Root, who sees every session, is told so
// (forbidden); anyone else, as lookup tells them. Call with m.mu held.
func (m *Manager) lookupOwned(caller peercred.Peer, id string) (*entry, *api.Error) {
	e, aerr := m.lookup(caller, id)
	if aerr != nil {
		return nil, aerr
	}
	if caller.UID != e.owner {
		return nil, api.Errorf(api.ErrForbidden, "session", "session %q belongs to uid %d: only its owner runs code in it or writes files to it, "+
			"since code the owner ran earlier may still run there and see what comes next (root may list, show, read the files of and delete it)", e.id, e.owner)
	}
	return e, nil
}

// bury ends e's life in the map and remembers why. Call with m.mu held;
// the caller closes its interpreter.
func (m *Manager) bury(e *entry, why string) {
	delete(m.sessions, e.id)
	if len(m.order) >= tombs {
		delete(m.ended, m.order[0])
		m.order = m.order[1:]
	}
	m.ended[e.id] = tomb{owner: e.owner, why: why, at: time.Now()}
	m.order = append(m.order, e.id)
}

// end closes e's interpreter and releases what it held.
func (m *Manager) end(e *entry, kind string) {
	e.opened.Interp.Close()
	if e.opened.Release != nil {
		e.opened.Release()
	}
	m.cfg.Event(kind)
	m.mu.Lock()
	runs := e.count // a run ending now may still count itself
	m.mu.Unlock()
	m.cfg.Log.Info("session ended", "session", e.id, "uid", e.owner, "how", kind, "runs", runs)
}

// markLost records that e's interpreter is gone; true the first time, when
// the caller tells of it (lostEvent). Call with m.mu held.
func (m *Manager) markLost(e *entry) bool {
	if e.lost {
		return false
	}
	e.lost = true
	return true
}

// lostEvent counts and logs e's loss, once (see markLost).
func (m *Manager) lostEvent(e *entry, runID string, out *nsjail.Outcome) {
	m.cfg.Event("lost")
	if out == nil {
		m.cfg.Log.Info("session lost", "session", e.id, "uid", e.owner, "run", runID)
		return
	}
	m.cfg.Log.Info("session lost", "session", e.id, "uid", e.owner, "run", runID, "timed_out", out.TimedOut, "oom_killed", out.OOMKilled)
}

// expiresAt is when e ends unless used: its idle timeout after its last
// use, or its maximum lifetime.
func (m *Manager) expiresAt(e *entry) time.Time {
	idle := e.lastUsed.Add(e.idle)
	life := e.created.Add(m.cfg.MaxLifetime)
	if life.Before(idle) {
		return life
	}
	return idle
}

// expiry says why e has expired at now, for its owner; "" if it has not.
func (m *Manager) expiry(e *entry, now time.Time) string {
	if !now.After(m.expiresAt(e)) {
		return ""
	}
	if !now.Before(e.created.Add(m.cfg.MaxLifetime)) {
		return fmt.Sprintf("it reached the longest a session may live (%v)", m.cfg.MaxLifetime)
	}
	return fmt.Sprintf("it expired after %v without a run", e.idle)
}

// CreateSession starts a session for owner (server.Sessions).
func (m *Manager) CreateSession(ctx context.Context, owner peercred.Peer, req *api.SessionRequest, l api.Limits) (*api.Session, error) {
	if m.cfg.Off {
		return nil, api.Errorf(api.ErrUnavailable, "", "sessions are turned off on this cellblockd (--max-sessions 0)")
	}
	idle, aerr := req.IdleTimeout(m.cfg.MaxIdle)
	if aerr != nil {
		return nil, aerr
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, api.Errorf(api.ErrUnavailable, "", "cellblockd is shutting down")
	}
	mine := m.opening[owner.UID]
	for _, e := range m.sessions {
		if e.owner == owner.UID {
			mine++
		}
	}
	total := len(m.sessions)
	for _, n := range m.opening {
		total += n
	}
	switch {
	case mine >= m.cfg.MaxPerUID:
		m.mu.Unlock()
		return nil, api.Errorf(api.ErrBusy, "", "uid %d has %d sessions, the most one uid may have; delete one (DELETE %s/ID)", owner.UID, mine, api.PathSessions)
	case total >= m.cfg.MaxTotal:
		m.mu.Unlock()
		return nil, api.Errorf(api.ErrBusy, "", "cellblockd holds %d sessions, the most it keeps; retry later", total)
	}
	m.opening[owner.UID]++
	id := m.newID()
	m.mu.Unlock()

	opened, err := m.cfg.Jails.OpenSession(ctx, id, owner.UID, req, l)

	m.mu.Lock()
	if m.opening[owner.UID]--; m.opening[owner.UID] == 0 {
		delete(m.opening, owner.UID)
	}
	if err != nil {
		m.mu.Unlock()
		return nil, err
	}
	now := time.Now().UTC()
	e := &entry{id: id, owner: owner.UID, created: now, lastUsed: now, idle: idle, limits: l, network: req.Network, secrets: req.Secrets, opened: opened}
	if m.closed {
		m.mu.Unlock()
		m.end(e, "ended")
		return nil, api.Errorf(api.ErrUnavailable, "", "cellblockd is shutting down")
	}
	m.sessions[id] = e
	info := m.describe(e, false)
	m.mu.Unlock()
	m.cfg.Event("created")
	m.cfg.Log.Info("session created", "session", id, "uid", owner.UID, "python", opened.Python)
	return info, nil
}

// describe is e as the API shows it, with the memory it holds now; vars
// adds its variables. Call with m.mu held.
func (m *Manager) describe(e *entry, vars bool) *api.Session {
	l := e.limits
	s := &api.Session{
		ID: e.id, State: api.SessionAlive, Busy: e.busy, ExecutionCount: e.count,
		CreatedAt: e.created, LastUsedAt: e.lastUsed, ExpiresAt: m.expiresAt(e),
		IdleTimeoutMs: e.idle.Milliseconds(), OwnerUID: e.owner,
		Python: e.opened.Python, Limits: &l, Environment: e.opened.Environment, Network: e.network,
		Secrets: e.secrets,
	}
	if e.lost || e.opened.Interp.Lost() {
		s.State = api.SessionLost
	}
	s.MemoryBytes = e.opened.Interp.MemoryUsage()
	if vars {
		vs, more := e.opened.Interp.Variables()
		for _, v := range vs {
			s.Variables = append(s.Variables, api.Variable{Name: v.Name, Type: v.Type, Repr: v.Repr})
		}
		s.VariablesTruncated = more
	}
	return s
}

// Sessions lists the sessions caller may see (server.Sessions).
func (m *Manager) Sessions(ctx context.Context, caller peercred.Peer) (*api.SessionList, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	list := &api.SessionList{Sessions: []api.Session{}}
	for _, e := range m.sessions {
		if caller.UID == 0 || caller.UID == e.owner {
			list.Sessions = append(list.Sessions, *m.describe(e, false))
		}
	}
	sort.Slice(list.Sessions, func(i, j int) bool { return list.Sessions[i].CreatedAt.Before(list.Sessions[j].CreatedAt) })
	return list, nil
}

// Session describes one (server.Sessions).
func (m *Manager) Session(ctx context.Context, caller peercred.Peer, id string) (*api.Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, aerr := m.lookup(caller, id)
	if aerr != nil {
		return nil, aerr
	}
	return m.describe(e, true), nil
}

// DeleteSession ends one (server.Sessions).
func (m *Manager) DeleteSession(ctx context.Context, caller peercred.Peer, id string) error {
	m.mu.Lock()
	e, aerr := m.lookup(caller, id)
	if aerr != nil {
		m.mu.Unlock()
		return aerr
	}
	m.bury(e, "it was deleted")
	if e.cancelRun != nil {
		e.cancelRun()
	}
	m.mu.Unlock()
	m.end(e, "deleted")
	return nil
}

// RunInSession carries out run in the session its request names
// (server.Sessions).
func (m *Manager) RunInSession(ctx context.Context, r *server.Run) (*api.Result, error) {
	caller, runID, req, l := r.Owner, r.ID, r.Request, r.Limits
	if m.cfg.Off {
		return nil, api.SessionNotFound(req.Session, "this daemon keeps no sessions")
	}
	m.mu.Lock()
	e, aerr := m.lookupOwned(caller, req.Session)
	if aerr != nil {
		m.mu.Unlock()
		return nil, aerr
	}
	if e.lost || e.opened.Interp.Lost() {
		// Lost between runs (or in one): noticed now, if not before.
		first := m.markLost(e)
		m.mu.Unlock()
		if first {
			m.lostEvent(e, runID, nil)
		}
		return nil, api.Errorf(api.ErrSessionLost, "session", "session %q lost its interpreter (out of memory, killed after a timeout, or the process exited): its variables are gone; delete it and create another", e.id)
	}
	if e.busy {
		m.mu.Unlock()
		return nil, api.Errorf(api.ErrSessionBusy, "session", "another run is in progress in session %q; a session runs one at a time", e.id)
	}
	if why := m.expiry(e, time.Now()); why != "" {
		// Before the reaper came by: told as it would tell.
		m.bury(e, why)
		m.mu.Unlock()
		m.end(e, "expired")
		return nil, m.notFoundLocked(caller, req.Session)
	}
	e.busy = true
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	e.cancelRun = cancel
	m.mu.Unlock()

	if len(req.Files) > 0 {
		if err := m.putFiles(ctx, e, req.Files, "files"); err != nil {
			m.mu.Lock()
			e.busy, e.cancelRun, e.lastUsed = false, nil, time.Now().UTC()
			m.mu.Unlock()
			return nil, err
		}
	}
	snap := m.cfg.Jails.SnapshotOut(e.opened.Interp.Work())

	mode := req.Mode
	if mode == "" {
		mode = api.ModeCell
	}
	run := &nsjail.SessionRun{
		ID: runID, Mode: mode, Code: req.Code, Inputs: req.Inputs, Stdin: []byte(req.Stdin),
		Timeout:     time.Duration(l.TimeoutMs) * time.Millisecond,
		OutputBytes: l.OutputBytes,
	}
	if r.Tools != nil {
		run.Tools = r.Tools
	}
	out, err := e.opened.Interp.Run(ctx, run, r.Output)
	var files []api.File
	var skipped []api.FileSkipped
	if err == nil {
		// Still busy: nothing but the run's leftovers writes now.
		files, skipped = m.cfg.Jails.CollectOut(e.opened.Interp.Work(), caller.UID, req.ReturnFiles == api.ReturnFilesInline, snap)
	}

	m.mu.Lock()
	e.busy = false
	e.cancelRun = nil
	e.lastUsed = time.Now().UTC()
	if m.sessions[e.id] != e {
		// Deleted (or the daemon stopping) while the run was in progress
		// or about to start: it closed the interpreter, whatever Run saw
		// first (its ctx, the interpreter killed, or already lost).
		why := "it ended"
		if t, ok := m.ended[e.id]; ok {
			why = t.why
		}
		aerr := api.SessionNotFound(e.id, why+" while this run was in progress")
		if err != nil {
			m.mu.Unlock()
			return nil, aerr
		}
		e.count++
		res := m.sessionResult(e, out, l)
		res.Files, res.FilesSkipped = files, skipped
		res.Session.State = api.SessionLost
		if out.Canceled || out.Lost {
			res.Error = aerr // else it ran to its end just before
		}
		m.mu.Unlock()
		return res, nil
	}
	if errors.Is(err, nsjail.ErrSessionLost) {
		first := m.markLost(e)
		m.mu.Unlock()
		if first {
			m.lostEvent(e, runID, nil)
		}
		return nil, api.Errorf(api.ErrSessionLost, "session", "session %q lost its interpreter: its variables are gone; delete it and create another", e.id)
	}
	if err != nil {
		m.mu.Unlock()
		return nil, err
	}
	e.count++
	first := out.Lost && m.markLost(e)
	res := m.sessionResult(e, out, l)
	res.Files, res.FilesSkipped = files, skipped
	m.mu.Unlock()
	if first {
		m.lostEvent(e, runID, out)
	}
	return res, nil
}

// sessionResult is the result of a run in e that ended in out, under the
// run's limits l. Call with m.mu held.
func (m *Manager) sessionResult(e *entry, out *nsjail.Outcome, l api.Limits) *api.Result {
	res := m.cfg.Jails.Result(out)
	// The session's limits, with the run's own timeout and output cap.
	limits := e.limits
	limits.TimeoutMs, limits.OutputBytes = l.TimeoutMs, l.OutputBytes
	res.Limits = &limits
	res.Python = e.opened.Python
	res.Environment = e.opened.Environment
	st := api.SessionAlive
	if e.lost {
		st = api.SessionLost
	}
	res.Session = &api.SessionState{ID: e.id, ExecutionCount: e.count, State: st, ExpiresAt: m.expiresAt(e)}
	if e.opened.Denials != nil {
		res.Denials = e.opened.Denials()
	}
	if e.opened.SecretUses != nil {
		res.SecretUses = e.opened.SecretUses()
	}
	return res
}

// notFoundLocked is notFound, taking m.mu.
func (m *Manager) notFoundLocked(caller peercred.Peer, id string) *api.Error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.notFound(caller, id)
}

// reap ends the sessions that expired, once a second.
func (m *Manager) reap() {
	defer close(m.done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		m.expire(time.Now())
	}
}

// expire ends every idle session whose time is up at now.
func (m *Manager) expire(now time.Time) {
	var gone []*entry
	m.mu.Lock()
	for _, e := range m.sessions {
		if e.busy {
			continue
		}
		if why := m.expiry(e, now); why != "" {
			m.bury(e, why)
			gone = append(gone, e)
		}
	}
	for id, t := range m.ended {
		if now.Sub(t.at) > tombTTL {
			delete(m.ended, id)
		}
	}
	if len(m.ended) < len(m.order) {
		kept := m.order[:0]
		for _, id := range m.order {
			if _, ok := m.ended[id]; ok {
				kept = append(kept, id)
			}
		}
		m.order = kept
	}
	m.mu.Unlock()
	for _, e := range gone {
		m.end(e, "expired")
	}
}

// Open counts the sessions alive now.
func (m *Manager) Open() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sessions)
}

// Close ends every session: the daemon is stopping.
func (m *Manager) Close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	all := make([]*entry, 0, len(m.sessions))
	for _, e := range m.sessions {
		all = append(all, e)
		if e.cancelRun != nil {
			e.cancelRun()
		}
	}
	for _, e := range all {
		m.bury(e, "cellblockd was shutting down")
	}
	m.mu.Unlock()
	close(m.stop)
	<-m.done
	for _, e := range all {
		m.end(e, "ended")
	}
}
