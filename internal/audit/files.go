package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/record"
)

// File is one file in or out of a run, as the audit log keeps it: its
// name, size and hash, never its content.
type File struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// filesOf lists a run record's files: the request's (hashed here), and
// those its result returned.
func filesOf(rec record.Run) (in, out []File) {
	if req := rec.Request; req != nil {
		for i := range req.Files {
			in = append(in, inputFile(&req.Files[i]))
		}
	}
	if res := rec.Result; res != nil {
		for _, f := range res.Files {
			out = append(out, File{Path: f.Path, Size: f.Size, SHA256: f.SHA256})
		}
	}
	return in, out
}

// inputFile hashes one of a request's files as the jail gets it.
func inputFile(f *api.FileInput) File {
	h := sha256.New()
	n, _ := f.WriteTo(h) // refused before it ran when it does not decode
	return File{Path: f.Path, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}
}

// FileEntry is the audit line of a file put into or read from a session,
// or of an artifact fetched: outside a run request.
type FileEntry struct {
	Time  time.Time `json:"time"`
	Event string    `json:"event"`
	UID   uint32    `json:"uid"`
	GID   uint32    `json:"gid"`
	PID   int32     `json:"pid"`

	Session string     `json:"session,omitempty"`
	Path    string     `json:"path,omitempty"`
	Size    int64      `json:"size"`
	SHA256  string     `json:"sha256,omitempty"`
	Error   *api.Error `json:"error,omitempty"`
}

// ObserveFile writes the line of one file operation; it is the server's
// FileObserver (or part of it).
func (l *Log) ObserveFile(op record.FileOp) {
	e := FileEntry{Time: op.Started.UTC(), Event: op.Op, UID: op.Peer.UID, GID: op.Peer.GID, PID: op.Peer.PID,
		Session: op.Session, Path: op.Path, Size: op.Size, SHA256: op.SHA256, Error: op.Error}
	if err := l.writeLine(e); err != nil {
		l.noteFailure(err)
	}
}
