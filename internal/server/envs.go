package server

import (
	"context"
	"errors"
	"net/http"

	"github.com/cellblock/cellblock/internal/api"
)

// EnvManager is the daemon's side of the dependency environment API. An
// Executor that implements it gets the routes of registerEnvs; errors are
// classified with this package's sentinels, as for Execute.
type EnvManager interface {
	// Envs lists the cached environments.
	Envs(ctx context.Context) (*api.EnvList, error)
	// BuildEnv builds an environment ahead of time, or finds it.
	BuildEnv(ctx context.Context, req *api.EnvBuildRequest) (*api.EnvBuildResult, error)
	// RemoveEnv deletes one environment (ErrNotFound, ErrInUse).
	RemoveEnv(ctx context.Context, id string) (*api.EnvRemoveResult, error)
	// PruneEnvs deletes every environment no run holds.
	PruneEnvs(ctx context.Context) (*api.EnvRemoveResult, error)
}

// Error classes of the environment API.
var (
	ErrNotFound = errors.New("no such environment")
	ErrInUse    = errors.New("cannot remove")
)

// registerEnvs adds the environment routes when the executor manages
// environments.
func (s *Server) registerEnvs(mux *http.ServeMux) {
	em, ok := s.exec.(EnvManager)
	if !ok {
		return
	}
	mux.HandleFunc("GET "+api.PathEnvs, func(w http.ResponseWriter, r *http.Request) {
		list, err := em.Envs(r.Context())
		s.writeEnvResult(w, list, err)
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
		s.inflight.Add(1)
		defer s.inflight.Done()
		// A build ends when the caller goes away or shutdown kills runs.
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		stop := context.AfterFunc(s.runs, cancel)
		defer stop()
		res, err := em.BuildEnv(ctx, &req)
		if err != nil {
			peer, _ := PeerFrom(r.Context())
			s.log.Error("environment build failed", "uid", peer.UID, "err", err)
		}
		s.writeEnvResult(w, res, err)
	})
	mux.HandleFunc("DELETE "+api.PathEnvs+"/{id}", func(w http.ResponseWriter, r *http.Request) {
		res, err := em.RemoveEnv(r.Context(), r.PathValue("id"))
		s.writeEnvResult(w, res, err)
	})
	mux.HandleFunc("POST "+api.PathEnvsPrune, func(w http.ResponseWriter, r *http.Request) {
		res, err := em.PruneEnvs(r.Context())
		s.writeEnvResult(w, res, err)
	})
}

// writeEnvResult answers with v, or with the error's class and status.
func (s *Server) writeEnvResult(w http.ResponseWriter, v any, err error) {
	if err == nil {
		writeJSON(w, http.StatusOK, v)
		return
	}
	switch {
	case errors.Is(err, ErrNotFound):
		writeJSON(w, http.StatusNotFound, &api.Result{Error: api.Errorf(api.ErrNotFound, "id", "%s", err.Error())})
	case errors.Is(err, ErrInUse):
		writeJSON(w, http.StatusConflict, &api.Result{Error: api.Errorf(api.ErrInUse, "id", "%s", err.Error())})
	default:
		writeError(w, classify(err))
	}
}
