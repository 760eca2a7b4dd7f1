package toolrelay

import "context"

type ctxKey struct{}

// NewContext is ctx carrying r, the relay of the run ctx is for: how the
// server hands it to the executor, which gives it to the jail
// (nsjail.RunnerSpec.Tools, nsjail.SessionRun.Tools).
func NewContext(ctx context.Context, r *Relay) context.Context {
	return context.WithValue(ctx, ctxKey{}, r)
}

// FromContext is the relay NewContext put in ctx; nil when the run has no
// tools.
func FromContext(ctx context.Context) *Relay {
	r, _ := ctx.Value(ctxKey{}).(*Relay)
	return r
}
