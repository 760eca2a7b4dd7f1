package workdir

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// Limits bound what Collect reads and lists. Zero values take no files.
type Limits struct {
	// Count is the most files returned; FileBytes the largest one;
	// TotalBytes all of them together.
	Count      int
	FileBytes  int64
	TotalBytes int64
	// Entries is the most directory entries examined, Depth the deepest
	// directory level entered: a program can make millions of empty
	// files, which cost its tmpfs nothing.
	Entries int
	Depth   int
	// Skipped is the most skipped entries listed one by one; the rest
	// are counted.
	Skipped int
	// InlineBytes keeps the content of files up to this size in
	// Found.Content, InlineTotal of them together (0: none).
	InlineBytes int64
	InlineTotal int64
	// Verify reads each file a second time and refuses it as changed
	// unless both reads agree: for a directory that code may still be
	// writing (a session's). Its times alone do not tell a rewrite of
	// the same size within the file system's time granularity (one
	// clock tick on tmpfs).
	Verify bool
}

// HeadBytes is how much of each file's start Found.Head holds, for
// sniffing its type.
const HeadBytes = 512

// Sink takes the content of the files Collect returns.
type Sink interface {
	// Create begins storing one file's content.
	Create() (Artifact, error)
}

// Artifact is one file's content being stored: written to, then
// committed, or aborted (a file that changed while it was read).
type Artifact interface {
	io.Writer
	// Commit makes the content stored and returns its SHA-256 in hex.
	Commit() (string, error)
	// Abort drops what was written.
	Abort()
}

// Found is one regular file Collect returned.
type Found struct {
	// Path is relative to the collected directory.
	Path   string
	Size   int64
	SHA256 string
	// Head is the file's first bytes (up to HeadBytes); Content all of
	// it, for a file within Limits.InlineBytes.
	Head    []byte
	Content []byte
}

// Skipped is an entry Collect did not return, and why.
type Skipped struct {
	// Path is relative to the collected directory, with bytes that are
	// not UTF-8 shown as U+FFFD.
	Path   string
	Reason string
	// Size is a regular file's size, else 0.
	Size int64
}

// Collected is what Collect found.
type Collected struct {
	Files   []Found
	Skipped []Skipped
	// MoreSkipped counts the skipped entries past Limits.Skipped.
	MoreSkipped int
}

// Snapshot is the state of the entries under a directory, by path, to
// collect later only what changed (Collect's since).
type Snapshot map[string]Stamp

// walker walks one directory tree beneath a Dir.
type walker struct {
	l       Limits
	entries int
	full    bool // Limits.Entries reached
	visit   func(dirfd int, name, rel string, typ os.FileMode)
	skip    func(rel, reason string, size int64)
}

// walk visits every entry of sub (a path beneath root, "" for root
// itself), depth first, in name order. A sub that does not exist has
// nothing in it; one that is not a directory is skipped.
func (w *walker) walk(root int, sub string) {
	fd := root
	if sub != "" {
		var err error
		fd, err = openBeneath(root, sub, unix.O_RDONLY|unix.O_DIRECTORY)
		switch {
		case errors.Is(err, unix.ENOENT):
			return
		case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
			what := "not a directory"
			var st unix.Stat_t
			if unix.Fstatat(root, sub, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
				what = kind(st.Mode) + ", not a directory"
			}
			w.skip(".", sub+" is "+what, 0)
			return
		case err != nil:
			w.skip(".", fmt.Sprintf("%s could not be opened: %v", sub, err), 0)
			return
		}
	} else {
		fd, _ = unix.FcntlInt(uintptr(root), unix.F_DUPFD_CLOEXEC, 0)
	}
	w.dir(fd, "", 1)
}

// dir visits the entries of the directory open as fd (which it closes),
// at path rel and level depth.
func (w *walker) dir(fd int, rel string, depth int) {
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	left := w.l.Entries - w.entries
	if left <= 0 {
		w.full = true
		return
	}
	ents, err := f.ReadDir(left + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		w.skip(shown(rel), fmt.Sprintf("the directory could not be read: %v", err), 0)
		return
	}
	if len(ents) > left {
		ents, w.full = ents[:left], true
	}
	w.entries += len(ents)
	sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
	for _, e := range ents {
		name := e.Name()
		p := name
		if rel != "" {
			p = rel + "/" + name
		}
		switch {
		case !utf8.ValidString(name):
			w.skip(shown(p), "its name is not UTF-8", 0)
		case e.Type()&os.ModeDir != 0:
			if depth >= w.l.Depth {
				w.skip(p, fmt.Sprintf("a directory nested deeper than %d levels", w.l.Depth), 0)
				continue
			}
			sub, err := openBeneath(int(f.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY)
			if err != nil {
				w.skip(p, openReason(err), 0)
				continue
			}
			w.dir(sub, p, depth+1)
		default:
			w.visit(int(f.Fd()), name, p, e.Type())
		}
	}
}

// shown is p with its bytes that are not UTF-8 as U+FFFD.
func shown(p string) string {
	if p == "" {
		return "."
	}
	return strings.ToValidUTF8(p, "\uFFFD")
}

// openReason says why an entry could not be opened.
func openReason(err error) string {
	switch {
	case errors.Is(err, unix.ELOOP):
		return "a symbolic link (never followed)"
	case errors.Is(err, unix.EWOULDBLOCK):
		return "held by the program (a lease): not read"
	case errors.Is(err, unix.ENOENT):
		return "removed while the directory was read"
	case errors.Is(err, unix.EXDEV):
		return "on another filesystem"
	}
	return fmt.Sprintf("could not be opened: %v", err)
}

// Snapshot records the entries under sub (directories aside), within l's
// Entries and Depth, without opening them.
func (d *Dir) Snapshot(sub string, l Limits) Snapshot {
	snap := Snapshot{}
	w := &walker{l: l, skip: func(string, string, int64) {}}
	w.visit = func(dirfd int, name, rel string, typ os.FileMode) {
		if st, err := lstatAt(dirfd, name); err == nil {
			snap[rel] = st
		}
	}
	w.walk(d.fd(), sub)
	return snap
}

// Collect reads every regular file under sub into sink, within l, and
// lists what it did not return. With since, files whose stamp is the
// same as there are left out: neither returned nor skipped.
func (d *Dir) Collect(sub string, l Limits, since Snapshot, sink Sink) Collected {
	var c Collected
	var total, inline int64
	skip := func(rel, reason string, size int64) {
		if len(c.Skipped) >= l.Skipped {
			c.MoreSkipped++
			return
		}
		c.Skipped = append(c.Skipped, Skipped{Path: rel, Reason: reason, Size: size})
	}
	w := &walker{l: l, skip: skip}
	w.visit = func(dirfd int, name, rel string, typ os.FileMode) {
		if !typ.IsRegular() {
			if since != nil {
				// Listed when new or changed, as a file would be.
				if st, err := lstatAt(dirfd, name); err == nil && since[rel] == st {
					return
				}
			}
			skip(rel, kind(unixType(typ)), 0)
			return
		}
		fd, err := openBeneath(dirfd, name, unix.O_RDONLY)
		if err != nil {
			skip(rel, openReason(err), 0)
			return
		}
		f := os.NewFile(uintptr(fd), rel)
		defer f.Close()
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			skip(rel, fmt.Sprintf("could not be examined: %v", err), 0)
			return
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			skip(rel, kind(st.Mode), 0)
			return
		}
		before := stampOf(&st)
		if since != nil {
			if s, ok := since[rel]; ok && s == before {
				return
			}
		}
		size := st.Size
		switch {
		case len(c.Files) >= l.Count:
			skip(rel, fmt.Sprintf("past the cap of %d files", l.Count), size)
			return
		case size > l.FileBytes:
			skip(rel, fmt.Sprintf("over the cap of %d bytes for one file", l.FileBytes), size)
			return
		case total+size > l.TotalBytes:
			skip(rel, fmt.Sprintf("past the cap of %d bytes for all files together", l.TotalBytes), size)
			return
		}
		keep := size <= l.InlineBytes && inline+size <= l.InlineTotal
		found, why := readOne(f, before, keep, l.Verify, sink)
		if why != "" {
			skip(rel, why, size)
			return
		}
		found.Path = rel
		total += size
		if found.Content != nil {
			inline += size
		}
		c.Files = append(c.Files, found)
	}
	w.walk(d.fd(), sub)
	if w.full {
		skip(".", fmt.Sprintf("more entries than the %d examined: the rest were not looked at", l.Entries), 0)
	}
	return c
}

// lstatAt is the stamp of the entry name of dirfd, not followed.
func lstatAt(dirfd int, name string) (Stamp, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return Stamp{}, err
	}
	return stampOf(&st), nil
}

// unixType is the S_IFMT bits of a directory entry's type.
func unixType(m os.FileMode) uint32 {
	switch {
	case m&os.ModeSymlink != 0:
		return unix.S_IFLNK
	case m&os.ModeNamedPipe != 0:
		return unix.S_IFIFO
	case m&os.ModeSocket != 0:
		return unix.S_IFSOCK
	case m&os.ModeDevice != 0:
		return unix.S_IFCHR
	}
	return 0
}

// ErrChanged is returned for a file that changed while it was read.
var ErrChanged = errors.New("changed while it was read")

// readOne copies the regular file f, whose stamp was before, into a new
// artifact of sink, keeping its head (and all of it with keep). It
// returns why it could not ("" when it could).
func readOne(f *os.File, before Stamp, keep, verify bool, sink Sink) (Found, string) {
	art, err := sink.Create()
	if err != nil {
		return Found{}, fmt.Sprintf("not stored: %v", err)
	}
	head := &headWriter{max: HeadBytes}
	ws := []io.Writer{art, head}
	var content *bytes.Buffer
	if keep {
		content = bytes.NewBuffer(make([]byte, 0, before.Size))
		ws = append(ws, content)
	}
	var first hash.Hash
	if verify {
		first = sha256.New()
		ws = append(ws, first)
	}
	n, err := readExactly(f, io.MultiWriter(ws...), before)
	if err == nil && verify {
		err = readAgain(f, before, first.Sum(nil))
	}
	if err != nil {
		art.Abort()
		if errors.Is(err, ErrChanged) {
			return Found{}, ErrChanged.Error() + ": not returned"
		}
		return Found{}, fmt.Sprintf("could not be read: %v", err)
	}
	sum, err := art.Commit()
	if err != nil {
		return Found{}, fmt.Sprintf("not stored: %v", err)
	}
	found := Found{Size: n, SHA256: sum, Head: head.b}
	if content != nil {
		found.Content = content.Bytes()
	}
	return found, ""
}

// readExactly copies the regular file f, stamped before, to w from its
// start, and fails with ErrChanged unless it held exactly its size and
// kept its stamp while it was read.
func readExactly(f *os.File, w io.Writer, before Stamp) (int64, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	// One byte past the size tells a file that grew.
	n, err := io.Copy(w, io.LimitReader(f, before.Size+1))
	switch {
	case err != nil:
		return n, err
	case n != before.Size:
		return n, ErrChanged
	}
	return n, same(f, before)
}

// readAgain reads f a second time and fails with ErrChanged unless its
// content hashes to sum.
func readAgain(f *os.File, before Stamp, sum []byte) error {
	h := sha256.New()
	if _, err := readExactly(f, h, before); err != nil {
		return err
	}
	if !bytes.Equal(h.Sum(nil), sum) {
		return ErrChanged
	}
	return nil
}

// same checks that f is still as stamped before it was read.
func same(f *os.File, before Stamp) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	if stampOf(&st) != before {
		return ErrChanged
	}
	return nil
}

// headWriter keeps the first max bytes written to it.
type headWriter struct {
	b   []byte
	max int
}

func (h *headWriter) Write(p []byte) (int, error) {
	if n := h.max - len(h.b); n > 0 {
		h.b = append(h.b, p[:min(n, len(p))]...)
	}
	return len(p), nil
}

// Errors of ReadFile.
var (
	// ErrNotFound: nothing at the path (or a component is not a
	// directory).
	ErrNotFound = errors.New("no such file")
	// ErrNotRegular: something other than a regular file is there.
	ErrNotRegular = errors.New("not a regular file")
	// ErrTooBig: the file is over the caller's cap.
	ErrTooBig = errors.New("file too big")
	// ErrBusy: the program holds the file (a lease, fcntl F_SETLEASE),
	// and a reader that does not wait cannot open it now. It is the
	// program's doing, not the daemon's failure.
	ErrBusy = errors.New("held by the program (a lease)")
)

// ReadFile copies the regular file at p (beneath d, no symbolic link
// anywhere) to the writer begin returns, which it calls once the file's
// size is known and within max. The file is read twice, the second time
// to the writer, and the last piece is held back until both reads are
// known to agree and the file's stamp not to have changed: a writer that
// honours the size (an HTTP response with that Content-Length) then never
// holds a partial file as whole. It returns ErrNotFound, ErrNotRegular,
// ErrTooBig, ErrBusy, ErrChanged, or an error from the writer.
func (d *Dir) ReadFile(p string, max int64, begin func(size int64) (io.Writer, error)) error {
	fd, err := openBeneath(d.fd(), p, unix.O_RDONLY)
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
		return ErrNotFound
	case errors.Is(err, unix.ELOOP):
		return fmt.Errorf("%w: a symbolic link is on its path (never followed)", ErrNotRegular)
	case errors.Is(err, unix.EWOULDBLOCK):
		// O_NONBLOCK met a lease: the open started breaking it, which
		// the program may renew as often as it likes.
		return fmt.Errorf("%w: not read", ErrBusy)
	case err != nil:
		return fmt.Errorf("open: %w", err)
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%w: it is %s", ErrNotRegular, kind(st.Mode))
	}
	if st.Size > max {
		return fmt.Errorf("%w: %d bytes; the most is %d", ErrTooBig, st.Size, max)
	}
	before := stampOf(&st)
	first := sha256.New()
	if _, err := readExactly(f, first, before); err != nil {
		return err
	}
	w, err := begin(st.Size)
	if err != nil {
		return err
	}
	hb := &holdBack{w: w}
	second := sha256.New()
	if _, err := readExactly(f, io.MultiWriter(hb, second), before); err != nil {
		return err
	}
	if !bytes.Equal(first.Sum(nil), second.Sum(nil)) {
		return ErrChanged
	}
	return hb.flush()
}

// holdBack passes what is written to w, except its last piece, which
// flush writes.
type holdBack struct {
	w    io.Writer
	last []byte
}

func (h *holdBack) Write(p []byte) (int, error) {
	if len(h.last) > 0 {
		if _, err := h.w.Write(h.last); err != nil {
			return 0, err
		}
	}
	h.last = append(h.last[:0], p...)
	return len(p), nil
}

func (h *holdBack) flush() error {
	if len(h.last) == 0 {
		return nil
	}
	_, err := h.w.Write(h.last)
	return err
}

// settleMax bounds Settle's wait: a few ticks of the coarsest clock.
const settleMax = 50 * time.Millisecond

// Settle returns once the file system's clock has moved past the change
// time of every entry of s, so that any change after s was taken gets a
// later ctime than s recorded, and Collect sees it. tmpfs stamps files
// with the kernel's coarse clock (one tick: 1 to 10 ms): a file changed
// in the tick s was taken, then changed again in that same tick, would
// otherwise keep its stamp. Most snapshots have nothing changed in the
// current tick, and Settle returns at once.
func (s Snapshot) Settle() {
	var latest unix.Timespec
	for _, st := range s {
		if st.Ctime.Sec > latest.Sec || st.Ctime.Sec == latest.Sec && st.Ctime.Nsec > latest.Nsec {
			latest = st.Ctime
		}
	}
	deadline := time.Now().Add(settleMax)
	for {
		var now unix.Timespec
		if unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &now) != nil {
			return
		}
		if now.Sec > latest.Sec || now.Sec == latest.Sec && now.Nsec > latest.Nsec || time.Now().After(deadline) {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
