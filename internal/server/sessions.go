package server

import (
	"context"
	"net/http"

	"github.com/cellblock/cellblock/internal/api"
)

// registerSessions adds the session routes.
func (s *Server) registerSessions(mux *http.ServeMux) {
	sm := s.svc.Sessions
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

// execute carries out a validated run: in its session when it names one,
// else in a jail of its own.
func (s *Server) execute(ctx context.Context, run *Run) (*api.Result, error) {
	if run.Request.Session == "" {
		return s.svc.Runs.Execute(ctx, run)
	}
	return s.svc.Sessions.RunInSession(ctx, run)
}
