// Package client talks to cellblockd over its Unix socket, in HTTP/1.1 of
// its own (transport.go). It is used by the cellblock CLI and the MCP
// server and must stay free of cgo, of anything that needs privileges, and
// of net/http, which the CLI, a process per run, would pay for at every
// start.
package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"os"

	"github.com/cellblock/cellblock/internal/api"
)

// ErrUnreachable wraps failures to reach the daemon at all.
var ErrUnreachable = errors.New("cellblockd is not reachable")

// SocketPath picks the socket: flag, else $CELLBLOCK_SOCKET, else the default.
func SocketPath(flag string) string {
	if flag != "" {
		return flag
	}
	if s := os.Getenv(api.SocketEnv); s != "" {
		return s
	}
	return api.DefaultSocket
}

// Client is a connection pool to one daemon socket. It is safe for
// concurrent use.
type Client struct {
	socket string
	tr     *transport
}

// New returns a client for the daemon listening on socket.
func New(socket string) *Client {
	return &Client{socket: socket, tr: &transport{socket: socket}}
}

// CloseIdleConnections closes the connections to the daemon that wait for
// another request.
func (c *Client) CloseIdleConnections() { c.tr.closeIdle() }

// Socket returns the socket path the client dials.
func (c *Client) Socket() string { return c.socket }

// Run carries out one run and returns its result. A run the daemon refused
// (bad request, over a limit, busy, ...) comes back as a Result whose Error
// is set, with a nil error; the error is for failures to talk to the daemon.
// Cancelling ctx makes the daemon kill the run.
func (c *Client) Run(ctx context.Context, req *api.RunRequest) (*api.Result, error) {
	resp, err := c.post(ctx, req, "application/json")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return decodeResult(resp)
}

// RunStream carries out one run, calling onOutput for each chunk of output
// as the program writes it, and returns the result as Run does.
func (c *Client) RunStream(ctx context.Context, req *api.RunRequest, onOutput func(stream, data string)) (*api.Result, error) {
	return c.stream(ctx, req, onOutput, nil)
}

// stream carries out a streamed run: onOutput gets the output, onToolCall
// (when not nil) each tool call event.
func (c *Client) stream(ctx context.Context, req *api.RunRequest, onOutput func(stream, data string), onToolCall func(run string, call api.ToolCall)) (*api.Result, error) {
	resp, err := c.post(ctx, req, api.StreamContentType)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	// Errors come back as one JSON result; so does the answer of a
	// daemon that does not stream. Media type parameters (charset) are
	// allowed.
	if mt, _, _ := mime.ParseMediaType(resp.Header("Content-Type")); mt != api.StreamContentType {
		return decodeResult(resp)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var ev api.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("decode event from cellblockd: %w", err)
		}
		if ev.Result != nil {
			return ev.Result, nil
		}
		if onOutput != nil && ev.Stream != "" {
			onOutput(ev.Stream, ev.Data)
		}
		if onToolCall != nil && ev.ToolCall != nil {
			onToolCall(ev.RunID, *ev.ToolCall)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read events from cellblockd: %w", err)
	}
	return nil, errors.New("cellblockd ended the stream without a result")
}

// Info returns the daemon's description of itself.
func (c *Client) Info(ctx context.Context) (*api.Info, error) {
	var info api.Info
	if err := c.call(ctx, "GET", api.PathInfo, nil, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// Health reports whether the daemon answers.
func (c *Client) Health(ctx context.Context) error {
	var h api.Health
	return c.call(ctx, "GET", api.PathHealth, nil, &h)
}

// HealthStatus returns the status the daemon's health answer carries: "ok",
// or "draining" once it has been told to stop and takes no more runs.
func (c *Client) HealthStatus(ctx context.Context) (string, error) {
	var h api.Health
	if err := c.call(ctx, "GET", api.PathHealth, nil, &h); err != nil {
		return "", err
	}
	return h.Status, nil
}

// maxMetricsBytes bounds the metrics page Metrics copies.
const maxMetricsBytes = 16 << 20

// Metrics copies the daemon's GET /metrics (the Prometheus text format) to w
// and returns its content type.
func (c *Client) Metrics(ctx context.Context, w io.Writer) (string, error) {
	resp, err := c.do(ctx, &request{method: "GET", path: api.PathMetrics})
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("cellblockd answered %s for GET %s", resp.Status, api.PathMetrics)
	}
	if _, err := io.Copy(w, io.LimitReader(resp.Body, maxMetricsBytes)); err != nil {
		return "", fmt.Errorf("read %s from cellblockd: %w", api.PathMetrics, err)
	}
	return resp.Header("Content-Type"), nil
}

func (c *Client) post(ctx context.Context, req *api.RunRequest, accept string) (*response, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	return c.do(ctx, &request{method: "POST", path: api.PathRuns, contentType: "application/json", accept: accept, body: body})
}

// call sends body (JSON, if not nil) and decodes a 200 answer into out. Any
// other answer becomes the *api.Error it carries.
func (c *Client) call(ctx context.Context, method, path string, body, out any) error {
	req := &request{method: method, path: path}
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		req.body, req.contentType = b, "application/json"
	}
	resp, err := c.do(ctx, req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("read %s from cellblockd: %w", path, err)
	}
	if resp.StatusCode != 200 {
		var r api.Result
		if json.Unmarshal(data, &r) == nil && r.Error != nil {
			return r.Error
		}
		return fmt.Errorf("cellblockd answered %s for %s %s", resp.Status, method, path)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decode %s from cellblockd: %w", path, err)
	}
	return nil
}

func (c *Client) do(ctx context.Context, req *request) (*response, error) {
	resp, err := c.tr.do(ctx, req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w at %s: %w", ErrUnreachable, c.socket, err)
	}
	return resp, nil
}

func decodeResult(resp *response) (*api.Result, error) {
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<30))
	if err != nil {
		return nil, fmt.Errorf("read result from cellblockd: %w", err)
	}
	var r api.Result
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("decode result from cellblockd (%s): %w", resp.Status, err)
	}
	if resp.StatusCode != 200 && r.Error == nil {
		r.Error = &api.Error{Type: api.ErrInternal, Message: "cellblockd answered " + resp.Status}
	}
	return &r, nil
}
