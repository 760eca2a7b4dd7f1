package runs

import (
	"context"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/sessions"
	"github.com/cellblock/cellblock/nsjail"
)

// OpenSession builds the jail of a session (id names it, owner is its
// owner's uid) for req under limits l (sessions.Jails): a long-lived run on the path of every run
// (prepare, take, launch), whose interpreter, dependency environment,
// limits and network are fixed for its life. A prestarted jail of the
// same shape is taken when one waits (it was built for no one, like any
// run's); else one is built now.
func (e *Executor) OpenSession(ctx context.Context, id string, owner uint32, req *api.SessionRequest, l api.Limits) (*sessions.Opened, error) {
	run := req.AsRun()
	p, err := e.prepare(ctx, id, owner, run, req.Files, l)
	if err != nil {
		return nil, err
	}
	p.spec.Runner.Mode = api.ModeCell
	var s *nsjail.Session
	err = e.launch(ctx, p.spec, e.take(p, run, l), func(j *nsjail.Jail) (err error) {
		s, err = e.runner.OpenSession(ctx, j, p.spec)
		return err
	})
	if err != nil {
		p.release()
		return nil, FileError(err)
	}
	return &sessions.Opened{
		Interp: s, Python: p.py.Version, Environment: p.env.Result(),
		// The proxy and the environment's lease live as long as the
		// session; the next run's network caps start afresh.
		Release: p.release, Denials: p.proxy.NextRun, SecretUses: p.proxy.TakeSecretUses,
	}, nil
}
