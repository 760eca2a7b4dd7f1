package server

import (
	"context"
	"net/http"

	"github.com/cellblock/cellblock/internal/api"
)

// registerEnvs adds the environment routes.
func (s *Server) registerEnvs(mux *http.ServeMux) {
	em := s.svc.Envs
	mux.HandleFunc("GET "+api.PathEnvs, func(w http.ResponseWriter, r *http.Request) {
		list, err := em.Envs(r.Context())
		s.writeReply(w, r, list, err)
	})
	mux.HandleFunc("POST "+api.PathEnvs, func(w http.ResponseWriter, r *http.Request) {
		if s.isDraining() {
			writeError(w, api.Errorf(api.ErrUnavailable, "", "cellblockd is shutting down"))
			return
		}
		var req api.EnvBuildRequest
		if aerr := decodeStrict(w, r, &req); aerr != nil {
			writeError(w, aerr)
			return
		}
		if aerr := req.Validate(); aerr != nil {
			writeError(w, aerr)
			return
		}
		ctx, end, ok := s.begin(w, r)
		if !ok {
			return
		}
		defer end()
		res, err := em.BuildEnv(ctx, &req)
		s.writeReply(w, r, res, err)
	})
	mux.HandleFunc("DELETE "+api.PathEnvs+"/{id}", func(w http.ResponseWriter, r *http.Request) {
		res, err := em.RemoveEnv(r.Context(), r.PathValue("id"))
		s.writeReply(w, r, res, err)
	})
	mux.HandleFunc("POST "+api.PathEnvsPrune, func(w http.ResponseWriter, r *http.Request) {
		res, err := em.PruneEnvs(r.Context())
		s.writeReply(w, r, res, err)
	})
}

// begin counts a request that builds something (an environment, a
// session's jail) as in flight and returns its context, which ends when
// the caller goes away or shutdown kills runs, and the function that ends
// the request. Once draining has begun it answers unavailable and
// reports false.
func (s *Server) begin(w http.ResponseWriter, r *http.Request) (ctx context.Context, end func(), ok bool) {
	if !s.enter() {
		writeError(w, api.Errorf(api.ErrUnavailable, "", "cellblockd is shutting down"))
		return nil, nil, false
	}
	ctx, cancel := context.WithCancel(r.Context())
	stop := context.AfterFunc(s.runs, cancel)
	return ctx, func() {
		stop()
		cancel()
		s.inflight.Done()
	}, true
}

// writeReply answers r with v, or with the error's class and status.
func (s *Server) writeReply(w http.ResponseWriter, r *http.Request, v any, err error) {
	if err == nil {
		writeJSON(w, http.StatusOK, v)
		return
	}
	peer, _ := PeerFrom(r.Context())
	writeError(w, s.callerError(err, newRef("e"), peer))
}
