package runs

import (
	"context"
	"errors"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/deps"
	"github.com/cellblock/cellblock/nsjail"
)

// Opened is a session's jail, open, with what the session holds for it.
type Opened struct {
	Session *nsjail.Session
	// Python is the interpreter's version; Environment the dependency
	// environment, nil without one.
	Python      string
	Environment *api.Environment
	env         *deps.Attachment
}

// Release gives up what the session held besides its jail (its
// environment's lease). Call it after closing Session.
func (o *Opened) Release() { o.env.Release() }

// OpenSession builds the jail of a session (id names it) for req under
// limits l: its interpreter, dependency environment and limits, fixed for
// its life. A prestarted jail of the same shape is taken when one waits
// (it was built for no one, like any run's); else one is built now.
func (e *Executor) OpenSession(ctx context.Context, id string, req *api.SessionRequest, l api.Limits) (*Opened, error) {
	run := req.AsRun()
	py, env, err := e.deps.Resolve(ctx, e.store, run)
	if err != nil {
		return nil, err
	}
	spec := e.spec(id, py, run, l, env)
	spec.Runner.Mode = api.ModeCell
	if spec.Files, err = inputFiles(req.Files); err != nil {
		env.Release()
		return nil, err
	}
	var j *nsjail.Jail
	if e.pool != nil && spec.Shape() == e.defaultShape {
		j = e.pool.Take(spec)
	} else {
		j = e.shapes.take(spec, py, run, l)
	}
	s, err := e.runner.OpenSession(ctx, j, spec)
	var fe *nsjail.FileError
	if err != nil && j != nil && ctx.Err() == nil && !errors.As(err, &fe) {
		// A prestarted jail that failed: once more in a fresh one, as
		// for runs.
		e.log.Warn("a jail could not be opened as a session; building another", "session", id, "err", err)
		s, err = e.runner.OpenSession(ctx, nil, spec)
	}
	if err != nil {
		env.Release()
		return nil, FileError(err)
	}
	return &Opened{Session: s, Python: py.Version, Environment: env.Result(), env: env}, nil
}

// ResultOf maps the outcome of a run in a session to the contract's
// result object.
func ResultOf(out *nsjail.Outcome) *api.Result {
	res := resultOf(out)
	reportsOf(out.Runner, res)
	return res
}
