package runner

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// FrameReader reads the runner's frames: a 4-byte big-endian length, then
// that many bytes. It holds at most one frame of at most Max bytes.
type FrameReader struct {
	r   io.Reader
	max int
	hdr [4]byte
	buf []byte
}

// NewFrameReader reads frames of at most max bytes from r.
func NewFrameReader(r io.Reader, max int) *FrameReader {
	return &FrameReader{r: r, max: max}
}

// SetMax changes the largest frame accepted (the run's frame_bytes once the
// run message is sent).
func (f *FrameReader) SetMax(max int) { f.max = max }

// Next returns the next frame's payload, valid until the next call. It
// returns io.EOF at a clean end of the stream, io.ErrUnexpectedEOF when it
// ends inside a frame, and an error wrapping ErrFrameTooLarge for a frame
// over the maximum, after skipping its payload so that the next call reads
// the frame after it.
func (f *FrameReader) Next() ([]byte, error) {
	if _, err := io.ReadFull(f.r, f.hdr[:]); err != nil {
		return nil, err
	}
	n := int64(binary.BigEndian.Uint32(f.hdr[:]))
	if n > int64(f.max) {
		if _, err := io.CopyN(io.Discard, f.r, n); err != nil {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrFrameTooLarge, n, f.max)
	}
	if int64(cap(f.buf)) < n {
		f.buf = make([]byte, n)
	}
	f.buf = f.buf[:n]
	if _, err := io.ReadFull(f.r, f.buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return f.buf, nil
}

// ErrBadMessage is wrapped by the errors of messages that fail decoding.
var ErrBadMessage = errors.New("bad runner message")

// messageType returns the "type" of a frame's payload, which must be
// valid UTF-8 encoding one JSON object with a string member "type".
func messageType(payload []byte) (string, error) {
	if !utf8.Valid(payload) {
		return "", fmt.Errorf("%w: not UTF-8", ErrBadMessage)
	}
	var head struct {
		Type *string `json:"type"`
	}
	if err := decodeStrict(payload, &head, false); err != nil {
		return "", err
	}
	if head.Type == nil {
		return "", fmt.Errorf("%w: no type", ErrBadMessage)
	}
	return *head.Type, nil
}

// decodeStrict decodes payload, one JSON object and nothing after it,
// into v; known, when set, refuses members v does not have.
func decodeStrict(payload []byte, v any, known bool) error {
	p := bytes.TrimLeft(payload, " \t\r\n")
	if len(p) == 0 || p[0] != '{' {
		return fmt.Errorf("%w: not a JSON object", ErrBadMessage)
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	if known {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %w", ErrBadMessage, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: data after the object", ErrBadMessage)
	}
	return nil
}

// ReadReady reads the runner's first frame, which must be a ready message
// of this protocol version.
func ReadReady(f *FrameReader) (Ready, error) {
	payload, err := f.Next()
	if err != nil {
		return Ready{}, fmt.Errorf("read runner ready: %w", err)
	}
	var m Ready
	if t, err := messageType(payload); err != nil {
		return Ready{}, fmt.Errorf("read runner ready: %w", err)
	} else if t != TypeReady {
		return Ready{}, fmt.Errorf("read runner ready: %w: got %.40q", ErrBadMessage, t)
	}
	if err := decodeStrict(payload, &m, true); err != nil {
		return Ready{}, fmt.Errorf("read runner ready: %w", err)
	}
	if m.Protocol != ProtocolVersion {
		return Ready{}, fmt.Errorf("read runner ready: %w: protocol %d, want %d", ErrBadMessage, m.Protocol, ProtocolVersion)
	}
	if len(m.Python) > 64 {
		return Ready{}, fmt.Errorf("read runner ready: %w: python version too long", ErrBadMessage)
	}
	// What the runner says of its preload: kept to the list's bounds,
	// never a reason to refuse the jail.
	if len(m.PreloadFailed) > MaxPreload {
		m.PreloadFailed = m.PreloadFailed[:MaxPreload]
	}
	for i := range m.PreloadFailed {
		f := &m.PreloadFailed[i]
		if !ValidModule(f.Module) {
			f.Module = "?"
		}
		f.Error = cutUTF8(f.Error, PreloadErrorBytes)
	}
	return m, nil
}

// cutUTF8 is s cut to at most n bytes, on a rune boundary.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
