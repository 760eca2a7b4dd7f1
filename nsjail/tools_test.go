package nsjail

import (
	"bytes"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/cellblock/cellblock/nsjail/runner"
	"github.com/cellblock/cellblock/nsjail/runner/wire"
)

// echoRelay answers every call with its payload, as a frame.
type echoRelay struct {
	mu      sync.Mutex
	reply   func([]byte)
	stopped bool
}

func (r *echoRelay) Declared() ([]wire.Tool, runner.ToolLimits) { return nil, runner.ToolLimits{} }
func (r *echoRelay) Start(reply func([]byte))                   { r.reply = reply }
func (r *echoRelay) Call(p []byte) {
	f := append([]byte{0, 0, 0, byte(len(p))}, p...)
	r.reply(f)
}
func (r *echoRelay) Stop() {
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
}

func TestToolLinkWritesInOrder(t *testing.T) {
	theirs, ours, err := socketpair()
	if err != nil {
		t.Fatal(err)
	}
	defer theirs.Close()
	defer ours.Close()
	relay := &echoRelay{}
	l := startToolLink(ours, relay)
	var want bytes.Buffer
	for _, p := range []string{"one", "two", "three"} {
		relay.Call([]byte(p))
		want.WriteString("\x00\x00\x00" + string(rune(len(p))) + p)
	}
	got := make([]byte, want.Len())
	if _, err := io.ReadFull(theirs, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("read %q, want %q", got, want.Bytes())
	}
	if l.stop() || !relay.stopped {
		t.Fatal("a link whose frames were all read reports a broken write, or did not stop its relay")
	}
	var nilLink *toolLink
	if nilLink.stop() {
		t.Fatal("a nil link is broken")
	}
}

func TestToolLinkBreaksOnAReaderThatDoesNotRead(t *testing.T) {
	defer func(d time.Duration) { toolWriteTimeout = d }(toolWriteTimeout)
	toolWriteTimeout = 100 * time.Millisecond
	theirs, ours, err := socketpair()
	if err != nil {
		t.Fatal(err)
	}
	defer theirs.Close()
	defer ours.Close()
	relay := &echoRelay{}
	l := startToolLink(ours, relay)
	// Far more than the socket buffers hold; the writer gives up and
	// drops the rest, so the calls never block for long.
	big := bytes.Repeat([]byte("x"), 200)
	for range 20000 {
		relay.Call(big)
	}
	if !l.stop() {
		t.Fatal("the link did not break on a peer that never reads")
	}
}
