package server

import (
	"context"
	"errors"
	"io"
	"strings"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/peercred"
	"github.com/cellblock/cellblock/internal/toolrelay"
)

// Services are what the server serves: the daemon's objects behind the
// API, each required and named. In cellblockd, runs.Executor is Runs,
// Envs and Artifacts, and sessions.Manager is Sessions and Files; in the
// tests of the clients, package servertest stands in for all five. Every
// method classifies its errors with api's error classes (api.Errorf,
// api.Wrap, or a class wrapped with %w); anything unclassified is an
// internal error.
type Services struct {
	Runs      Runs
	Sessions  Sessions
	Envs      Envs
	Artifacts Artifacts
	Files     SessionFiles
}

// check says which service is missing, if one is.
func (s Services) check() error {
	var missing []string
	for _, m := range []struct {
		name string
		set  bool
	}{
		{"Runs", s.Runs != nil}, {"Sessions", s.Sessions != nil}, {"Envs", s.Envs != nil},
		{"Artifacts", s.Artifacts != nil}, {"Files", s.Files != nil},
	} {
		if !m.set {
			missing = append(missing, m.name)
		}
	}
	if len(missing) > 0 {
		return errors.New("server: missing services: " + strings.Join(missing, ", ") + " (all are required)")
	}
	return nil
}

// Run is one run the server admitted, as it hands it to Runs.Execute (or
// Sessions.RunInSession when Request.Session names one): plain data, and
// the two things the run talks to while it goes on.
type Run struct {
	// ID names the run in the result, the logs and the tool calls' path.
	ID string
	// Owner is the caller, from the socket's peer credentials: the files
	// the run gives back are its own, and a session only its owner's.
	Owner peercred.Peer
	// Request is validated; Limits are resolved against the daemon's
	// defaults and maxima.
	Request *api.RunRequest
	Limits  api.Limits
	// Output, if not nil, receives the program's output while it runs:
	// the caller asked for a stream.
	Output func(stream string, p []byte)
	// Tools relays the calls of the run's code to its caller; nil when
	// the run declares no tools.
	Tools *toolrelay.Relay
}

// Runs carries out runs in jails of their own.
type Runs interface {
	// Execute carries out run (one that names no session).
	Execute(ctx context.Context, run *Run) (*api.Result, error)
	// Info describes the executor's side of the daemon.
	Info() api.Info
}

// Sessions keeps sessions, interpreters alive between runs. The caller's
// peer is passed to every method: a session belongs to the uid that
// created it, and any other uid but root gets api.ErrSessionNotFound for
// it, exactly as for an id that never existed. Root may list, show and
// delete it (and read its files), but only the owner runs code in it or
// writes files to it: root is told api.ErrForbidden.
type Sessions interface {
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
	// RunInSession carries out run in the session its request names,
	// with the run's own limits (timeout, output); see Runs.Execute.
	RunInSession(ctx context.Context, run *Run) (*api.Result, error)
}

// Envs are the cached dependency environments.
type Envs interface {
	// Envs lists the cached environments.
	Envs(ctx context.Context) (*api.EnvList, error)
	// BuildEnv builds an environment ahead of time, or finds it.
	BuildEnv(ctx context.Context, req *api.EnvBuildRequest) (*api.EnvBuildResult, error)
	// RemoveEnv deletes one environment (api.ErrNotFound, api.ErrInUse).
	RemoveEnv(ctx context.Context, id string) (*api.EnvRemoveResult, error)
	// PruneEnvs deletes every environment no run holds.
	PruneEnvs(ctx context.Context) (*api.EnvRemoveResult, error)
}

// Artifacts keeps what runs produce. Any artifact the uid did not produce
// is api.ErrNotFound, in the words of one that does not exist.
type Artifacts interface {
	OpenArtifact(uid uint32, sum string) (io.ReadCloser, int64, error)
	// ArtifactUsage is what uid's artifacts count against the store's
	// quota (bytes, artifacts). Info shows a caller other than root its
	// own figures, not everyone's: no uid learns from them what the
	// others keep.
	ArtifactUsage(uid uint32) (bytes int64, files int)
}

// SessionFiles reads and writes a session's /work one file at a time.
// Paths are checked by the server (api.CheckFilePath).
type SessionFiles interface {
	// ReadSessionFile copies the file at path to the writer begin
	// returns, once its size is known.
	ReadSessionFile(ctx context.Context, owner peercred.Peer, id, path string, begin func(size int64) (io.Writer, error)) error
	// CanPutSessionFile says, before the body of a PUT is read, what
	// PutSessionFile would refuse now for a file of size bytes (-1: not
	// known): an unknown or another uid's session, a lost or busy one,
	// one whose /work cannot hold it.
	CanPutSessionFile(ctx context.Context, owner peercred.Peer, id string, size int64) error
	// PutSessionFile writes data at path, between the session's runs.
	PutSessionFile(ctx context.Context, owner peercred.Peer, id, path string, data []byte) error
}
