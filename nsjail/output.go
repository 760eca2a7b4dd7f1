package nsjail

import (
	"errors"
	"io"
	"os"
	"sync"
)

// cappedBuffer keeps the first limit bytes written to it and counts the
// rest, so the daemon's memory stays bounded whatever a run prints.
type cappedBuffer struct {
	mu        sync.Mutex
	buf       []byte
	limit     int64
	truncated bool
}

func newCappedBuffer(limit int64) *cappedBuffer {
	return &cappedBuffer{limit: limit, buf: make([]byte, 0, min(limit, 64<<10))}
}

// drain reads r to its end, keeping what fits and passing what it keeps to
// onOutput. It keeps reading past the limit so the program never blocks on
// a full pipe.
func (c *cappedBuffer) drain(r io.Reader, stream string, onOutput OutputFunc) {
	chunk := make([]byte, 32<<10)
	for {
		n, err := r.Read(chunk)
		if n > 0 {
			kept := c.write(chunk[:n])
			if onOutput != nil && len(kept) > 0 {
				onOutput(stream, kept)
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
				c.mu.Lock()
				c.truncated = true
				c.mu.Unlock()
			}
			return
		}
	}
}

// write appends what fits under the limit and returns that part.
func (c *cappedBuffer) write(p []byte) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	room := c.limit - int64(len(c.buf))
	if room <= 0 {
		c.truncated = true
		return nil
	}
	if int64(len(p)) > room {
		p = p[:room]
		c.truncated = true
	}
	start := len(c.buf)
	c.buf = append(c.buf, p...)
	return c.buf[start:]
}

func (c *cappedBuffer) bytes() ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf, c.truncated
}
