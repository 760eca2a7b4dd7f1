package mcpserver

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/client"
)

// WarmEnv is a dependency environment cellblock-mcp asks the daemon to
// build when it starts (its --preload-env and --preload flags), so that
// run_python calls with exactly these dependencies find it built and,
// with Preload, prestarted jails with those modules imported.
type WarmEnv struct {
	// Dependencies are the environment's requirements, as run_python's
	// "dependencies".
	Dependencies []string
	// Preload are the modules its prestarted jails import while they
	// wait; nil leaves the environment's list as the daemon has it.
	Preload []string
}

// Request is the daemon request that builds w; Validate it first.
func (w *WarmEnv) Request() *api.EnvBuildRequest {
	return &api.EnvBuildRequest{Dependencies: w.Dependencies, Preload: w.Preload}
}

// Retry pauses of BuildWarmEnv while the daemon cannot be reached (a
// variable, for tests).
var (
	warmRetryMin = 5 * time.Second
	warmRetryMax = time.Minute
)

// BuildWarmEnv asks the daemon to build w, and returns when it did or
// refused (both logged), or when ctx ends. While the daemon cannot be
// reached, or is busy or shutting down, it tries again after a pause that
// doubles up to a minute. Meant to run in its own goroutine: a build can
// take minutes, and tool calls need not wait for it.
func BuildWarmEnv(ctx context.Context, c *client.Client, w *WarmEnv, log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	pause := warmRetryMin
	for {
		start := time.Now()
		res, err := c.BuildEnv(ctx, w.Request())
		if err == nil {
			log.Info("environment ready", "env", res.Environment.ID, "python", res.Python,
				"dependencies", strings.Join(w.Dependencies, " "), "preload", strings.Join(res.Preload, ","),
				"took", time.Since(start).Round(time.Millisecond))
			return
		}
		var aerr *api.Error
		retry := errors.Is(err, client.ErrUnreachable) ||
			errors.As(err, &aerr) && (aerr.Type == api.ErrUnavailable || aerr.Type == api.ErrBusy)
		if !retry || ctx.Err() != nil {
			if ctx.Err() == nil {
				log.Error("the daemon did not build the --preload-env environment", "err", err)
			}
			return
		}
		log.Warn("cannot build the --preload-env environment yet; trying again", "err", err, "retry_in", pause)
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, warmRetryMax)
	}
}

// warmText tells the model which dependencies are prepared.
func warmText(w *WarmEnv) string {
	if w == nil || len(w.Dependencies) == 0 {
		return ""
	}
	deps := quotedList(w.Dependencies)
	if len(w.Preload) == 0 {
		return "- Prepared packages: \"dependencies\": [" + deps + "] are installed already, so such a run does not wait for an installation.\n"
	}
	return "- Prepared packages: with \"dependencies\": [" + deps + "] (exactly these, in any order, and no other package, also none from a PEP 723 block), the run starts with " +
		strings.Join(w.Preload, ", ") + " already imported, so importing them costs nothing; prefer that set when it covers what the code needs. Other packages work as well, but are installed (the first time) and imported as usual.\n"
}

func quotedList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = `"` + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), `"`, `\"`) + `"`
	}
	return strings.Join(q, ", ")
}
