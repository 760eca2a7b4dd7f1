package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"sync"
	"time"

	"github.com/cellblock/cellblock/internal/api"
)

// ToolFunc carries out one tool call of a run on the caller's side and
// returns its result, a JSON value, or an error whose text the code's
// cellblock.ToolError carries. ctx ends at the call's timeout, or when the
// run ends first.
type ToolFunc func(ctx context.Context, call api.ToolCall) (json.RawMessage, error)

// RunTools carries out req, a run that declares tools, as a stream:
// onOutput (if not nil) gets the output as RunStream's does, and tool
// carries out each tool call, in a goroutine of its own, whose answer
// RunTools sends back (POST api.ToolCallPath on another connection). It
// returns the result once the run is over and every call's tool has
// returned; cancelling ctx makes the daemon kill the run and ends the
// calls' contexts.
func (c *Client) RunTools(ctx context.Context, req *api.RunRequest, onOutput func(stream, data string), tool ToolFunc) (*api.Result, error) {
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	return c.stream(runCtx, req, onOutput, func(run string, call api.ToolCall) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			callCtx, done := context.WithTimeout(runCtx, time.Duration(call.TimeoutMs)*time.Millisecond)
			defer done()
			a := answerOf(tool(callCtx, call))
			// The run may be over by now (its daemon then says
			// not_found): there is nobody left to tell.
			err := c.AnswerToolCall(runCtx, run, call.ID, a)
			var aerr *api.Error
			if a.Error == nil && errors.As(err, &aerr) && aerr.Type == api.ErrBadRequest {
				// A result the daemon does not take (not UTF-8, nested
				// too deep): the code hears why now, not at the call's
				// timeout.
				msg := "the tool's result could not be passed: " + aerr.Message
				if aerr.Field != "" {
					msg = "the tool's result could not be passed: " + aerr.Field + " " + aerr.Message
				}
				_ = c.AnswerToolCall(runCtx, run, call.ID, api.ToolAnswer{Error: &msg})
			}
		}()
	})
}

// answerOf is the answer to send for what a ToolFunc returned.
func answerOf(result json.RawMessage, err error) api.ToolAnswer {
	if err == nil && !json.Valid(result) {
		err = errors.New("the tool's result is not JSON")
	}
	if err != nil {
		msg := err.Error()
		return api.ToolAnswer{Error: &msg}
	}
	return api.ToolAnswer{Result: result}
}

// AnswerToolCall answers call of run: a result, or an error. A refusal
// (not_found for a call that no longer waits, too_large for a result over
// the run's cap) is an *api.Error.
func (c *Client) AnswerToolCall(ctx context.Context, run, call string, a api.ToolAnswer) error {
	var out api.ToolAnswered
	return c.call(ctx, "POST", api.ToolCallPath(url.PathEscape(run), url.PathEscape(call)), a, &out)
}
