package nsjail

import (
	"os"
	"sync/atomic"
	"time"

	"github.com/cellblock/cellblock/nsjail/runner"
	"github.com/cellblock/cellblock/nsjail/runner/wire"
)

// ToolRelay carries out a run's tool calls (runner/PROTOCOL.md, "Tools"):
// the daemon's side, which decides on each call and gets its answer. The
// jail only moves frames: it gives the relay every tool_call frame of the
// run and writes the tool_result frames the relay hands back.
type ToolRelay interface {
	// Declared is what the run message says of the tools: the tools and
	// the caps the runner applies itself.
	Declared() ([]wire.Tool, runner.ToolLimits)
	// Start begins the relaying. reply writes one tool_result frame to
	// the runner; it may wait (a bounded time) and is safe for
	// concurrent use until Stop returns.
	Start(reply func(frame []byte))
	// Call takes the payload of a tool_call frame, valid until it
	// returns. It must not wait for the call's answer.
	Call(payload []byte)
	// Stop ends the relaying: calls still waiting are given up, and
	// reply is not called once Stop has returned.
	Stop()
}

// toolWriteTimeout bounds the write of one tool_result frame: the runner
// reads its channel on a thread of its own while it waits for answers, so
// only a program that broke its runner keeps it from reading. A variable
// for the tests.
var toolWriteTimeout = 5 * time.Second

// toolFrames is how many tool_result frames wait for the writer.
const toolFrames = 16

// toolLink writes a run's tool_result frames on the runner's channel, one
// at a time, in the order the relay gave them, for as long as the relay
// runs. A write that fails or times out breaks the link: the frames after
// it are dropped (the runner's calls then fail on their own timeout).
type toolLink struct {
	relay  ToolRelay
	w      *os.File
	frames chan []byte
	done   chan struct{}
	broken atomic.Bool
}

// startToolLink starts relay's relaying with w, the runner's channel, for
// its answers. Nothing else may write on w until stop.
func startToolLink(w *os.File, relay ToolRelay) *toolLink {
	l := &toolLink{relay: relay, w: w, frames: make(chan []byte, toolFrames), done: make(chan struct{})}
	go l.write()
	relay.Start(l.send)
	return l
}

func (l *toolLink) send(frame []byte) { l.frames <- frame }

func (l *toolLink) write() {
	defer close(l.done)
	for f := range l.frames {
		if l.broken.Load() {
			continue
		}
		_ = l.w.SetWriteDeadline(time.Now().Add(toolWriteTimeout))
		if _, err := l.w.Write(f); err != nil {
			l.broken.Store(true)
		}
	}
}

// stop stops the relay and the writer, and reports whether a write
// failed (a frame may then have been cut short). A nil link is stopped.
func (l *toolLink) stop() (broken bool) {
	if l == nil {
		return false
	}
	l.relay.Stop()
	close(l.frames)
	<-l.done
	return l.broken.Load()
}
