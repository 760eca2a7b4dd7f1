package server

import (
	"context"
	"net/http"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/peercred"
)

// SessionManager is the daemon's side of the session API. An Executor that
// implements it gets the routes of registerSessions, and runs that name a
// session go to RunInSession instead of Execute. The caller's peer is
// passed to every method: a session belongs to the uid that created it,
// and any other uid but root gets api.ErrSessionNotFound for it, exactly
// as for an id that never existed. Root may list, show and delete it (and
// read its files), but only the owner runs code in it or writes files to
// it: root is told api.ErrForbidden. Errors are classified with api's
// error classes, as for Execute.
type SessionManager interface {
	// CreateSession starts a session for owner with req's settings and
	// limits (already resolved against the daemon's defaults and
	// maxima; their TimeoutMs and OutputBytes are unused).
	CreateSession(ctx context.Context, owner peercred.Peer, req *api.SessionRequest, limits api.Limits) (*api.Session, error)
	// Sessions lists the sessions owner may see.
	Sessions(ctx context.Context, owner peercred.Peer) (*api.SessionList, error)
	// Session describes one.
	Session(ctx context.Context, owner peercred.Peer, id string) (*api.Session, error)
	// DeleteSession ends one, killing a run in progress in it.
	DeleteSession(ctx context.Context, owner peercred.Peer, id string) error
	// RunInSession carries out req (req.Session names the session) with
	// the run's own limits (timeout, output); see Executor.Execute.
	RunInSession(ctx context.Context, owner peercred.Peer, runID string, req *api.RunRequest, limits api.Limits, onOutput func(stream string, p []byte)) (*api.Result, error)
}

// registerSessions adds the session routes when the executor manages
// sessions.
func (s *Server) registerSessions(mux *http.ServeMux) {
	sm, ok := s.exec.(SessionManager)
	if !ok {
		return
	}
	mux.HandleFunc("POST "+api.PathSessions, func(w http.ResponseWriter, r *http.Request) {
		peer, _ := PeerFrom(r.Context())
		if s.isDraining() {
			writeError(w, api.Errorf(api.ErrUnavailable, "", "cellblockd is shutting down"))
			return
		}
		var req api.SessionRequest
		if aerr := decodeStrictN(w, r, &req, s.requestBytes()); aerr != nil {
			writeError(w, aerr)
			return
		}
		aerr := req.Validate()
		var limits api.Limits
		if aerr == nil {
			limits, aerr = req.AsRun().Resolve(s.cfg.Defaults, s.cfg.Maxima)
		}
		if aerr == nil {
			aerr = s.checkFiles(req.Files, limits.TmpBytes)
		}
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		// Building the session's jail ends with the request; the session
		// outlives it.
		ctx, end, ok := s.begin(w, r)
		if !ok {
			return
		}
		defer end()
		sess, err := sm.CreateSession(ctx, peer, &req, limits)
		s.writeReply(w, r, sess, err)
	})
	mux.HandleFunc("GET "+api.PathSessions, func(w http.ResponseWriter, r *http.Request) {
		peer, _ := PeerFrom(r.Context())
		list, err := sm.Sessions(r.Context(), peer)
		s.writeReply(w, r, list, err)
	})
	mux.HandleFunc("GET "+api.PathSessions+"/{id}", func(w http.ResponseWriter, r *http.Request) {
		peer, _ := PeerFrom(r.Context())
		sess, err := sm.Session(r.Context(), peer, r.PathValue("id"))
		s.writeReply(w, r, sess, err)
	})
	mux.HandleFunc("DELETE "+api.PathSessions+"/{id}", func(w http.ResponseWriter, r *http.Request) {
		peer, _ := PeerFrom(r.Context())
		id := r.PathValue("id")
		err := sm.DeleteSession(r.Context(), peer, id)
		s.writeReply(w, r, &api.SessionDeleted{ID: id, Deleted: true}, err)
	})
}

// execute carries out a validated run: in its session when it names one
// (and the executor has sessions), else in a jail of its own.
func (s *Server) execute(ctx context.Context, peer peercred.Peer, id string, req *api.RunRequest, limits api.Limits, onOutput func(string, []byte)) (*api.Result, error) {
	if req.Session == "" {
		return s.exec.Execute(ctx, id, req, limits, onOutput)
	}
	sm, ok := s.exec.(SessionManager)
	if !ok {
		return nil, api.SessionNotFound(req.Session, "this daemon keeps no sessions")
	}
	return sm.RunInSession(ctx, peer, id, req, limits, onOutput)
}
