package server

import (
	"encoding/json"
	"net/http"
	"sync"
	"unicode/utf8"

	"github.com/cellblock/cellblock/internal/api"
)

// streamWriter writes a run's output as NDJSON events while it runs, then
// the result. Output arrives from two goroutines; writes are serialised.
type streamWriter struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	rc      *http.ResponseController
	enc     *json.Encoder
	started bool
	failed  bool
	// pending holds, per stream, the start of a UTF-8 sequence that the
	// next chunk completes, so that a split character is not replaced.
	pending map[string][]byte
}

func newStreamWriter(w http.ResponseWriter) *streamWriter {
	return &streamWriter{w: w, rc: http.NewResponseController(w), enc: json.NewEncoder(w), pending: map[string][]byte{}}
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
	s.start()
	if err := s.enc.Encode(api.Event{Stream: stream, Data: api.ValidUTF8(buf[:cut])}); err != nil {
		s.failed = true
		return
	}
	if err := s.rc.Flush(); err != nil {
		s.failed = true
	}
}

func (s *streamWriter) result(res *api.Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started && res.Error != nil {
		// Nothing streamed yet: answer like the plain API, with a status.
		writeError(s.w, res.Error)
		return
	}
	s.start()
	_ = s.enc.Encode(api.Event{Result: res})
	_ = s.rc.Flush()
}
