package runs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/artifacts"
	"github.com/cellblock/cellblock/nsjail"
	"github.com/cellblock/cellblock/nsjail/workdir"
)

// Files in and out of runs: a request's files become the spec's (written
// by the jail's runner), and what the program left under /work/out goes
// into the artifact store, owned by the caller, and into the result.

// Bounds of a walk of /work/out besides the operator's caps.
const (
	// outDepth is the deepest directory level entered.
	outDepth = 16
	// outSkipped is the most skipped entries listed one by one.
	outSkipped = 100
	// outEntriesPerFile and maxOutEntries bound the directory entries
	// examined: a program can make millions of empty files.
	outEntriesPerFile = 10
	maxOutEntries     = 100000
)

// inputFiles decodes a request's files.
func inputFiles(files []api.FileInput) ([]nsjail.InputFile, error) {
	if len(files) == 0 {
		return nil, nil
	}
	out := make([]nsjail.InputFile, len(files))
	for i := range files {
		data, err := files[i].Data()
		if err != nil {
			return nil, api.Errorf(api.ErrBadRequest, fmt.Sprintf("files[%d].content", i), "is not valid base64: %v", err)
		}
		out[i] = nsjail.InputFile{Path: files[i].Path, Data: data}
	}
	return out, nil
}

// Inputs decodes a request's files (sessions.Files).
func (e *Executor) Inputs(files []api.FileInput) ([]nsjail.InputFile, error) {
	return inputFiles(files)
}

// InputError is FileError naming field instead of the file's place in
// the request (sessions.Files): a PUT names its "path".
func (e *Executor) InputError(err error, field string) error {
	err = FileError(err)
	var ae *api.Error
	if errors.As(err, &ae) && field != "files" && strings.HasPrefix(ae.Field, "files[") {
		c := *ae
		c.Field = field
		return &c
	}
	return err
}

// FileError is the error a caller is told about an input file the jail
// could not take (see nsjail.FileError): over_limit when /work or the
// memory limit could not hold it, else bad_request naming the file.
func FileError(err error) error {
	var fe *nsjail.FileError
	if !errors.As(err, &fe) {
		return err
	}
	field := fmt.Sprintf("files[%d]", fe.Index)
	switch {
	case fe.OOM:
		return api.Errorf(api.ErrOverLimit, field, "%q: the run's memory limit could not hold the files (the pages of /work count against it); ask for more memory_bytes", fe.Path)
	case fe.NoSpace:
		return api.Errorf(api.ErrOverLimit, field, "%q did not fit in /work (%s); ask for a larger tmp_bytes", fe.Path, fe.Message)
	case fe.Errno == "":
		return fmt.Errorf("%s: %w", field, err) // the daemon's or the jail's failure
	}
	return api.Errorf(api.ErrBadRequest, field, "%q could not be written: %s (%s); something in /work is in the way", fe.Path, fe.Message, fe.Errno)
}

// store is a Sink of the artifact store for one owner.
type store struct {
	s     *artifacts.Store
	owner uint32
}

func (k store) Create() (workdir.Artifact, error) { return k.s.Create(k.owner) }

// outLimits are the caps of a walk of /work/out.
func (e *Executor) outLimits(inline bool) workdir.Limits {
	c := e.cfg.Files
	l := workdir.Limits{
		Count: c.OutCount, FileBytes: c.OutFileBytes, TotalBytes: c.OutBytes,
		Entries: min(max(c.OutCount*outEntriesPerFile, 1000), maxOutEntries),
		Depth:   outDepth, Skipped: outSkipped,
	}
	if inline {
		l.InlineBytes, l.InlineTotal = c.InlineBytes, c.InlineTotalBytes
	}
	return l
}

// SnapshotOut records the state of w's out directory, for CollectOut's
// since: a session's runs return only what they changed.
func (e *Executor) SnapshotOut(w *workdir.Dir) workdir.Snapshot {
	if w == nil || e.cfg.Artifacts == nil {
		return nil
	}
	own, err := w.Clone()
	if err != nil {
		return nil
	}
	defer own.Close()
	snap := own.Snapshot(api.OutDir, e.outLimits(false))
	snap.Settle() // what the run changes gets a stamp of its own
	return snap
}

// CollectOut puts the files under w's out directory (those not as since
// recorded them, with since) into the artifact store, owned by owner, and
// returns the result's entries. inline keeps small text files' content.
// With since (a session's run), each file is read twice (Limits.Verify).
func (e *Executor) CollectOut(w *workdir.Dir, owner uint32, inline bool, since workdir.Snapshot) ([]api.File, []api.FileSkipped) {
	if w == nil || e.cfg.Artifacts == nil {
		return nil, nil
	}
	own, err := w.Clone() // a session's Work may be closed meanwhile
	if err != nil {
		return nil, nil
	}
	defer own.Close()
	l := e.outLimits(inline)
	// A session's code may still be writing (a thread it left): each
	// file is read twice. A run's processes are all gone.
	l.Verify = since != nil
	c := own.Collect(api.OutDir, l, since, store{e.cfg.Artifacts, owner})
	var files []api.File
	for _, f := range c.Files {
		mime := MIMEOf(f.Path, f.Head)
		af := api.File{Path: f.Path, Size: f.Size, SHA256: f.SHA256, MIME: mime}
		if inline && f.Content != nil && isText(mime) && utf8.Valid(f.Content) && bytes.IndexByte(f.Content, 0) < 0 {
			text := string(f.Content)
			af.Content = &text
		}
		files = append(files, af)
	}
	var skipped []api.FileSkipped
	for _, s := range c.Skipped {
		skipped = append(skipped, api.FileSkipped{Path: s.Path, Reason: s.Reason, Size: s.Size})
	}
	if c.MoreSkipped > 0 {
		skipped = append(skipped, api.FileSkipped{Path: ".", Reason: fmt.Sprintf("%d more entries were not returned either", c.MoreSkipped)})
	}
	return files, skipped
}

// collectRun fills res's files from a finished run's /work, and closes
// it: the run's files are its caller's, uid's. The close is the tmpfs's
// last reference, whose release frees all the run left in /work: it goes
// on after the answer.
func (e *Executor) collectRun(out *nsjail.Outcome, uid uint32, req *api.RunRequest, res *api.Result) {
	if out.WorkErr != nil {
		res.FilesSkipped = []api.FileSkipped{{Path: ".", Reason: "cellblockd could not open this run's /work, so nothing under /work/out came back (its log says why)"}}
	}
	if out.Work == nil {
		return
	}
	defer func() { go out.Work.Close() }()
	res.Files, res.FilesSkipped = e.CollectOut(out.Work, uid, req.ReturnFiles == api.ReturnFilesInline, nil)
}

// ReadWorkFile copies the file at p under w (a session's /work) to the
// writer begin returns, as workdir.Dir.ReadFile does, with errors
// classified for the caller.
func (e *Executor) ReadWorkFile(w *workdir.Dir, p string, begin func(size int64) (io.Writer, error)) error {
	if w == nil {
		return api.Errorf(api.ErrNotFound, "path", "this session's files cannot be read")
	}
	own, err := w.Clone()
	if err != nil {
		return api.Errorf(api.ErrSessionLost, "session", "the session ended while its file was asked for")
	}
	defer own.Close()
	max := e.cfg.Files.OutFileBytes
	err = own.ReadFile(p, max, begin)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, workdir.ErrNotFound):
		return api.Errorf(api.ErrNotFound, "path", "no file %q in the session's /work", p)
	case errors.Is(err, workdir.ErrNotRegular):
		return api.Errorf(api.ErrBadRequest, "path", "%q: %v", p, err)
	case errors.Is(err, workdir.ErrTooBig):
		return api.Errorf(api.ErrTooLarge, "path", "%q: %v", p, err)
	case errors.Is(err, workdir.ErrChanged):
		return api.Errorf(api.ErrInUse, "path", "%q changed while it was read (the session's code is writing it); try again", p)
	case errors.Is(err, workdir.ErrBusy):
		return api.Errorf(api.ErrInUse, "path", "%q is held by the session's code (a file lease), so it was not read; try again", p)
	}
	return fmt.Errorf("read %q of a session: %w", p, err)
}

// OpenArtifact opens the artifact sum for uid (see artifacts.Store.Open);
// any artifact uid did not produce is api.ErrNotFound, in the same words
// as one that does not exist.
func (e *Executor) OpenArtifact(uid uint32, sum string) (io.ReadCloser, int64, error) {
	if e.cfg.Artifacts == nil {
		return nil, 0, artifactNotFound(sum)
	}
	f, n, err := e.cfg.Artifacts.Open(uid, sum)
	if errors.Is(err, artifacts.ErrNotFound) {
		return nil, 0, artifactNotFound(sum)
	}
	return f, n, err
}

func artifactNotFound(sum string) error {
	if len(sum) > 80 {
		sum = sum[:80] + "..."
	}
	return api.Errorf(api.ErrNotFound, "sha256", "no artifact %q: it never existed, has expired or been evicted, or was produced by another user", sum)
}

// ArtifactUsage is what uid's artifacts count against the store's quota
// (server.ArtifactUsage): bytes and artifacts.
func (e *Executor) ArtifactUsage(uid uint32) (int64, int) {
	if e.cfg.Artifacts == nil {
		return 0, 0
	}
	return e.cfg.Artifacts.Usage(uid)
}

// filesInfo is what Info says of files: the store's figures are all
// uids' (the server puts the caller's own in for any caller but root).
func (e *Executor) filesInfo() *api.FileCaps {
	c := e.cfg.Files
	if e.cfg.Artifacts == nil {
		return &c
	}
	c.StoreBytes = e.cfg.Artifacts.MaxBytes()
	c.StoreTTLSeconds = int64(e.cfg.Artifacts.TTL().Seconds())
	c.StoreUsedBytes, c.StoreFiles = e.cfg.Artifacts.Stats()
	return &c
}

// extMIME are the media types of common file names. A type with a
// signature (magicOf) is given only to content that starts with it.
var extMIME = map[string]string{
	".csv": "text/csv", ".tsv": "text/tab-separated-values", ".txt": "text/plain", ".log": "text/plain",
	".md": "text/markdown", ".json": "application/json", ".jsonl": "application/jsonl", ".ndjson": "application/x-ndjson",
	".html": "text/html", ".htm": "text/html", ".xml": "application/xml", ".svg": "image/svg+xml",
	".css": "text/css", ".js": "text/javascript", ".py": "text/x-python", ".yaml": "application/yaml", ".yml": "application/yaml",
	".toml": "application/toml", ".tex": "text/x-tex",
	".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif", ".webp": "image/webp",
	".pdf": "application/pdf", ".zip": "application/zip", ".gz": "application/gzip",
	".parquet": "application/vnd.apache.parquet", ".npy": "application/octet-stream",
	".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
}

// magicOf are the signatures of binary types.
var magicOf = map[string][]byte{
	"image/png": []byte("\x89PNG\r\n\x1a\n"), "image/jpeg": {0xff, 0xd8, 0xff}, "image/gif": []byte("GIF8"),
	"application/pdf": []byte("%PDF-"), "application/zip": []byte("PK"), "application/gzip": {0x1f, 0x8b},
	"application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": []byte("PK"),
	"application/vnd.apache.parquet":                                    []byte("PAR1"),
}

// MIMEOf is the media type of a file named name whose content starts with
// head: the name's, when the content agrees (a signature, or text for a
// text type), else what the content looks like.
func MIMEOf(name string, head []byte) string {
	if t, ok := extMIME[strings.ToLower(path.Ext(name))]; ok {
		magic, binary := magicOf[t]
		switch {
		case binary:
			if bytes.HasPrefix(head, magic) {
				return t
			}
		case t == "image/webp":
			if len(head) >= 12 && string(head[:4]) == "RIFF" && string(head[8:12]) == "WEBP" {
				return t
			}
		case isText(t):
			if looksText(head) {
				return t
			}
		default:
			return t
		}
	}
	if len(head) == 0 {
		return "application/octet-stream"
	}
	t, _, _ := strings.Cut(http.DetectContentType(head), ";")
	return t
}

// isText reports whether t is a textual media type.
func isText(t string) bool {
	switch {
	case strings.HasPrefix(t, "text/"):
		return true
	case t == "application/json", t == "application/jsonl", t == "application/x-ndjson", t == "application/xml",
		t == "image/svg+xml", t == "application/yaml", t == "application/toml":
		return true
	}
	return false
}

// looksText reports whether head could start a UTF-8 text (a rune cut at
// its end aside) with no NUL.
func looksText(head []byte) bool {
	if bytes.IndexByte(head, 0) >= 0 {
		return false
	}
	for i := 0; i < len(head); {
		r, n := utf8.DecodeRune(head[i:])
		if r == utf8.RuneError && n <= 1 {
			return len(head)-i < utf8.UTFMax && !utf8.FullRune(head[i:])
		}
		i += n
	}
	return true
}
