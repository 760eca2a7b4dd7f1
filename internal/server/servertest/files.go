package servertest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/peercred"
)

// The stand-in executor keeps artifacts and sessions' files in memory: an
// artifact is readable by the uids it was added for (and root), as the
// daemon's store has it; a session's files by whoever may use the
// session.

type artifact struct {
	data   []byte
	owners map[uint32]bool
}

// AddArtifact stores content as an artifact that owner produced, and
// returns its SHA-256 (what a result's files name).
func (d *Daemon) AddArtifact(owner uint32, content []byte) string {
	h := sha256.Sum256(content)
	sum := hex.EncodeToString(h[:])
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.artifacts == nil {
		d.artifacts = map[string]*artifact{}
	}
	a := d.artifacts[sum]
	if a == nil {
		a = &artifact{data: append([]byte(nil), content...), owners: map[uint32]bool{}}
		d.artifacts[sum] = a
	}
	a.owners[owner] = true
	return sum
}

// ArtifactReads counts the artifacts fetched.
func (d *Daemon) ArtifactReads() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.artifactReads
}

func (e *executor) OpenArtifact(uid uint32, sum string) (io.ReadCloser, int64, error) {
	d := (*Daemon)(e)
	d.mu.Lock()
	defer d.mu.Unlock()
	a := d.artifacts[sum]
	if a == nil || uid != 0 && !a.owners[uid] {
		return nil, 0, api.Errorf(api.ErrNotFound, "sha256", "no artifact %q", sum)
	}
	d.artifactReads++
	return io.NopCloser(bytes.NewReader(a.data)), int64(len(a.data)), nil
}

// ArtifactUsage is what the info SetInfo (or Start) gave says of the
// store, for every uid.
func (e *executor) ArtifactUsage(uid uint32) (int64, int) {
	d := (*Daemon)(e)
	d.mu.Lock()
	defer d.mu.Unlock()
	if f := d.info.Files; f != nil {
		return f.StoreUsedBytes, f.StoreFiles
	}
	return 0, 0
}

// SessionFile returns the file at path of session id, as a PUT wrote it.
func (d *Daemon) SessionFile(id, path string) ([]byte, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.sessions[id]
	if s == nil {
		return nil, false
	}
	b, ok := s.files[path]
	return b, ok
}

// SetSessionFile puts a file at path in session id's /work.
func (d *Daemon) SetSessionFile(id, path string, data []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s := d.sessions[id]; s != nil {
		if s.files == nil {
			s.files = map[string][]byte{}
		}
		s.files[path] = data
	}
}

func (e *executor) ReadSessionFile(ctx context.Context, owner peercred.Peer, id, path string, begin func(size int64) (io.Writer, error)) error {
	d := (*Daemon)(e)
	d.mu.Lock()
	s, err := d.sessionFor(owner, id)
	var data []byte
	ok := false
	if err == nil {
		data, ok = s.files[path]
	}
	d.mu.Unlock()
	if err != nil {
		return err
	}
	if !ok {
		return api.Errorf(api.ErrNotFound, "path", "no file %q in the session's /work", path)
	}
	w, err := begin(int64(len(data)))
	if err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}

func (e *executor) CanPutSessionFile(ctx context.Context, owner peercred.Peer, id string, size int64) error {
	d := (*Daemon)(e)
	d.mu.Lock()
	defer d.mu.Unlock()
	_, err := d.puttable(owner, id)
	return err
}

// puttable is owner's session id when a file may be put into it now; d.mu
// is held.
func (d *Daemon) puttable(owner peercred.Peer, id string) (*fakeSession, error) {
	s, err := d.sessionOwned(owner, id)
	switch {
	case err != nil:
		return nil, err
	case s.info.State == api.SessionLost:
		return nil, api.Errorf(api.ErrSessionLost, "session", "session %q lost its interpreter", id)
	case s.busy:
		return nil, api.Errorf(api.ErrSessionBusy, "session", "a run is in progress in session %q", id)
	}
	return s, nil
}

func (e *executor) PutSessionFile(ctx context.Context, owner peercred.Peer, id, path string, data []byte) error {
	d := (*Daemon)(e)
	d.mu.Lock()
	defer d.mu.Unlock()
	s, err := d.puttable(owner, id)
	if err != nil {
		return err
	}
	if s.files == nil {
		s.files = map[string][]byte{}
	}
	s.files[path] = append([]byte(nil), data...)
	return nil
}

// filesOf is the server's caps on files: info's, else none.
func filesOf(info api.Info) api.FileCaps {
	if info.Files == nil {
		return api.FileCaps{}
	}
	return *info.Files
}
