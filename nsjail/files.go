package nsjail

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellblock/cellblock/nsjail/runner"
	"github.com/cellblock/cellblock/nsjail/workdir"
)

// Files in and out of a jail's /work.
//
// Input files are written inside the jail by its runner, as the jail's
// user (runner/PROTOCOL.md, "Files"): their pages are then the run's, in
// its memory cgroup and its tmpfs, and no descriptor of the daemon's ever
// points into /work for writing. The daemon reads what the program left
// through a descriptor of /work it opened before any of the program's code
// ran (package workdir).

// InputFile is one file placed under the jail's /work before the program
// runs; Path is relative to /work (already checked by the caller).
type InputFile struct {
	Path string
	Data []byte
}

// FileError is an input file the runner could not write: the run did not
// start (a session's run, or its opening, did not go on).
type FileError struct {
	// Index is the file's place in the list, Path its path.
	Index int
	Path  string
	// Errno names the runner's error ("ENOSPC", "ELOOP", ...), "" when
	// the jail went away; Message is its text (from the jail: bounded).
	Errno, Message string
	// NoSpace: /work was full (ENOSPC, EDQUOT, EFBIG).
	NoSpace bool
	// OOM: the jail ran out of memory while the files were written
	// (a tmpfs's pages count against its memory limit).
	OOM bool
}

func (e *FileError) Error() string {
	switch {
	case e.OOM:
		return fmt.Sprintf("input file %q: the jail ran out of memory while the files were written (their pages count against the memory limit)", e.Path)
	case e.Errno == "":
		return fmt.Sprintf("input file %q: %s", e.Path, e.Message)
	}
	return fmt.Sprintf("input file %q: %s (%s)", e.Path, e.Message, e.Errno)
}

// filesTimeout bounds writing a run's input files.
const filesTimeout = launchTimeout

// validFilePath reports whether p can be a path under /work: relative,
// clean, and not leaving it. The caller checked it more closely.
func validFilePath(p string) bool {
	if p == "" || strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) {
		return false
	}
	for _, c := range strings.Split(p, "/") {
		if c == "" || c == "." || c == ".." {
			return false
		}
	}
	return true
}

// openWork opens the jail's /work for the caller (Spec.OpenWork), while
// only the daemon's code has run in it.
func (j *Jail) openWork() error {
	pid, err := j.proc.Pid()
	if err != nil {
		return err
	}
	w, err := j.openWorkOf(pid)
	if err != nil {
		// Once as a warning (it is the daemon's lot: a capability it
		// lacks), then at debug level.
		level := slog.LevelDebug
		if j.r.workWarned.CompareAndSwap(false, true) {
			level = slog.LevelWarn
		}
		j.r.log.Log(context.Background(), level, "cannot open a jail's /work (does cellblockd lack CAP_SYS_PTRACE?): what runs write under /work/out cannot come back",
			"jail", j.id, "err", err)
		return err
	}
	j.work = w
	return nil
}

// openWorkOf opens /work of the jail whose init is pid, making sure that
// pid is still this jail's init: /proc/PID is opened once, and both the
// mount namespace checked against the one the jail holds (holdMounts) and
// the root are looked up beneath it, so that a pid reused by another
// process once the init was reaped fails instead of naming another jail.
func (j *Jail) openWorkOf(pid int) (*workdir.Dir, error) {
	dir, err := unix.Open("/proc/"+strconv.Itoa(pid), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("the jail's init: %w", err)
	}
	defer unix.Close(dir)
	if j.mntns != nil {
		var ns, held unix.Stat_t
		if err := unix.Fstatat(dir, "ns/mnt", &ns, 0); err != nil {
			return nil, fmt.Errorf("the jail's init: %w", err)
		}
		if err := unix.Fstat(int(j.mntns.Fd()), &held); err != nil {
			return nil, err
		}
		if ns.Dev != held.Dev || ns.Ino != held.Ino {
			return nil, errors.New("the jail's init is gone: its pid names another process")
		}
	}
	return workdir.OpenJail(dir)
}

// takeWork hands the jail's /work over to the caller, who closes it.
func (j *Jail) takeWork() *workdir.Dir {
	w := j.work
	j.work = nil
	return w
}

// sendFiles sends files to the jail's runner and waits for its answer on
// each, which next returns (one frame at a time; frames of other types
// are passed over). The frames are written while the answers are read,
// so neither side waits for the other with a full socket. All of it has
// one deadline, by which every frame must be written (next bounds the
// answers by it too): a runner that reads slowly (a session's code can
// replace its handler) cannot hold the caller longer, frame by frame,
// and neither can it past ctx. Giving up, sendFiles cuts the write short
// and returns a FileError without Errno: the channel is out of step, and
// a session must be killed.
func (j *Jail) sendFiles(ctx context.Context, files []InputFile, deadline time.Time, next func() ([]byte, error)) error {
	_ = j.rch.SetWriteDeadline(deadline)
	sent := make(chan error, 1)
	go func() {
		sent <- func() error {
			// One frame at a time: encoded (base64 in JSON), they are a
			// third larger than the files.
			for _, f := range files {
				for off := 0; ; {
					fr, rest, err := runner.EncodeFileFrame(f.Path, f.Data, off)
					if err != nil {
						return err
					}
					if _, err := j.rch.Write(fr); err != nil {
						return err
					}
					if rest == len(f.Data) {
						break
					}
					off = rest
				}
			}
			return nil
		}()
	}()
	// stop cuts the sender short and waits for it.
	stop := func() error {
		_ = j.rch.SetWriteDeadline(time.Now())
		return <-sent
	}
	// Every file is answered at its last frame, failed or not: read them
	// all, so that a session's channel is in step again afterwards.
	var first error
	for i, f := range files {
		var p []byte
		var err error
		for {
			if p, err = next(); err != nil || isFileWritten(p) {
				break
			}
		}
		if err != nil {
			stop()
			return j.filesLost(f, i, err)
		}
		w, err := runner.ParseFileWritten(p)
		var ferr *FileError
		switch {
		case err != nil:
			ferr = &FileError{Index: i, Path: f.Path, Message: "the runner's answer could not be read: " + err.Error()}
		case w.Path != f.Path:
			ferr = &FileError{Index: i, Path: f.Path, Message: "the runner answered for another file"}
		case w.Error != "":
			ferr = &FileError{Index: i, Path: f.Path, Errno: w.Error, Message: w.Message,
				NoSpace: w.Error == "ENOSPC" || w.Error == "EDQUOT" || w.Error == "EFBIG"}
		case w.Bytes != int64(len(f.Data)):
			ferr = &FileError{Index: i, Path: f.Path, Message: fmt.Sprintf("the runner wrote %d bytes of %d", w.Bytes, len(f.Data))}
		}
		if ferr != nil && first == nil {
			first = ferr
		}
	}
	// All answered, yet a runner that answered early may not have taken
	// every frame: the same deadline, and ctx, bound the wait.
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	var err error
	select {
	case err = <-sent:
	case <-timer.C:
		stop()
		err = errors.New("the jail's runner did not take them in time")
	case <-ctx.Done():
		stop()
		err = ctx.Err()
	}
	if err != nil {
		return &FileError{Index: len(files) - 1, Path: files[len(files)-1].Path, Message: "the files could not be sent: " + err.Error()}
	}
	return first
}

// isFileWritten reports whether p is the runner's answer for a file.
func isFileWritten(p []byte) bool {
	t, err := runner.MessageType(p)
	return err == nil && t == runner.TypeFileWritten
}

// filesTimeoutFor bounds writing files of size bytes in all: a floor,
// and a second per 16 MiB.
func filesTimeoutFor(size int64) time.Duration {
	return filesTimeout + time.Duration(size>>24)*time.Second
}

// filesLost is the error for the channel ending (or failing) while file
// was awaited: the jail ran out of memory, or died.
func (j *Jail) filesLost(f InputFile, i int, err error) error {
	if st, serr := j.cg.Stats(); serr == nil && st.OOMKilled {
		return &FileError{Index: i, Path: f.Path, OOM: true}
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return &FileError{Index: i, Path: f.Path, Message: "the jail's runner went away while the files were written"}
	}
	return &FileError{Index: i, Path: f.Path, Message: "no answer from the jail's runner: " + err.Error()}
}

// writeFiles writes files through the runner of a jail being handed over,
// once its runner is ready: the frames it answers with come straight off
// the channel, before anything else reads it.
func (j *Jail) writeFiles(files []InputFile) error {
	select {
	case <-j.warm:
	case <-j.exited:
		return &FileError{Path: files[0].Path, Message: "the jail's runner exited before the files could be written"}
	case <-time.After(filesTimeout):
		return &FileError{Path: files[0].Path, Message: "the jail's runner did not get ready"}
	}
	deadline := time.Now().Add(filesTimeoutFor(totalSize(files)))
	_ = j.rch.SetReadDeadline(deadline)
	defer j.rch.SetReadDeadline(time.Time{})
	fr := runner.NewFrameReader(j.rch, runner.ReadyFrameBytes)
	return j.sendFiles(context.Background(), files, deadline, fr.Next)
}

// WorkErr says why the session's /work could not be opened, when it was
// asked for and could not be (Work is then nil).
func (s *Session) WorkErr() error { return s.j.workErr }

// Work is the session's /work, open (Spec.OpenWork), or nil. It stays
// the session's: callers use a Clone of it, which a Close of the session
// does not cut short.
func (s *Session) Work() *workdir.Dir { return s.j.work }

// PutFiles writes files under the session's /work through its runner,
// between runs: one caller at a time, like Run. An error wrapping
// ErrSessionLost means the session had lost its interpreter before; a
// *FileError that a file could not be written (the session may be lost
// now, out of memory: see Lost).
func (s *Session) PutFiles(ctx context.Context, files []InputFile) error {
	if len(files) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Lost() {
		return ErrSessionLost
	}
	s.waiting.Store(true)
	defer s.waiting.Store(false)
	deadline := time.Now().Add(filesTimeoutFor(totalSize(files)))
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	next := func() ([]byte, error) {
		select {
		case p, ok := <-s.frames:
			if !ok {
				return nil, io.EOF
			}
			return p, nil
		case <-s.lost:
			return nil, io.EOF
		case <-timer.C:
			return nil, errors.New("timed out")
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	err := s.j.sendFiles(ctx, files, deadline, next)
	var fe *FileError
	if errors.As(err, &fe) && fe.Errno == "" && !s.Lost() {
		// The channel is out of step (or the session's code kept the
		// runner from taking the files in time): it cannot go on.
		s.kill()
	}
	return err
}

// totalSize is the size of files together.
func totalSize(files []InputFile) int64 {
	var n int64
	for _, f := range files {
		n += int64(len(f.Data))
	}
	return n
}
