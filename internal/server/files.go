package server

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/peercred"
	"github.com/cellblock/cellblock/internal/record"
)

// Files: a request's files are checked here against the operator's caps
// (Config.Files) before anything is built; the artifacts runs produced
// are served to the uids that produced them; a session's /work is read
// and written file by file.

// callerFiles puts the caller's own figures of the artifact store into
// info, for any caller but root.
func (s *Server) callerFiles(info *api.Info, peer peercred.Peer) {
	if info.Files == nil || peer.UID == 0 {
		return
	}
	f := *info.Files
	f.StoreUsedBytes, f.StoreFiles = s.svc.Artifacts.ArtifactUsage(peer.UID)
	info.Files = &f
}

// requestBytes is the largest body of a request that may carry files.
func (s *Server) requestBytes() int64 {
	if s.cfg.Files.InCount == 0 {
		return api.MaxRequestBytes
	}
	return s.cfg.Files.RequestBytes()
}

// checkFiles refuses files past the operator's caps or tmpBytes.
func (s *Server) checkFiles(files []api.FileInput, tmpBytes int64) *api.Error {
	_, aerr := api.CheckFileCaps(files, s.cfg.Files, tmpBytes)
	return aerr
}

// checkRunFiles checks a run's files: against its tmp_bytes, or for a
// run in a session against the caps alone (the session checks its own
// tmp size).
func (s *Server) checkRunFiles(req *api.RunRequest, limits api.Limits) *api.Error {
	if req.Session != "" {
		return s.checkFiles(req.Files, math.MaxInt64)
	}
	return s.checkFiles(req.Files, limits.TmpBytes)
}

// observeFile tells the file observer of op.
func (s *Server) observeFile(op record.FileOp) {
	if s.cfg.FileObserver != nil {
		s.cfg.FileObserver(op)
	}
}

// registerFiles adds the routes of artifacts and session files.
func (s *Server) registerFiles(mux *http.ServeMux) {
	mux.HandleFunc("GET "+api.PathArtifacts+"/{sha256}", func(w http.ResponseWriter, r *http.Request) {
		s.getArtifact(w, r, s.svc.Artifacts)
	})
	route := api.PathSessions + "/{id}/" + api.SessionFilesDir + "/{path...}"
	mux.HandleFunc("GET "+route, func(w http.ResponseWriter, r *http.Request) { s.getSessionFile(w, r, s.svc.Files) })
	mux.HandleFunc("PUT "+route, func(w http.ResponseWriter, r *http.Request) { s.putSessionFile(w, r, s.svc.Files) })
}

// An answer that sends a file (an artifact, a session's file) must end in
// fileAnswerBase plus its size at fileAnswerRate bytes a second, or it is
// cut: a client that asks and never reads would otherwise hold what the
// answer holds (an artifact's file, which an eviction has unlinked and
// whose blocks stay taken while it is open; a session's /work, whose whole
// tmpfs a deleted session would keep in memory) for as long as it likes.
// Variables for the tests.
var (
	fileAnswerBase       = 30 * time.Second
	fileAnswerRate int64 = 1 << 20
)

// fileAnswer bounds the answer w sends a file of size bytes in, from now:
// its write deadline, under which net/http also flushes the answer's end
// once the handler returns, and which it lifts then for the connection's
// next request (a run's stream may take long).
func fileAnswer(w http.ResponseWriter, size int64) {
	d := fileAnswerBase + time.Duration(float64(size)/float64(fileAnswerRate)*float64(time.Second))
	// Without deadlines (a writer that is not a connection's) there is
	// nothing to bound.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(d))
}

// clientWriter is the client's side of an answer: it remembers whether a
// write to it failed (the client went away or did not read in time),
// which is no failure of the daemon's.
type clientWriter struct {
	w   io.Writer
	err error
}

func (c *clientWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	if err != nil && c.err == nil {
		c.err = err
	}
	return n, err
}

// storeReader is the store's side of an artifact's answer: it remembers
// whether a read failed, which is the daemon's failure, unlike a write to
// the client that fails.
type storeReader struct {
	r   io.Reader
	err error
}

func (s *storeReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF && s.err == nil {
		s.err = err
	}
	return n, err
}

// getArtifact streams an artifact to a uid that produced it, within
// fileAnswer's time.
func (s *Server) getArtifact(w http.ResponseWriter, r *http.Request, as Artifacts) {
	peer, _ := PeerFrom(r.Context())
	sum := r.PathValue("sha256")
	op := record.FileOp{Peer: peer, Op: record.ArtifactGet, SHA256: sum, Started: time.Now()}
	f, size, err := as.OpenArtifact(peer.UID, sum)
	if err != nil {
		e := s.callerError(err, newRef("e"), peer)
		op.Error = e
		s.observeFile(op)
		writeError(w, e)
		return
	}
	defer f.Close()
	op.Size = size
	s.observeFile(op)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	fileAnswer(w, size)
	w.WriteHeader(http.StatusOK)
	store := &storeReader{r: io.LimitReader(f, size)}
	if _, err := io.Copy(w, store); err != nil {
		// Out of time, or the client went away (or, seldom, the store
		// could not be read): the file is closed as the handler ends,
		// and so is the connection.
		level := slog.LevelDebug
		if store.err != nil {
			level = slog.LevelError
		}
		s.log.Log(r.Context(), level, "an artifact's answer was cut", "uid", peer.UID, "sha256", sum, "err", err)
		panic(http.ErrAbortHandler)
	}
}

// sessionPath is the path of a session file request, checked.
func sessionPath(r *http.Request) (string, *api.Error) {
	p := r.PathValue("path")
	if why := api.CheckFilePath(p); why != "" {
		return "", api.Errorf(api.ErrBadRequest, "path", "%q %s", p, why)
	}
	return p, nil
}

// getSessionFile streams a file of a session's /work. Its size is sent
// first (Content-Length); a file that changes while it is read ends the
// answer short of it, so that no client takes part of it for the whole.
// The answer has fileAnswer's time: the session's /work, which the read
// holds open, is let go when it is over, read or not.
func (s *Server) getSessionFile(w http.ResponseWriter, r *http.Request, fm SessionFiles) {
	peer, _ := PeerFrom(r.Context())
	id := r.PathValue("id")
	op := record.FileOp{Peer: peer, Op: record.FileGet, Session: id, Started: time.Now()}
	p, aerr := sessionPath(r)
	op.Path = p
	if aerr != nil {
		op.Error = aerr
		s.observeFile(op)
		writeError(w, aerr)
		return
	}
	h := sha256.New()
	started := false
	client := &clientWriter{w: w}
	err := fm.ReadSessionFile(r.Context(), peer, id, p, func(size int64) (io.Writer, error) {
		op.Size = size
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		fileAnswer(w, size)
		started = true
		w.WriteHeader(http.StatusOK)
		return io.MultiWriter(client, h), nil
	})
	if err == nil {
		op.SHA256 = hex.EncodeToString(h.Sum(nil))
		s.observeFile(op)
		return
	}
	if client.err != nil {
		// Out of time, or the client went away: not the daemon's
		// failure, nor one to log above debug.
		s.log.Debug("a session file's answer was cut", "uid", peer.UID, "session", id, "err", client.err)
		op.Error = api.Errorf(api.ErrCanceled, "", "the caller did not take the answer in time")
		s.observeFile(op)
		panic(http.ErrAbortHandler)
	}
	e := s.callerError(err, newRef("e"), peer)
	op.Error = e
	s.observeFile(op)
	if started {
		// The status is gone already: cut the answer short of its
		// Content-Length, which the client sees as an error.
		panic(http.ErrAbortHandler)
	}
	writeError(w, e)
}

// putSessionFile writes the body as a file of a session's /work. The
// session is looked up before the body is read: a PUT it would refuse
// costs nothing. The body is read into one buffer of its size, within
// the bytes and the time every request body has (bodies.go), then handed
// down as it is: the session's runner takes it a frame at a time.
func (s *Server) putSessionFile(w http.ResponseWriter, r *http.Request, fm SessionFiles) {
	peer, _ := PeerFrom(r.Context())
	id := r.PathValue("id")
	op := record.FileOp{Peer: peer, Op: record.FilePut, Session: id, Started: time.Now()}
	refuse := func(e *api.Error) {
		op.Error = e
		s.observeFile(op)
		writeError(w, e)
	}
	if s.isDraining() {
		refuse(api.Errorf(api.ErrUnavailable, "", "cellblockd is shutting down"))
		return
	}
	p, aerr := sessionPath(r)
	op.Path = p
	if aerr != nil {
		refuse(aerr)
		return
	}
	if api.UnderOut(p) {
		refuse(api.Errorf(api.ErrBadRequest, "path", "%q is under %s/, where the program's results go; put inputs elsewhere in /work", p, api.OutDir))
		return
	}
	limit := s.cfg.Files.InBytes
	if s.cfg.Files.InCount == 0 {
		refuse(api.Errorf(api.ErrOverLimit, "", "this daemon takes no files"))
		return
	}
	size := r.ContentLength // -1: not said (chunked)
	if size > limit {
		refuse(api.Errorf(api.ErrTooLarge, "", "the file is %d bytes, larger than %d bytes, the most a request may carry", size, limit))
		return
	}
	if err := fm.CanPutSessionFile(r.Context(), peer, id, size); err != nil {
		refuse(s.callerError(err, newRef("e"), peer))
		return
	}
	data, aerr := readBody(w, r, size, limit)
	if aerr != nil {
		refuse(aerr)
		return
	}
	sum := sha256.Sum256(data)
	op.Size, op.SHA256 = int64(len(data)), hex.EncodeToString(sum[:])
	ctx, end, ok := s.begin(w, r)
	if !ok {
		return
	}
	defer end()
	err := fm.PutSessionFile(ctx, peer, id, p, data)
	if err != nil {
		op.Error = s.callerError(err, newRef("e"), peer)
		s.observeFile(op)
		writeError(w, op.Error)
		return
	}
	s.observeFile(op)
	writeJSON(w, http.StatusOK, &api.SessionFileWritten{Session: id, Path: p, Size: op.Size, SHA256: op.SHA256})
}

// readBody reads r's body, of size bytes (-1: not said, then at most
// limit), into one buffer, within the time boundBody gave it: a client
// that sends slowly holds its share of the bodies' bytes no longer.
func readBody(w http.ResponseWriter, r *http.Request, size, limit int64) ([]byte, *api.Error) {
	body := http.MaxBytesReader(w, r.Body, limit)
	var data []byte
	var err error
	if size >= 0 {
		data = make([]byte, size)
		_, err = io.ReadFull(body, data)
	} else {
		data, err = io.ReadAll(body)
	}
	var mbe *http.MaxBytesError
	switch {
	case err == nil:
		return data, nil
	case errors.As(err, &mbe):
		return nil, api.Errorf(api.ErrTooLarge, "", "the file is larger than %d bytes, the most a request may carry", limit)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, bodyTooSlow()
	}
	return nil, api.Errorf(api.ErrBadRequest, "", "read the file: %v", err)
}
