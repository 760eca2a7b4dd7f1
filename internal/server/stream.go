package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/cellblock/cellblock/internal/api"
)

// streamWriteTimeout bounds each write of a stream: a caller that stays
// connected but stops reading would otherwise hold the run (its jail, its
// slot) until it goes away, and the daemon's shutdown with it. A
// variable for the tests.
var streamWriteTimeout = 30 * time.Second

// streamWriter writes a run's output as NDJSON events while it runs, then
// the result. Output and tool calls arrive from several goroutines;
// writes are serialised. A write that fails or times out fails the
// stream and cancels the run: nothing can reach its caller any more.
type streamWriter struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	rc      *http.ResponseController
	enc     *json.Encoder
	cancel  context.CancelFunc // the run's
	started bool
	failed  bool
	stalled bool // a write timed out
	// pending holds, per stream, the start of a UTF-8 sequence that the
	// next chunk completes, so that a split character is not replaced.
	pending map[string][]byte
}

// newStreamWriter writes the stream of a run that cancel cancels.
func newStreamWriter(w http.ResponseWriter, cancel context.CancelFunc) *streamWriter {
	return &streamWriter{w: w, rc: http.NewResponseController(w), enc: json.NewEncoder(w), cancel: cancel, pending: map[string][]byte{}}
}

// write writes ev and flushes it within streamWriteTimeout; on failure it
// fails the stream and cancels the run. s.mu is held.
func (s *streamWriter) write(ev api.Event) error {
	s.start()
	_ = s.rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
	err := s.enc.Encode(ev)
	if err == nil {
		err = s.rc.Flush()
	}
	if err != nil {
		s.failed = true
		s.stalled = errors.Is(err, os.ErrDeadlineExceeded)
		s.cancel()
	}
	return err
}

// explain says in res why a run whose stream timed out was cancelled:
// its caller stopped reading.
func (s *streamWriter) explain(res *api.Result) *api.Result {
	s.mu.Lock()
	stalled := s.stalled
	s.mu.Unlock()
	if !stalled || res.Error != nil && res.Error.Type != api.ErrCanceled {
		return res
	}
	res.Error = api.Errorf(api.ErrCanceled, "", "the caller stopped reading the run's stream (a write to it waited over %v)", streamWriteTimeout)
	return res
}

func (s *streamWriter) start() {
	if !s.started {
		s.w.Header().Set("Content-Type", api.StreamContentType)
		s.w.WriteHeader(http.StatusOK)
		s.started = true
	}
}

func (s *streamWriter) output(stream string, p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed {
		return
	}
	buf := append(s.pending[stream], p...)
	cut := len(buf)
	for i := len(buf) - 1; i >= 0 && i >= len(buf)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(buf[i]) {
			if !utf8.FullRune(buf[i:]) {
				cut = i
			}
			break
		}
	}
	s.pending[stream] = append([]byte(nil), buf[cut:]...)
	if cut == 0 {
		return
	}
	_ = s.write(api.Event{Stream: stream, Data: api.ValidUTF8(buf[:cut])})
}

func (s *streamWriter) result(res *api.Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started && res.Error != nil {
		// Nothing streamed yet: answer like the plain API, with a status.
		writeError(s.w, res.Error)
		return
	}
	if s.failed {
		return
	}
	if s.write(api.Event{Result: res}) == nil {
		// The connection may serve another request: no deadline left.
		_ = s.rc.SetWriteDeadline(time.Time{})
	}
}

// writeResult writes a run's result, not streamed, within
// streamWriteTimeout: a caller that does not read it holds nothing of the
// run, whose slot is freed when the handler returns.
func writeResult(w http.ResponseWriter, status int, res *api.Result) {
	body, err := json.Marshal(res)
	if err != nil {
		writeJSON(w, status, res)
		return
	}
	body = append(body, '\n')
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	if _, err := w.Write(body); err == nil && rc.Flush() == nil {
		// The connection may serve another request: no deadline left.
		_ = rc.SetWriteDeadline(time.Time{})
	}
}
