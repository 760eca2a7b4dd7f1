package record

import (
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/peercred"
)

// File operations outside a run, as FileOp.Op says.
const (
	// FilePut: a file written into a session's /work (PUT).
	FilePut = "session_file_put"
	// FileGet: a file read from a session's /work (GET).
	FileGet = "session_file_get"
	// ArtifactGet: an artifact fetched (GET /v1/artifacts/SHA256).
	ArtifactGet = "artifact_get"
)

// FileOp is what the server knows about a file that went into or out of
// the daemon outside a run request: who, which, and how it ended.
type FileOp struct {
	Peer    peercred.Peer
	Op      string
	Session string
	// Path is the file's path under the session's /work; empty for an
	// artifact.
	Path   string
	Size   int64
	SHA256 string
	// Error is why it was refused or failed; nil when it went through.
	Error   *api.Error
	Started time.Time
}
