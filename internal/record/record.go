// Package record is what the daemon keeps of each run request once it is
// answered: who asked, what, and how it ended, classified in one word. The
// audit log and the metrics read the same records and classify runs the
// same way; neither depends on the server that makes them.
package record

import (
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/peercred"
)

// Run is what the server knows about a finished run. For a request refused
// before it ran, Result holds only the Error, Result.RunID is empty and
// Request is nil if the body could not be decoded.
type Run struct {
	Peer     peercred.Peer
	Request  *api.RunRequest
	Result   *api.Result
	Started  time.Time
	Duration time.Duration
	// ToolCalls are the run's tool calls in the order they came, and
	// ToolCallsOverCap counts those refused past its cap (not listed).
	ToolCalls        []ToolCall
	ToolCallsOverCap int64
}

// Outcomes of a run request: one word that the metrics count by and the
// audit log records, so that both classify a run the same way.
const (
	OutcomeOK          = "ok"               // the program ran and exited 0
	OutcomeExitNonzero = "exit_nonzero"     // the program ran and exited non-zero, or died from a signal
	OutcomeTimeout     = "timeout"          // the wall-clock timeout ended it
	OutcomeOOM         = "oom"              // the memory limit ended it
	OutcomeRefused     = "refused"          // turned away before running: bad request, over a limit, unknown Python, a session not found, busy or lost
	OutcomeBusy        = "busy"             // turned away because every slot and the queue were full
	OutcomeDependency  = "dependency_error" // its dependencies could not be resolved or installed
	OutcomeCanceled    = "canceled"         // the caller went away
	OutcomeUnavailable = "unavailable"      // the daemon was shutting down
	OutcomeError       = "error"            // the daemon failed
)

// Outcomes lists every outcome, for metrics that want all label values
// present from the start.
var Outcomes = []string{
	OutcomeOK, OutcomeExitNonzero, OutcomeTimeout, OutcomeOOM, OutcomeRefused,
	OutcomeBusy, OutcomeDependency, OutcomeCanceled, OutcomeUnavailable, OutcomeError,
}

// Outcome classifies a result. An error decides first; then the timeout
// (which kills everything, so it is what ended the run), then the memory
// limit, then the exit code.
func Outcome(res *api.Result) string {
	if res == nil {
		return OutcomeError
	}
	if res.Error != nil {
		switch res.Error.Type {
		case api.ErrBadRequest, api.ErrTooLarge, api.ErrOverLimit, api.ErrUnknownPython, api.ErrForbidden,
			api.ErrSessionNotFound, api.ErrSessionBusy, api.ErrSessionLost:
			return OutcomeRefused
		case api.ErrBusy:
			return OutcomeBusy
		case api.ErrDependency:
			return OutcomeDependency
		case api.ErrCanceled:
			return OutcomeCanceled
		case api.ErrUnavailable:
			return OutcomeUnavailable
		default:
			return OutcomeError
		}
	}
	switch {
	case res.TimedOut:
		return OutcomeTimeout
	case res.OOMKilled:
		return OutcomeOOM
	case res.ExitCode != 0:
		return OutcomeExitNonzero
	default:
		return OutcomeOK
	}
}
