package runs

import (
	"context"
	"errors"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/deps"
	"github.com/cellblock/cellblock/internal/egress"
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
	// egress is the session's proxy, nil without network.
	egress *egress.Proxy
}

// Release gives up what the session held besides its jail (its
// environment's lease, its proxy). Call it after closing Session.
func (o *Opened) Release() {
	o.egress.Close()
	o.env.Release()
}

// Denials returns what the session's proxy refused since the last call:
// a run's own, taken when it ends. The next run's network caps start
// afresh.
func (o *Opened) Denials() []api.Denial { return o.egress.NextRun() }

// SecretUses returns the uses of the session's secrets since the last
// call: a run's own, taken when it ends.
func (o *Opened) SecretUses() []api.SecretUse { return o.egress.TakeSecretUses() }

// OpenSession builds the jail of a session (id names it) for req under
// limits l: its interpreter, dependency environment and limits, fixed for
// its life. A prestarted jail of the same shape is taken when one waits
// (it was built for no one, like any run's); else one is built now.
func (e *Executor) OpenSession(ctx context.Context, id string, req *api.SessionRequest, l api.Limits) (*Opened, error) {
	run := req.AsRun()
	// The session's network, for its whole life: its proxy's socket is
	// opened in the jail when the session starts.
	proxy, err := e.cfg.Egress.ForRun(id, callerUID(ctx), req.Network, req.Secrets)
	if err != nil {
		return nil, err
	}
	py, env, err := e.deps.Resolve(ctx, e.store, run)
	if err != nil {
		proxy.Close()
		return nil, err
	}
	spec := e.spec(id, py, run, l, env)
	spec.Runner.Mode = api.ModeCell
	if proxy != nil {
		spec.Egress = proxy
	}
	if spec.Files, err = inputFiles(req.Files); err != nil {
		proxy.Close()
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
		proxy.Close()
		env.Release()
		return nil, FileError(err)
	}
	return &Opened{Session: s, Python: py.Version, Environment: env.Result(), env: env, egress: proxy}, nil
}

// ResultOf maps the outcome of a run in a session to the contract's
// result object.
func ResultOf(out *nsjail.Outcome) *api.Result {
	res := resultOf(out)
	reportsOf(out.Runner, res)
	return res
}
