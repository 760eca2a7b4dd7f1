package servertest

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/peercred"
	"github.com/cellblock/cellblock/internal/server"
)

// The stand-in executor keeps sessions in memory, as the daemon's session
// manager does in its jails: owned by the uid that made them (another
// uid, root aside, gets session_not_found), one run at a time
// (session_busy), runs carried out by the test's RunFunc with
// RunRequest.Session set, and a session marked lost (LoseSession)
// answering session_lost until deleted.

type fakeSession struct {
	info  api.Session
	busy  bool
	files map[string][]byte // by path under /work
}

// SessionRequests returns the session requests that reached the
// executor, oldest first.
func (d *Daemon) SessionRequests() []api.SessionRequest {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]api.SessionRequest(nil), d.sessionReqs...)
}

// LoseSession marks session id lost, as if its interpreter had died.
func (d *Daemon) LoseSession(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s := d.sessions[id]; s != nil {
		s.info.State = api.SessionLost
	}
}

// SetVariables sets what session id reports as its variables.
func (d *Daemon) SetVariables(id string, vars []api.Variable) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s := d.sessions[id]; s != nil {
		s.info.Variables = vars
	}
}

func (e *executor) CreateSession(ctx context.Context, owner peercred.Peer, req *api.SessionRequest, limits api.Limits) (*api.Session, error) {
	d := (*Daemon)(e)
	idle, aerr := req.IdleTimeout(time.Hour)
	if aerr != nil {
		return nil, aerr
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.sessions == nil {
		d.sessions = map[string]*fakeSession{}
	}
	d.sessionReqs = append(d.sessionReqs, *req)
	now := time.Now().UTC()
	d.sessionSeq++
	s := &fakeSession{info: api.Session{
		ID: fmt.Sprintf("s-test-%d", d.sessionSeq), State: api.SessionAlive,
		CreatedAt: now, LastUsedAt: now, ExpiresAt: now.Add(idle), IdleTimeoutMs: idle.Milliseconds(),
		OwnerUID: owner.UID, Python: req.Python, Limits: &limits,
	}}
	d.sessions[s.info.ID] = s
	info := s.info
	return &info, nil
}

// sessionFor returns the session owner may use, or session_not_found.
// Call with d.mu held.
func (d *Daemon) sessionFor(owner peercred.Peer, id string) (*fakeSession, error) {
	s := d.sessions[id]
	if s == nil || (owner.UID != 0 && owner.UID != s.info.OwnerUID) {
		return nil, api.SessionNotFound(id, "")
	}
	return s, nil
}

// sessionOwned is sessionFor for running code and writing files: the
// owner's alone, root is forbidden. Call with d.mu held.
func (d *Daemon) sessionOwned(owner peercred.Peer, id string) (*fakeSession, error) {
	s, err := d.sessionFor(owner, id)
	if err == nil && owner.UID != s.info.OwnerUID {
		return nil, api.Errorf(api.ErrForbidden, "session", "session %q belongs to uid %d: only its owner runs code in it or writes files to it", id, s.info.OwnerUID)
	}
	return s, err
}

func (e *executor) Sessions(ctx context.Context, owner peercred.Peer) (*api.SessionList, error) {
	d := (*Daemon)(e)
	d.mu.Lock()
	defer d.mu.Unlock()
	list := &api.SessionList{Sessions: []api.Session{}}
	for _, s := range d.sessions {
		if owner.UID == 0 || owner.UID == s.info.OwnerUID {
			list.Sessions = append(list.Sessions, s.info)
		}
	}
	sort.Slice(list.Sessions, func(i, j int) bool { return list.Sessions[i].ID < list.Sessions[j].ID })
	return list, nil
}

func (e *executor) Session(ctx context.Context, owner peercred.Peer, id string) (*api.Session, error) {
	d := (*Daemon)(e)
	d.mu.Lock()
	defer d.mu.Unlock()
	s, err := d.sessionFor(owner, id)
	if err != nil {
		return nil, err
	}
	info := s.info
	info.Busy = s.busy
	return &info, nil
}

func (e *executor) DeleteSession(ctx context.Context, owner peercred.Peer, id string) error {
	d := (*Daemon)(e)
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.sessionFor(owner, id); err != nil {
		return err
	}
	delete(d.sessions, id)
	return nil
}

func (e *executor) RunInSession(ctx context.Context, run *server.Run) (*api.Result, error) {
	d := (*Daemon)(e)
	owner, req := run.Owner, run.Request
	d.mu.Lock()
	s, err := d.sessionOwned(owner, req.Session)
	switch {
	case err != nil:
	case s.info.State == api.SessionLost:
		err = api.Errorf(api.ErrSessionLost, "session", "session %q lost its interpreter; delete it and create another", req.Session)
	case s.busy:
		err = api.Errorf(api.ErrSessionBusy, "session", "another run is in progress in session %q", req.Session)
	default:
		s.busy = true
	}
	d.mu.Unlock()
	if err != nil {
		return nil, err
	}
	res, err := e.Execute(ctx, run)
	d.mu.Lock()
	defer d.mu.Unlock()
	s.busy = false
	if err != nil {
		return nil, err
	}
	s.info.ExecutionCount++
	now := time.Now().UTC()
	s.info.LastUsedAt = now
	s.info.ExpiresAt = now.Add(time.Duration(s.info.IdleTimeoutMs) * time.Millisecond)
	res.Session = &api.SessionState{ID: s.info.ID, ExecutionCount: s.info.ExecutionCount, State: s.info.State, ExpiresAt: s.info.ExpiresAt}
	return res, nil
}
