package sessions

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/peercred"
	"github.com/cellblock/cellblock/nsjail"
	"github.com/cellblock/cellblock/nsjail/workdir"
)

// Files in and out of a session's /work: files a run or a PUT brings are
// written by the session's runner between runs (the session is busy
// meanwhile); what a run writes under /work/out and did not find there
// as it is comes back with its result; any file of /work can be read.

// Files is what moves files in and out of sessions (part of Jails).
type Files interface {
	// Inputs decodes a request's files.
	Inputs(files []api.FileInput) ([]nsjail.InputFile, error)
	// InputError classifies an error of PutFiles for the caller, naming
	// field.
	InputError(err error, field string) error
	// SnapshotOut and CollectOut find what a run changed under /work/out
	// and store it for owner.
	SnapshotOut(w *workdir.Dir) workdir.Snapshot
	CollectOut(w *workdir.Dir, owner uint32, inline bool, since workdir.Snapshot) ([]api.File, []api.FileSkipped)
	// ReadWorkFile copies the file at p of w to the writer begin gives.
	ReadWorkFile(w *workdir.Dir, p string, begin func(size int64) (io.Writer, error)) error
}

// putFiles writes a run's (or a PUT's) files into e, which the caller
// marked busy; field names the request's field for errors. It checks
// the files against the caps and the session's tmp size first.
func (m *Manager) putFiles(ctx context.Context, e *entry, files []api.FileInput, field string) error {
	if _, aerr := api.CheckFileCaps(files, m.cfg.FileCaps, e.limits.TmpBytes); aerr != nil {
		if field != "files" {
			aerr.Field = field
		}
		return aerr
	}
	in, err := m.cfg.Jails.Inputs(files)
	if err != nil {
		return err
	}
	return m.writeFiles(ctx, e, in, field)
}

// writeFiles writes files, checked, into e, which the caller marked busy,
// and classifies what went wrong, naming field.
func (m *Manager) writeFiles(ctx context.Context, e *entry, in []nsjail.InputFile, field string) error {
	err := e.opened.Interp.PutFiles(ctx, in)
	if errors.Is(err, nsjail.ErrSessionLost) || err != nil && e.opened.Interp.Lost() {
		m.mu.Lock()
		first := m.markLost(e)
		m.mu.Unlock()
		if first {
			m.lostEvent(e, "", nil)
		}
	}
	if errors.Is(err, nsjail.ErrSessionLost) {
		return api.Errorf(api.ErrSessionLost, "session", "session %q lost its interpreter: its variables are gone; delete it and create another", e.id)
	}
	var fe *nsjail.FileError
	if errors.As(err, &fe) && !fe.OOM && fe.Errno == "" && e.opened.Interp.Lost() {
		// Killed because its runner did not take the files in time (its
		// code kept it from them), or the caller went away: the
		// session's doing or the caller's, not the daemon's failure.
		return api.Errorf(api.ErrSessionLost, "session", "session %q was lost while its files were written (%s): its variables are gone; delete it and create another", e.id, fe.Message)
	}
	if err != nil {
		return m.cfg.Jails.InputError(err, field)
	}
	return nil
}

// refusePut is why e cannot take a file of size bytes (-1: not known)
// now, or nil. Call with m.mu held.
func (m *Manager) refusePut(e *entry, size int64) error {
	switch {
	case e.lost || e.opened.Interp.Lost():
		return api.Errorf(api.ErrSessionLost, "session", "session %q lost its interpreter: it takes no files; delete it and create another", e.id)
	case e.busy:
		return api.Errorf(api.ErrSessionBusy, "session", "a run is in progress in session %q; write its files between runs", e.id)
	case size > m.cfg.FileCaps.InBytes:
		return api.Errorf(api.ErrOverLimit, "path", "is %d bytes; the most a request may carry is %d", size, m.cfg.FileCaps.InBytes)
	case size > e.limits.TmpBytes:
		return api.Errorf(api.ErrOverLimit, "path", "is %d bytes, more than /work holds (tmp_bytes %d)", size, e.limits.TmpBytes)
	}
	return nil
}

// CanPutSessionFile says, before a PUT's body is read, what
// PutSessionFile would refuse now for a file of size bytes (-1: not
// known yet) in session id: another uid's or an unknown session, a lost
// or busy one, a file larger than its /work. nil when it would go on (a
// run may still start meanwhile).
func (m *Manager) CanPutSessionFile(ctx context.Context, caller peercred.Peer, id string, size int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, aerr := m.lookupOwned(caller, id)
	if aerr != nil {
		return aerr
	}
	if m.expiry(e, time.Now()) != "" {
		return m.notFound(caller, id) // the reaper ends it
	}
	return m.refusePut(e, size)
}

// PutSessionFile writes data at p (checked by the caller) under the
// /work of session id, through its runner. A session with a run in
// progress is busy. data is the caller's until it returns; nothing
// copies it whole.
func (m *Manager) PutSessionFile(ctx context.Context, caller peercred.Peer, id, p string, data []byte) error {
	m.mu.Lock()
	e, aerr := m.lookupOwned(caller, id)
	if aerr != nil {
		m.mu.Unlock()
		return aerr
	}
	if err := m.refusePut(e, int64(len(data))); err != nil {
		m.mu.Unlock()
		return err
	}
	if why := m.expiry(e, time.Now()); why != "" {
		m.bury(e, why)
		m.mu.Unlock()
		m.end(e, "expired")
		return m.notFoundLocked(caller, id)
	}
	e.busy = true
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	e.cancelRun = cancel
	m.mu.Unlock()

	err := m.writeFiles(ctx, e, []nsjail.InputFile{{Path: p, Data: data}}, "path")

	m.mu.Lock()
	e.busy = false
	e.cancelRun = nil
	e.lastUsed = time.Now().UTC()
	gone := m.sessions[e.id] != e
	m.mu.Unlock()
	if gone && err != nil {
		return m.notFoundLocked(caller, id)
	}
	return err
}

// ReadSessionFile copies the file at p (checked by the caller) of the
// /work of session id to the writer begin returns. It may run beside a
// run: a file that changes while it is read is refused, never sent in
// part. A lost session's files can still be read until it is deleted.
func (m *Manager) ReadSessionFile(ctx context.Context, caller peercred.Peer, id, p string, begin func(size int64) (io.Writer, error)) error {
	m.mu.Lock()
	e, aerr := m.lookup(caller, id)
	if aerr != nil {
		m.mu.Unlock()
		return aerr
	}
	work := e.opened.Interp.Work()
	m.mu.Unlock()
	return m.cfg.Jails.ReadWorkFile(work, p, begin)
}
