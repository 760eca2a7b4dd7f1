package workdir

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// memSink keeps artifacts in memory; onWrite, if set, runs at each
// artifact's first write (to change the file being read).
type memSink struct {
	stored  map[string][]byte
	aborted int
	onWrite func()
}

type memArtifact struct {
	s     *memSink
	buf   bytes.Buffer
	wrote bool
}

func (s *memSink) Create() (Artifact, error) { return &memArtifact{s: s}, nil }

func (a *memArtifact) Write(p []byte) (int, error) {
	if !a.wrote && a.s.onWrite != nil {
		a.s.onWrite()
	}
	a.wrote = true
	return a.buf.Write(p)
}

func (a *memArtifact) Commit() (string, error) {
	sum := sha256.Sum256(a.buf.Bytes())
	h := hex.EncodeToString(sum[:])
	if a.s.stored == nil {
		a.s.stored = map[string][]byte{}
	}
	a.s.stored[h] = a.buf.Bytes()
	return h, nil
}

func (a *memArtifact) Abort() { a.s.aborted++ }

// limits are generous caps for the tests that are not about them.
var limits = Limits{Count: 100, FileBytes: 1 << 20, TotalBytes: 4 << 20, Entries: 1000, Depth: 8, Skipped: 100}

func write(t *testing.T, p string, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func open(t *testing.T, dir string) *Dir {
	t.Helper()
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// reasons maps each skipped path to its reason.
func reasons(c Collected) map[string]string {
	m := map[string]string{}
	for _, s := range c.Skipped {
		m[s.Path] = s.Reason
	}
	return m
}

func paths(c Collected) []string {
	var p []string
	for _, f := range c.Files {
		p = append(p, f.Path)
	}
	return p
}

// TestCollectHostileTree: only regular files come back; links (to
// /etc/shadow, /proc/1/root, a directory loop), a FIFO, a socket, a
// device node and names that are not UTF-8 are skipped with the reason,
// and nothing blocks.
func TestCollectHostileTree(t *testing.T) {
	root := t.TempDir()
	out := filepath.Join(root, "out")
	write(t, filepath.Join(out, "a.csv"), "x,y\n1,2\n")
	write(t, filepath.Join(out, "sub", "b.txt"), "b")
	for name, target := range map[string]string{"shadow": "/etc/shadow", "proc1": "/proc/1/root", "sub/loop": "..", "up": "../secret"} {
		if err := os.Symlink(target, filepath.Join(out, name)); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(root, "secret"), "not in out")
	if err := unix.Mkfifo(filepath.Join(out, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(out, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := os.Link(filepath.Join(out, "a.csv"), filepath.Join(out, "hardlink.csv")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(out, "bad\xffname"), "z")
	device := false
	if os.Geteuid() == 0 {
		// The null device's numbers: opening it would be harmless, but
		// the reader must not even try.
		device = unix.Mknod(filepath.Join(out, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))) == nil
	}

	d := open(t, root)
	sink := &memSink{}
	done := make(chan Collected, 1)
	go func() { done <- d.Collect("out", limits, nil, sink) }()
	var c Collected
	select {
	case c = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Collect blocked")
	}
	if got, want := strings.Join(paths(c), " "), "a.csv hardlink.csv sub/b.txt"; got != want {
		t.Errorf("returned %q, want %q", got, want)
	}
	r := reasons(c)
	for p, want := range map[string]string{
		"shadow": "symbolic link", "proc1": "symbolic link", "sub/loop": "symbolic link", "up": "symbolic link",
		"fifo": "FIFO", "sock": "socket", "bad\ufffdname": "not UTF-8",
	} {
		if !strings.Contains(r[p], want) {
			t.Errorf("%s: reason %q, want one saying %q", p, r[p], want)
		}
	}
	if device && !strings.Contains(r["null"], "device") {
		t.Errorf("a device node: reason %q", r["null"])
	}
	for _, f := range c.Files {
		data := sink.stored[f.SHA256]
		if int64(len(data)) != f.Size || !bytes.HasPrefix(data, f.Head) {
			t.Errorf("%s: stored %q for size %d head %q", f.Path, data, f.Size, f.Head)
		}
	}
	if string(sink.stored[c.Files[0].SHA256]) != "x,y\n1,2\n" {
		t.Errorf("a.csv stored as %q", sink.stored[c.Files[0].SHA256])
	}
}

// TestCollectCaps: past the count, one file's size or all files' size,
// a file is listed as not returned, with its size and the cap; so is a
// directory past the depth, and entries past the ones examined.
func TestCollectCaps(t *testing.T) {
	root := t.TempDir()
	out := filepath.Join(root, "out")
	for i := 0; i < 5; i++ {
		write(t, filepath.Join(out, fmt.Sprintf("f%d", i)), strings.Repeat("x", 10))
	}
	write(t, filepath.Join(out, "g-big"), strings.Repeat("y", 100))
	write(t, filepath.Join(out, "z", "1", "2", "3", "deep.txt"), "deep")
	d := open(t, root)

	l := Limits{Count: 3, FileBytes: 50, TotalBytes: 25, Entries: 1000, Depth: 3, Skipped: 100}
	c := d.Collect("out", l, nil, &memSink{})
	if got := strings.Join(paths(c), " "); got != "f0 f1" {
		t.Errorf("returned %q, want f0 f1 (25 bytes in all)", got)
	}
	r := reasons(c)
	if !strings.Contains(r["f2"], "all files together") || !strings.Contains(r["g-big"], "one file") || !strings.Contains(r["z/1/2"], "deeper than 3") {
		t.Errorf("reasons: %v", r)
	}
	for _, s := range c.Skipped {
		if s.Path == "g-big" && s.Size != 100 {
			t.Errorf("g-big skipped with size %d", s.Size)
		}
	}

	l = Limits{Count: 2, FileBytes: 50, TotalBytes: 1000, Entries: 1000, Depth: 8, Skipped: 2}
	c = d.Collect("out", l, nil, &memSink{})
	if len(c.Files) != 2 || len(c.Skipped) != 2 || c.MoreSkipped == 0 {
		t.Errorf("count 2, skipped listed 2: %d files, %d skipped, %d more", len(c.Files), len(c.Skipped), c.MoreSkipped)
	}
	if !strings.Contains(c.Skipped[0].Reason, "cap of 2 files") {
		t.Errorf("past the count: %q", c.Skipped[0].Reason)
	}

	l = Limits{Count: 100, FileBytes: 1000, TotalBytes: 10000, Entries: 4, Depth: 8, Skipped: 100}
	c = d.Collect("out", l, nil, &memSink{})
	if len(c.Files) != 4 || !strings.Contains(reasons(c)["."], "more entries than the 4 examined") {
		t.Errorf("entries cap 4: files %v, skipped %v", paths(c), c.Skipped)
	}
}

// TestCollectFileThatGrows: a file that changes while it is read is not
// returned as whole, and its content is not kept.
func TestCollectFileThatGrows(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "out", "grows.log")
	write(t, p, strings.Repeat("a", 1000))
	d := open(t, root)
	sink := &memSink{onWrite: func() {
		f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Error(err)
			return
		}
		f.WriteString("more")
		f.Close()
	}}
	c := d.Collect("out", limits, nil, sink)
	if len(c.Files) != 0 || !strings.Contains(reasons(c)["grows.log"], "changed while it was read") || sink.aborted != 1 || len(sink.stored) != 0 {
		t.Errorf("a growing file: files %v, skipped %v, aborted %d, stored %d", paths(c), c.Skipped, sink.aborted, len(sink.stored))
	}

	// Rewritten in place to the same size: its times tell.
	write(t, p, "0123456789")
	sink.onWrite = func() {
		time.Sleep(20 * time.Millisecond) // past the file system's time granularity
		write(t, p, "abcdefghij")
	}
	c = d.Collect("out", limits, nil, sink)
	if len(c.Files) != 0 || !strings.Contains(reasons(c)["grows.log"], "changed") {
		t.Errorf("a file rewritten to the same size: files %v, skipped %v", paths(c), c.Skipped)
	}
}

// TestCollectSince: with a snapshot, only what is new or changed comes
// back, links and FIFOs included.
func TestCollectSince(t *testing.T) {
	root := t.TempDir()
	out := filepath.Join(root, "out")
	write(t, filepath.Join(out, "old"), "old")
	write(t, filepath.Join(out, "changed"), "v1")
	os.Symlink("/etc", filepath.Join(out, "oldlink"))
	d := open(t, root)
	snap := d.Snapshot("out", limits)
	if len(snap) != 3 {
		t.Fatalf("snapshot %v", snap)
	}
	time.Sleep(20 * time.Millisecond)
	write(t, filepath.Join(out, "changed"), "v2")
	write(t, filepath.Join(out, "new"), "new")
	os.Symlink("/etc", filepath.Join(out, "newlink"))
	c := d.Collect("out", limits, snap, &memSink{})
	if got := strings.Join(paths(c), " "); got != "changed new" {
		t.Errorf("returned %q, want changed new", got)
	}
	if r := reasons(c); len(r) != 1 || r["newlink"] == "" {
		t.Errorf("skipped %v, want newlink only", c.Skipped)
	}
	// Nothing there at all: nothing, and no note.
	c = d.Collect("missing", limits, nil, &memSink{})
	if len(c.Files)+len(c.Skipped) != 0 {
		t.Errorf("a missing directory: %+v", c)
	}
}

// TestCollectOutItselfHostile: an out that is a link or a file is not
// followed or read.
func TestCollectOutItselfHostile(t *testing.T) {
	root := t.TempDir()
	os.Symlink("/etc", filepath.Join(root, "out"))
	c := open(t, root).Collect("out", limits, nil, &memSink{})
	if len(c.Files) != 0 || !strings.Contains(reasons(c)["."], "symbolic link") {
		t.Errorf("out -> /etc: %+v", c)
	}
	root = t.TempDir()
	write(t, filepath.Join(root, "out"), "a file")
	c = open(t, root).Collect("out", limits, nil, &memSink{})
	if len(c.Files) != 0 || !strings.Contains(reasons(c)["."], "not a directory") {
		t.Errorf("out a file: %+v", c)
	}
}

// TestCollectInline: small files keep their content, within the caps.
func TestCollectInline(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "out", "a"), "aaaa")
	write(t, filepath.Join(root, "out", "b"), "bbbbbbbb")
	write(t, filepath.Join(root, "out", "c"), "cc")
	l := limits
	l.InlineBytes, l.InlineTotal = 4, 5
	c := open(t, root).Collect("out", l, nil, &memSink{})
	got := map[string]string{}
	for _, f := range c.Files {
		if f.Content != nil {
			got[f.Path] = string(f.Content)
		}
	}
	if len(got) != 1 || got["a"] != "aaaa" {
		t.Errorf("inline: %v (want a alone: b is over 4 bytes, c past the total of 5)", got)
	}
}

// TestReadFile: the file whole, or an error for what is not a regular
// file, over the cap, or missing; a symbolic link anywhere on the path
// is not followed.
func TestReadFile(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "data", "x.csv"), "1,2\n")
	os.Symlink("/etc", filepath.Join(root, "etc"))
	os.Symlink("/etc/passwd", filepath.Join(root, "passwd"))
	unix.Mkfifo(filepath.Join(root, "fifo"), 0o644)
	d := open(t, root)
	read := func(p string, max int64) (string, error) {
		var b bytes.Buffer
		err := d.ReadFile(p, max, func(int64) (io.Writer, error) { return &b, nil })
		return b.String(), err
	}
	if s, err := read("data/x.csv", 100); err != nil || s != "1,2\n" {
		t.Errorf("data/x.csv: %q %v", s, err)
	}
	for p, want := range map[string]error{
		"etc/passwd": ErrNotRegular, "passwd": ErrNotRegular, "fifo": ErrNotRegular, "data": ErrNotRegular,
		"nope": ErrNotFound, "data/x.csv/y": ErrNotFound,
	} {
		if _, err := read(p, 100); !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", p, err, want)
		}
	}
	if _, err := read("data/x.csv", 3); !errors.Is(err, ErrTooBig) {
		t.Errorf("over the cap: %v", err)
	}
	if _, err := read("../"+filepath.Base(root)+"/data/x.csv", 100); err == nil {
		t.Error("a path leaving the directory was read")
	}
}

// TestReadFileChanged: a file that changes while it is read is refused,
// and its last piece is never written: a reader that trusts the size
// sees it short.
func TestReadFileChanged(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "grows")
	write(t, p, strings.Repeat("a", 100000))
	d := open(t, root)
	var got bytes.Buffer
	var size int64
	err := d.ReadFile("grows", 1<<20, func(n int64) (io.Writer, error) {
		size = n
		f, _ := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
		f.WriteString("more")
		f.Close()
		return &got, nil
	})
	if !errors.Is(err, ErrChanged) || int64(got.Len()) >= size {
		t.Errorf("a growing file: %v, %d of %d bytes written", err, got.Len(), size)
	}
}

// TestClone: a clone reads on after the original is closed.
func TestClone(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "out", "a"), "a")
	d, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	c, err := d.Clone()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	d.Close()
	if _, err := d.Clone(); err == nil {
		t.Error("a closed Dir cloned")
	}
	if got := c.Collect("out", limits, nil, &memSink{}); len(got.Files) != 1 {
		t.Errorf("the clone: %+v", got)
	}
}

// TestCollectVerify: a file rewritten in place to the same size while it
// is read, within one tick of the file system's clock (so that its times
// may not tell), is refused when Verify reads it twice.
func TestCollectVerify(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "out", "same-size")
	write(t, p, "AAAAAAAAAA")
	d := open(t, root)
	sink := &memSink{onWrite: func() {
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			t.Error(err)
			return
		}
		f.WriteAt([]byte("BBBBBBBBBB"), 0)
		f.Close()
	}}
	l := limits
	l.Verify = true
	c := d.Collect("out", l, nil, sink)
	if len(c.Files) != 0 || !strings.Contains(reasons(c)["same-size"], "changed while it was read") {
		t.Errorf("a same-size rewrite: files %v, skipped %v", paths(c), c.Skipped)
	}
	// Left alone, it comes back, read twice.
	sink.onWrite = nil
	if c := d.Collect("out", l, nil, sink); len(c.Files) != 1 || string(sink.stored[c.Files[0].SHA256]) != "BBBBBBBBBB" {
		t.Errorf("a still file: %+v", c)
	}
}

// TestReadFileRewrittenInPlace: ReadFile reads twice; a rewrite of the
// same size between the reads is refused.
func TestReadFileRewrittenInPlace(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "f")
	write(t, p, "AAAA")
	d := open(t, root)
	var got bytes.Buffer
	err := d.ReadFile("f", 100, func(int64) (io.Writer, error) {
		f, _ := os.OpenFile(p, os.O_WRONLY, 0)
		f.WriteAt([]byte("BBBB"), 0)
		f.Close()
		return &got, nil
	})
	if !errors.Is(err, ErrChanged) || got.Len() >= 4 {
		t.Errorf("rewritten in place: %v, %q written", err, got.String())
	}
}

// TestSettle: once settled, a file rewritten to the same size at once
// gets another stamp: the coarse clock has moved past the snapshot.
func TestSettle(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "out", "f")
	d := open(t, root)
	for i := range 20 {
		write(t, p, fmt.Sprintf("%04d", i))
		snap := d.Snapshot("out", limits)
		snap.Settle()
		write(t, p, fmt.Sprintf("%04d", i+100))
		c := d.Collect("out", limits, snap, &memSink{})
		if len(c.Files) != 1 {
			t.Fatalf("round %d: a rewrite after Settle was not seen: %+v", i, c)
		}
	}
}

// TestReadFileLeased: a file the program holds with a write lease cannot
// be opened without blocking; that is ErrBusy, a class of its own, not a
// failure of the daemon's.
func TestReadFileLeased(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "held")
	write(t, p, "data")
	holder, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if _, err := unix.FcntlInt(holder.Fd(), unix.F_SETLEASE, unix.F_WRLCK); err != nil {
		t.Skipf("cannot take a lease here: %v", err)
	}
	d := open(t, root)
	called := false
	err = d.ReadFile("held", 100, func(int64) (io.Writer, error) { called = true; return io.Discard, nil })
	if !errors.Is(err, ErrBusy) || called {
		t.Errorf("a leased file: %v (writer asked for: %v)", err, called)
	}
}
