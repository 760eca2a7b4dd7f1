package runner

import (
	"fmt"
	"unicode/utf8"
)

// Input files (PROTOCOL.md, "Files"): the daemon sends each file in
// TypeFile frames, the runner writes it under /work and answers with one
// TypeFileWritten frame per file.
const (
	// TypeFile (daemon → runner) is one chunk of an input file.
	TypeFile = "file"
	// TypeFileWritten (runner → daemon) says how writing one file went.
	TypeFileWritten = "file_written"
	// FileChunkBytes is the most content one file frame carries: as
	// base64, with the path and the JSON around it, well under
	// MaxDaemonFrame, and small enough that decoding it costs the jail's
	// memory little.
	FileChunkBytes = 1 << 20
	// fileErrorBytes bounds the runner's description of a failure.
	fileErrorBytes = 256
)

// FileChunk is one TypeFile frame: Data (base64 in its JSON) holds the bytes
// of the file at Path from Offset on; End marks its last chunk.
type FileChunk struct {
	Type   string `json:"type"` // TypeFile; EncodeFile sets it
	Path   string `json:"path"`
	Offset int64  `json:"offset"`
	Data   []byte `json:"data"`
	End    bool   `json:"end,omitempty"`
}

// EncodeFile returns the frames that carry the file at path (relative to
// /work) with content data: at least one, each at most FileChunkBytes of
// content.
func EncodeFile(path string, data []byte) ([][]byte, error) {
	var frames [][]byte
	for off := 0; ; {
		f, next, err := EncodeFileFrame(path, data, off)
		if err != nil {
			return nil, err
		}
		frames = append(frames, f)
		if next == len(data) {
			return frames, nil
		}
		off = next
	}
}

// EncodeFileFrame returns the frame of EncodeFile's that carries data
// from off on, and the offset of the next (len(data) after the last):
// one frame at a time, for a sender that holds no more than one.
func EncodeFileFrame(path string, data []byte, off int) (frame []byte, next int, err error) {
	n := min(len(data)-off, FileChunkBytes)
	frame, err = encodeFrame(FileChunk{Type: TypeFile, Path: path, Offset: int64(off),
		Data: data[off : off+n], End: off+n == len(data)})
	return frame, off + n, err
}

// FileWritten is the runner's answer for one file: Bytes written, or
// Error (an errno name such as "ENOSPC") and Message when it failed. It
// comes from the jail: Parse bounds it.
type FileWritten struct {
	Path    string `json:"path"`
	Bytes   int64  `json:"bytes"`
	Error   string `json:"error,omitempty"`
	Message string `json:"message,omitempty"`
}

// ParseFileWritten validates a TypeFileWritten frame.
func ParseFileWritten(payload []byte) (FileWritten, error) {
	var m struct {
		Type string `json:"type"`
		FileWritten
	}
	if err := decodeStrict(payload, &m, true); err != nil {
		return FileWritten{}, fmt.Errorf("file_written message: %w", err)
	}
	if m.Type != TypeFileWritten {
		return FileWritten{}, fmt.Errorf("%w: %.40q is not %s", ErrBadMessage, m.Type, TypeFileWritten)
	}
	w := m.FileWritten
	if len(w.Path) > 4096 || w.Bytes < 0 || !utf8.ValidString(w.Error) || !utf8.ValidString(w.Message) {
		return FileWritten{}, fmt.Errorf("%w: a malformed file_written", ErrBadMessage)
	}
	w.Error = cutUTF8(w.Error, 32)
	w.Message = cutUTF8(w.Message, fileErrorBytes)
	return w, nil
}
