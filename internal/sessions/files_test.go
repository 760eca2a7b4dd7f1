package sessions

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/peercred"
	"github.com/cellblock/cellblock/nsjail"
	"github.com/cellblock/cellblock/nsjail/workdir"
)

// filesInterp is a fakeInterp whose /work takes files.
type filesInterp struct {
	*fakeInterp
	log    *[]string // what happened, in order: "put a,b", "run CODE"
	putErr error
	lose   bool // PutFiles loses the interpreter (out of memory)
}

func (f *filesInterp) Work() *workdir.Dir { return nil }

func (f *filesInterp) PutFiles(ctx context.Context, files []nsjail.InputFile) error {
	var p []string
	for _, file := range files {
		p = append(p, file.Path+"="+string(file.Data))
	}
	f.mu.Lock()
	*f.log = append(*f.log, "put "+strings.Join(p, ","))
	if f.lose {
		f.lost = true
	}
	err := f.putErr
	f.mu.Unlock()
	return err
}

// fakeFiles is the executor's side of files, recording what it is asked.
type fakeFiles struct {
	mu      sync.Mutex
	collect []string // "uid inline since"
}

func (*fakeFiles) Inputs(files []api.FileInput) ([]nsjail.InputFile, error) {
	var out []nsjail.InputFile
	for i := range files {
		d, err := files[i].Data()
		if err != nil {
			return nil, err
		}
		out = append(out, nsjail.InputFile{Path: files[i].Path, Data: d})
	}
	return out, nil
}

func (*fakeFiles) InputError(err error, field string) error {
	var fe *nsjail.FileError
	if errors.As(err, &fe) && fe.OOM {
		return api.Errorf(api.ErrOverLimit, field, "out of memory")
	}
	return api.Errorf(api.ErrBadRequest, field, "%v", err)
}

func (*fakeFiles) SnapshotOut(*workdir.Dir) workdir.Snapshot {
	return workdir.Snapshot{"before": {}}
}

func (f *fakeFiles) CollectOut(w *workdir.Dir, owner uint32, inline bool, since workdir.Snapshot) ([]api.File, []api.FileSkipped) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, snap := since["before"]
	f.collect = append(f.collect, strings.Join([]string{string(rune('0' + owner/1000)), boolStr(inline), boolStr(snap)}, " "))
	return []api.File{{Path: "chart.png", Size: 3, SHA256: strings.Repeat("c", 64), MIME: "image/png"}}, nil
}

func (*fakeFiles) ReadWorkFile(w *workdir.Dir, p string, begin func(int64) (io.Writer, error)) error {
	out, err := begin(int64(len(p)))
	if err != nil {
		return err
	}
	_, err = io.WriteString(out, p)
	return err
}

func boolStr(b bool) string {
	if b {
		return "y"
	}
	return "n"
}

// newFilesHarness is a harness whose interpreters take files, with the
// log of what they did.
func newFilesHarness(t *testing.T) (*harness, *fakeFiles, *[]string, func(id string) *filesInterp) {
	files := &fakeFiles{}
	h := newHarness(t, Config{FileCaps: api.FileCaps{InCount: 4, InBytes: 100}})
	h.files = files
	var log []string
	made := map[string]*filesInterp{}
	var mu sync.Mutex
	h.wrap = func(id string, o *Opened) *Opened {
		fi := &filesInterp{fakeInterp: o.Interp.(*fakeInterp), log: &log}
		fi.run = func(ctx context.Context, f *fakeInterp, r *nsjail.SessionRun) (*nsjail.Outcome, error) {
			f.mu.Lock()
			log = append(log, "run "+r.Code)
			f.mu.Unlock()
			return &nsjail.Outcome{}, nil
		}
		mu.Lock()
		made[id] = fi
		mu.Unlock()
		o.Interp = fi
		return o
	}
	return h, files, &log, func(id string) *filesInterp {
		mu.Lock()
		defer mu.Unlock()
		return made[id]
	}
}

// TestSessionRunFiles: a run's files are written before its code, and
// what it changed under /work/out comes back, stored for the caller.
func TestSessionRunFiles(t *testing.T) {
	h, files, log, _ := newFilesHarness(t)
	s, err := h.m.CreateSession(context.Background(), alice, &api.SessionRequest{}, api.Limits{TmpBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	res, err := runIn(h.m, context.Background(), alice, "r1", &api.RunRequest{Session: s.ID, Code: "plot()",
		Files: []api.FileInput{{Path: "a.csv", Content: "1,2"}}, ReturnFiles: api.ReturnFilesInline}, api.Limits{TimeoutMs: 1000}, nil)
	if err != nil || res.Error != nil {
		t.Fatalf("%+v %v", res, err)
	}
	if got := strings.Join(*log, "; "); got != "put a.csv=1,2; run plot()" {
		t.Errorf("order: %s", got)
	}
	if len(res.Files) != 1 || res.Files[0].Path != "chart.png" || len(files.collect) != 1 || files.collect[0] != "1 y y" {
		t.Errorf("files %+v, collected as %v (want uid 1, inline, since the snapshot)", res.Files, files.collect)
	}
	// Past the caps or the session's tmp size: refused, nothing runs.
	*log = nil
	for _, f := range [][]api.FileInput{
		{{Path: "a", Content: strings.Repeat("x", 101)}},
		{{Path: "a"}, {Path: "b"}, {Path: "c"}, {Path: "d"}, {Path: "e"}},
	} {
		_, err := runIn(h.m, context.Background(), alice, "r2", &api.RunRequest{Session: s.ID, Code: "x", Files: f}, api.Limits{TimeoutMs: 1000}, nil)
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Type != api.ErrOverLimit || ae.Field != "files" {
			t.Errorf("past the caps: %v", err)
		}
	}
	if len(*log) != 0 {
		t.Errorf("refused files did something: %v", *log)
	}
}

// TestPutSessionFile: the owner writes files between runs; root is
// forbidden, anyone else is told the session does not exist; a busy
// session takes none; a
// write that kills the interpreter leaves the session lost.
func TestPutSessionFile(t *testing.T) {
	h, _, log, interp := newFilesHarness(t)
	s, err := h.m.CreateSession(context.Background(), alice, &api.SessionRequest{}, api.Limits{TmpBytes: 50})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := h.m.PutSessionFile(ctx, alice, s.ID, "d/x.txt", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if err := h.m.PutSessionFile(ctx, root, s.ID, "y", []byte("r")); !errors.Is(err, api.ErrForbidden) {
		t.Errorf("root: %v, want forbidden: only the owner writes files", err)
	}
	if got := strings.Join(*log, "; "); got != "put d/x.txt=hi" {
		t.Errorf("log %s", got)
	}
	errBob := h.m.PutSessionFile(ctx, bob, s.ID, "x", []byte("b"))
	errNone := h.m.PutSessionFile(ctx, bob, "s-never", "x", []byte("b"))
	var a, b *api.Error
	if !errors.As(errBob, &a) || !errors.As(errNone, &b) || a.Type != api.ErrSessionNotFound ||
		a.Message != strings.Replace(b.Message, "s-never", s.ID, 1) {
		t.Errorf("bob: %v; an unknown session: %v", errBob, errNone)
	}
	var ae *api.Error
	if err := h.m.PutSessionFile(ctx, alice, s.ID, "big", make([]byte, 51)); !errors.As(err, &ae) || ae.Type != api.ErrOverLimit || ae.Field != "path" {
		t.Errorf("over the session's tmp size: %v", err)
	}
	// Busy while a run is in progress.
	f := interp(s.ID)
	bl := block(f.fakeInterp, true, true)
	ch := h.goRun(alice, s.ID, "slow")
	<-bl.entered
	if err := h.m.PutSessionFile(ctx, alice, s.ID, "x", []byte("x")); !errors.As(err, &ae) || ae.Type != api.ErrSessionBusy {
		t.Errorf("during a run: %v", err)
	}
	if err := h.m.CanPutSessionFile(ctx, alice, s.ID, 1); !errors.As(err, &ae) || ae.Type != api.ErrSessionBusy {
		t.Errorf("asked before the body, during a run: %v", err)
	}
	bl.release <- &nsjail.Outcome{}
	<-ch
	// Asked before the body is read: what the PUT would be told.
	for _, c := range []struct {
		caller peercred.Peer
		id     string
		size   int64
		want   api.ErrorType
	}{
		{alice, s.ID, 10, ""}, {alice, s.ID, -1, ""}, {root, s.ID, 10, api.ErrForbidden},
		{bob, s.ID, 10, api.ErrSessionNotFound}, {alice, "s-never", 10, api.ErrSessionNotFound},
		{alice, s.ID, 51, api.ErrOverLimit}, {alice, s.ID, 101, api.ErrOverLimit},
	} {
		err := h.m.CanPutSessionFile(ctx, c.caller, c.id, c.size)
		if c.want == "" && err != nil || c.want != "" && !errors.Is(err, c.want) {
			t.Errorf("uid %d, %s, %d bytes: %v, want %q", c.caller.UID, c.id, c.size, err, c.want)
		}
	}
	// Out of memory while writing: over_limit, and the session is lost.
	f.set(func(*fakeInterp) {})
	f.putErr, f.lose = &nsjail.FileError{Path: "x", OOM: true}, true
	if err := h.m.PutSessionFile(ctx, alice, s.ID, "x", []byte("x")); !errors.As(err, &ae) || ae.Type != api.ErrOverLimit {
		t.Errorf("out of memory: %v", err)
	}
	if err := h.m.PutSessionFile(ctx, alice, s.ID, "x", []byte("x")); !errors.As(err, &ae) || ae.Type != api.ErrSessionLost {
		t.Errorf("after: %v", err)
	}
	if err := h.m.CanPutSessionFile(ctx, alice, s.ID, 1); !errors.As(err, &ae) || ae.Type != api.ErrSessionLost {
		t.Errorf("asked before the body, after: %v", err)
	}
	h.wantEvents(map[string]int{"created": 1, "lost": 1})
}

// TestPutSessionFileKilled: a session killed because its runner did not
// take a file in time is lost, and the PUT says so (session_lost), as
// the caller's or the session's doing, not the daemon's failure.
func TestPutSessionFileKilled(t *testing.T) {
	h, _, _, interp := newFilesHarness(t)
	s, err := h.m.CreateSession(context.Background(), alice, &api.SessionRequest{}, api.Limits{TmpBytes: 50})
	if err != nil {
		t.Fatal(err)
	}
	f := interp(s.ID)
	f.set(func(*fakeInterp) {})
	f.putErr, f.lose = &nsjail.FileError{Path: "x", Message: "the files could not be sent: the jail's runner did not take them in time"}, true
	err = h.m.PutSessionFile(context.Background(), alice, s.ID, "x", []byte("x"))
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Type != api.ErrSessionLost || !strings.Contains(ae.Message, "did not take them in time") {
		t.Errorf("a session killed while a file was written: %v", err)
	}
	h.wantEvents(map[string]int{"created": 1, "lost": 1})
}

// TestReadSessionFile: the owner (and root) reads, anyone else is told
// the session does not exist; a lost session's files can still be read.
func TestReadSessionFile(t *testing.T) {
	h, _, _, interp := newFilesHarness(t)
	s, err := h.m.CreateSession(context.Background(), alice, &api.SessionRequest{}, api.Limits{TmpBytes: 50})
	if err != nil {
		t.Fatal(err)
	}
	read := func(caller peercred.Peer, p string) (string, error) {
		var b strings.Builder
		err := h.m.ReadSessionFile(context.Background(), caller, s.ID, p, func(int64) (io.Writer, error) { return &b, nil })
		return b.String(), err
	}
	if got, err := read(alice, "out/a.csv"); err != nil || got != "out/a.csv" {
		t.Errorf("alice: %q %v", got, err)
	}
	if _, err := read(bob, "out/a.csv"); err == nil {
		t.Error("bob read alice's file")
	}
	if _, err := read(root, "x"); err != nil {
		t.Errorf("root: %v", err)
	}
	interp(s.ID).set(func(f *fakeInterp) { f.lost = true })
	if got, err := read(alice, "y"); err != nil || got != "y" {
		t.Errorf("a lost session's file: %q %v", got, err)
	}
}
