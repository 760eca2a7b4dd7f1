package mcpserver

import (
	"context"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// How a run's output is relayed while it goes on.
//
// Each chunk of output is sent two ways, both best effort (the full output
// is always in the final result):
//
//   - notifications/progress, when the tools/call carried a progressToken:
//     "message" is the chunk and "progress" the number of output bytes so
//     far, which grows with every notification as the protocol asks. The
//     token ties each notification to its call, so a client running many
//     calls at once can tell their output apart even where mcp-go delivers
//     notifications on a shared stream (a legacy streamable HTTP session).
//   - notifications/message (logging), logger "stdout" or "stderr", level
//     info, data the chunk. mcp-go only delivers these to a client that has
//     asked for info-level logs (logging/setLevel, or the per-request level
//     of protocol 2026-07-28), and many clients show them in a log view,
//     which suits a program's output. They carry no request id, so
//     progress is the channel to use when calls run side by side.
//
// mcp-go queues notifications on a bounded per-session channel and drops
// them when it is full, so output is coalesced: chunks are collected and
// flushed every flushInterval, when maxNotifyBytes have gathered, or when
// the stream changes between stdout and stderr.
const (
	flushInterval  = 100 * time.Millisecond
	maxNotifyBytes = 16 << 10
)

// outputRelay turns a run's output chunks into MCP notifications for the
// call whose context it holds.
type outputRelay struct {
	srv   *server.MCPServer
	ctx   context.Context
	token mcp.ProgressToken // nil: the caller asked for no progress

	mu      sync.Mutex
	stream  string // the stream pending belongs to
	pending []byte
	sent    int64 // output bytes notified so far
	stop    chan struct{}
	done    chan struct{}
}

// newOutputRelay starts a relay for the call of req; Close stops it.
func newOutputRelay(ctx context.Context, srv *server.MCPServer, req mcp.CallToolRequest) *outputRelay {
	r := &outputRelay{
		srv:  srv,
		ctx:  ctx,
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	if req.Params.Meta != nil {
		r.token = req.Params.Meta.ProgressToken
	}
	go r.tick()
	return r
}

// Add takes one chunk of output; it is the callback of Client.RunStream.
func (r *outputRelay) Add(stream, data string) {
	if data == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if stream != r.stream && len(r.pending) > 0 {
		r.flushLocked()
	}
	r.stream = stream
	r.pending = append(r.pending, data...)
	if len(r.pending) >= maxNotifyBytes {
		r.flushLocked()
	}
}

// Close sends what is pending and stops the relay.
func (r *outputRelay) Close() {
	close(r.stop)
	<-r.done
	r.mu.Lock()
	sent := len(r.pending) > 0
	r.flushLocked()
	r.mu.Unlock()
	if sent {
		r.waitHandedOver()
	}
}

// handOverWait bounds how long Close waits for the transport to take the
// last notifications off the session's queue.
const handOverWait = 200 * time.Millisecond

// waitHandedOver waits until the transport has taken the queued
// notifications off the session's channel. mcp-go's streamable HTTP
// server drops a notification its forwarder picks up after the tool call
// has returned, so output flushed at the very end of a run would often be
// lost if the result went out at once.
func (r *outputRelay) waitHandedOver() {
	session := server.ClientSessionFromContext(r.ctx)
	if session == nil {
		return
	}
	ch := session.NotificationChannel()
	deadline := time.Now().Add(handOverWait)
	for len(ch) > 0 && r.ctx.Err() == nil && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	// The forwarder has the notification; let it write it out.
	time.Sleep(5 * time.Millisecond)
}

func (r *outputRelay) tick() {
	defer close(r.done)
	t := time.NewTicker(flushInterval)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			r.mu.Lock()
			r.flushLocked()
			r.mu.Unlock()
		}
	}
}

// flushLocked sends the pending output in pieces of at most maxNotifyBytes,
// cut on UTF-8 boundaries. Sending does not block: mcp-go drops a
// notification when the session's queue is full.
func (r *outputRelay) flushLocked() {
	for len(r.pending) > 0 && r.ctx.Err() == nil {
		n := min(len(r.pending), maxNotifyBytes)
		for n < len(r.pending) && n > 0 && !utf8.RuneStart(r.pending[n]) {
			n--
		}
		if n == 0 {
			n = min(len(r.pending), maxNotifyBytes)
		}
		chunk := string(r.pending[:n])
		r.pending = r.pending[n:]
		r.sent += int64(n)
		r.send(chunk)
	}
	r.pending = r.pending[:0]
}

func (r *outputRelay) send(chunk string) {
	if r.token != nil {
		_ = r.srv.SendNotificationToClient(r.ctx, string(mcp.MethodNotificationProgress), map[string]any{
			"progressToken": r.token,
			"progress":      float64(r.sent),
			"message":       chunk,
		})
	}
	_ = r.srv.SendLogMessageToClient(r.ctx, mcp.NewLoggingMessageNotification(mcp.LoggingLevelInfo, r.stream, chunk))
}
