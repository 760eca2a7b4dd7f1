package record

import (
	"testing"

	"github.com/cellblock/cellblock/internal/api"
)

func TestOutcome(t *testing.T) {
	for _, c := range []struct {
		res  *api.Result
		want string
	}{
		{&api.Result{}, OutcomeOK},
		{&api.Result{ExitCode: 1}, OutcomeExitNonzero},
		{&api.Result{ExitCode: 137, TimedOut: true}, OutcomeTimeout},
		{&api.Result{ExitCode: 137, OOMKilled: true}, OutcomeOOM},
		{&api.Result{ExitCode: 137, TimedOut: true, OOMKilled: true}, OutcomeTimeout},
		{&api.Result{Error: &api.Error{Type: api.ErrOverLimit}}, OutcomeRefused},
		{&api.Result{Error: &api.Error{Type: api.ErrBadRequest}}, OutcomeRefused},
		{&api.Result{Error: &api.Error{Type: api.ErrBusy}}, OutcomeBusy},
		{&api.Result{Error: &api.Error{Type: api.ErrDependency}}, OutcomeDependency},
		{&api.Result{ExitCode: 137, Error: &api.Error{Type: api.ErrCanceled}}, OutcomeCanceled},
		{&api.Result{Error: &api.Error{Type: api.ErrUnavailable}}, OutcomeUnavailable},
		{&api.Result{Error: &api.Error{Type: api.ErrInternal}}, OutcomeError},
		{nil, OutcomeError},
	} {
		if got := Outcome(c.res); got != c.want {
			t.Errorf("Outcome(%+v) = %q, want %q", c.res, got, c.want)
		}
	}
}
