package runner

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestEncodeFile: a file goes in frames of at most FileChunkBytes of
// content, in order, the last marked; every frame fits the daemon's
// frame limit.
func TestEncodeFile(t *testing.T) {
	for _, size := range []int{0, 1, FileChunkBytes, FileChunkBytes + 1, 3*FileChunkBytes - 7} {
		data := bytes.Repeat([]byte{0xff, 0, '"'}, size/3+1)[:size]
		frames, err := EncodeFile("d/f.bin", data)
		if err != nil {
			t.Fatal(err)
		}
		var got []byte
		for i, fr := range frames {
			n := binary.BigEndian.Uint32(fr)
			if int(n) != len(fr)-4 || n > MaxDaemonFrame {
				t.Fatalf("size %d frame %d: length %d for %d bytes", size, i, n, len(fr)-4)
			}
			var c FileChunk
			if err := json.Unmarshal(fr[4:], &c); err != nil {
				t.Fatal(err)
			}
			if c.Type != TypeFile || c.Path != "d/f.bin" || c.Offset != int64(len(got)) || len(c.Data) > FileChunkBytes || c.End != (i == len(frames)-1) {
				t.Fatalf("size %d frame %d: %+v", size, i, c)
			}
			got = append(got, c.Data...)
		}
		if !bytes.Equal(got, data) {
			t.Errorf("size %d: the frames carry %d other bytes", size, len(got))
		}
	}
}

// TestParseFileWritten: the runner's answer is bounded and refused when
// malformed.
func TestParseFileWritten(t *testing.T) {
	w, err := ParseFileWritten([]byte(`{"type":"file_written","path":"a","bytes":3,"error":"ENOSPC","message":"` + strings.Repeat("m", 1000) + `"}`))
	if err != nil || w.Path != "a" || w.Bytes != 3 || w.Error != "ENOSPC" || len(w.Message) > fileErrorBytes {
		t.Errorf("%+v %v", w, err)
	}
	for _, bad := range []string{
		`{"type":"file_written","path":"a","bytes":-1}`,
		`{"type":"file_written","path":"a","bytes":1,"extra":1}`,
		`{"type":"done","path":"a","bytes":1}`,
		`{"type":"file_written","path":"` + strings.Repeat("p", 5000) + `","bytes":1}`,
		`[1]`,
	} {
		if _, err := ParseFileWritten([]byte(bad)); !errors.Is(err, ErrBadMessage) {
			t.Errorf("%.60s: %v", bad, err)
		}
	}
}
