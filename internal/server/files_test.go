package server

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/peercred"
	"github.com/cellblock/cellblock/internal/record"
)

// fileExec is an executor whose sessions' files are made up by read and
// put, and whose artifacts are those in arts (any uid may read them).
type fileExec struct {
	fakeExecutor
	read func(p string, begin func(int64) (io.Writer, error)) error
	put  func(p string, data []byte) error
	can  func(id string, size int64) error
}

func (f *fileExec) ReadSessionFile(ctx context.Context, owner peercred.Peer, id, p string, begin func(size int64) (io.Writer, error)) error {
	return f.read(p, begin)
}

func (f *fileExec) CanPutSessionFile(ctx context.Context, owner peercred.Peer, id string, size int64) error {
	if f.can != nil {
		return f.can(id, size)
	}
	return nil
}

func (f *fileExec) PutSessionFile(ctx context.Context, owner peercred.Peer, id, p string, data []byte) error {
	return f.put(p, data)
}

var fileCaps = api.FileCaps{InCount: 2, InBytes: 6 << 20}

// TestFilesCheckedBeforeTheRun: files past the caps, or past the run's
// tmp size, are refused naming "files" and never reach the executor.
func TestFilesCheckedBeforeTheRun(t *testing.T) {
	exec := &fakeExecutor{}
	var refused []record.Run
	c, stop := serve(t, exec, Config{Files: fileCaps, Observer: func(r record.Run) { refused = append(refused, r) }})
	defer stop()
	big := strings.Repeat("x", 2<<20) // over testLimits.TmpBytes (1 MiB)
	for name, files := range map[string][]api.FileInput{
		"count": {{Path: "a"}, {Path: "b"}, {Path: "c"}},
		"tmp":   {{Path: "a", Content: big}},
	} {
		res, err := c.Run(context.Background(), &api.RunRequest{Code: "x", Files: files})
		if err != nil || res.Error == nil || res.Error.Type != api.ErrOverLimit || res.Error.Field != "files" || res.RunID != "" {
			t.Errorf("%s: %+v %v", name, res.Error, err)
		}
	}
	res, _ := c.Run(context.Background(), &api.RunRequest{Code: "x", Files: []api.FileInput{{Path: "../x"}}})
	if res.Error == nil || res.Error.Field != "files[0].path" {
		t.Errorf("a path leaving /work: %+v", res.Error)
	}
	if exec.calls != 0 {
		t.Errorf("%d refused runs reached the executor", exec.calls)
	}
	if len(refused) != 3 || refused[0].Result.Error == nil {
		t.Errorf("refusals observed: %d", len(refused))
	}
	res, err := c.Run(context.Background(), &api.RunRequest{Code: "x", Files: []api.FileInput{{Path: "a", Content: "small"}}})
	if err != nil || res.Error != nil || exec.calls != 1 {
		t.Errorf("within the caps: %+v %v", res.Error, err)
	}
}

// TestFilesGrowTheBodyOfRunsOnly: a run may carry its files as base64
// beyond the usual body limit; other requests may not grow.
func TestFilesGrowTheBodyOfRunsOnly(t *testing.T) {
	exec := &fakeExecutor{}
	cfg := Config{Files: fileCaps}
	c, stop := serve(t, exec, cfg)
	defer stop()
	if s := newServer(t, cfg, exec); s.requestBytes() <= api.MaxRequestBytes+fileCaps.InBytes {
		t.Fatalf("request bytes %d", s.requestBytes())
	}
	data := strings.Repeat("\x00\x01", 5<<19) // 5 MiB, about 6.7 MiB as base64
	in := api.FileInput{Path: "big.bin", Content: base64.StdEncoding.EncodeToString([]byte(data)), Encoding: api.EncodingBase64}
	// Through the real socket, the body is accepted (refused later only
	// for the test server's 1 MiB tmp size, not for its size).
	res, err := c.Run(context.Background(), &api.RunRequest{Code: "x", Files: []api.FileInput{in}})
	if err != nil || res.Error == nil || res.Error.Type != api.ErrOverLimit || !strings.Contains(res.Error.Message, "tmp_bytes") {
		t.Errorf("a 6.7 MiB body with files: %+v %v", res.Error, err)
	}
	// A body that large without files is refused as too large.
	res, err = c.Run(context.Background(), &api.RunRequest{Code: "x", Env: map[string]string{"PAD": strings.Repeat("p", 5<<20)}})
	if err != nil || res.Error == nil || res.Error.Type != api.ErrTooLarge && res.Error.Type != api.ErrBadRequest {
		t.Errorf("a 5 MiB run without files: %+v %v", res.Error, err)
	}
	// Environment builds keep the usual limit.
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", c.Socket())
	}}}
	resp, err := hc.Post("http://x"+api.PathEnvs, "application/json", strings.NewReader(`{"dependencies":["`+strings.Repeat("a", 5<<20)+`"]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge && resp.StatusCode != http.StatusNotFound {
		t.Errorf("a 5 MiB environment build: %s", resp.Status)
	}
}

// TestSessionFileRoutes: paths are checked, out/ takes no input, and a
// file that changes while it is read ends the answer short, so that no
// client takes part of it for the whole.
func TestSessionFileRoutes(t *testing.T) {
	var puts []string
	exec := &fileExec{
		read: func(p string, begin func(int64) (io.Writer, error)) error {
			w, err := begin(10)
			if err != nil {
				return err
			}
			if p == "changing" {
				w.Write([]byte("part"))
				return api.Errorf(api.ErrInUse, "path", "changed while it was read")
			}
			_, err = w.Write([]byte("0123456789"))
			return err
		},
		put: func(p string, data []byte) error { puts = append(puts, p+"="+string(data)); return nil },
	}
	// The observer runs in the handler, which a cut answer's client
	// does not wait for.
	var opsMu sync.Mutex
	var ops []record.FileOp
	c, stop := serve(t, exec, Config{Files: fileCaps, FileObserver: func(op record.FileOp) {
		opsMu.Lock()
		ops = append(ops, op)
		opsMu.Unlock()
	}})
	defer stop()
	ctx := context.Background()
	w, err := c.PutSessionFile(ctx, "s1", "data/in.csv", strings.NewReader("a,b"), 3)
	if err != nil || w.Size != 3 || w.Path != "data/in.csv" || len(puts) != 1 || puts[0] != "data/in.csv=a,b" {
		t.Fatalf("put: %+v %v %v", w, err, puts)
	}
	_, err = c.PutSessionFile(ctx, "s1", "out/x", strings.NewReader("x"), 1)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Type != api.ErrBadRequest || ae.Field != "path" {
		t.Errorf("put under out/: %v", err)
	}
	// What no client of ours sends: the server checks it all the same.
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", c.Socket())
	}}}
	for _, raw := range []string{"a/%2e%2e/%2e%2e/etc/passwd", "%2Fabs", "a%00b", "a/..%2F..%2Fx"} {
		req, _ := http.NewRequest(http.MethodPut, "http://x"+api.PathSessions+"/s1/files/"+raw, strings.NewReader("x"))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("put %s: %s", raw, resp.Status)
		}
	}
	if len(puts) != 1 {
		t.Errorf("refused paths were put: %v", puts)
	}
	rc, n, err := c.OpenSessionFile(ctx, "s1", "x.txt")
	if err != nil || n != 10 {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(b) != "0123456789" {
		t.Errorf("get: %q %v", b, err)
	}
	rc, _, err = c.OpenSessionFile(ctx, "s1", "changing")
	if err == nil {
		b, err = io.ReadAll(rc)
		rc.Close()
	}
	if err == nil {
		t.Errorf("a file that changed while it was read came whole: %q", b)
	}
	opsMu.Lock()
	defer opsMu.Unlock()
	if len(ops) < 3 || ops[0].Op != record.FilePut || ops[0].SHA256 == "" {
		t.Errorf("observed %+v", ops)
	}
}

// artExec serves one artifact to the uid it names.
type artExec struct {
	fakeExecutor
	owner uint32
	asked []uint32
}

func (a *artExec) ArtifactUsage(uint32) (int64, int) { return 0, 0 }

func (a *artExec) OpenArtifact(uid uint32, sum string) (io.ReadCloser, int64, error) {
	a.asked = append(a.asked, uid)
	if sum != strings.Repeat("a", 64) || uid != a.owner {
		return nil, 0, api.Errorf(api.ErrNotFound, "sha256", "no artifact %q", sum)
	}
	return io.NopCloser(strings.NewReader("content")), 7, nil
}

// TestArtifactRoute: the caller's uid, from its peer credentials, is the
// one the store is asked for; the content goes with its size.
func TestArtifactRoute(t *testing.T) {
	me := uint32(os.Getuid())
	exec := &artExec{owner: me}
	c, stop := serve(t, exec, Config{})
	defer stop()
	b, err := c.Artifact(context.Background(), strings.Repeat("a", 64), 100)
	if err != nil || string(b) != "content" {
		t.Fatalf("%q %v", b, err)
	}
	_, err = c.Artifact(context.Background(), strings.Repeat("b", 64), 100)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Type != api.ErrNotFound {
		t.Errorf("unknown: %v", err)
	}
	exec.owner = me + 1
	if _, err := c.Artifact(context.Background(), strings.Repeat("a", 64), 100); !errors.As(err, &ae) || ae.Type != api.ErrNotFound {
		t.Errorf("another's: %v", err)
	}
	if len(exec.asked) != 3 || exec.asked[0] != me {
		t.Errorf("asked for uids %v", exec.asked)
	}
}

// heldFile is a large file that says when it is let go.
type heldFile struct {
	io.Reader
	closed chan struct{}
}

func (h *heldFile) Close() error { close(h.closed); return nil }

// answerFiles serves an artifact and a session file of size bytes that
// say when they are let go: the artifact's file is closed, the session
// file's read (which holds its /work) returns.
type answerFiles struct {
	fakeExecutor
	size               int64
	artifact, sessFile chan struct{}
}

func (a *answerFiles) ArtifactUsage(uint32) (int64, int) { return 0, 0 }

func (a *answerFiles) OpenArtifact(uid uint32, sum string) (io.ReadCloser, int64, error) {
	return &heldFile{Reader: io.LimitReader(zeros{}, a.size), closed: a.artifact}, a.size, nil
}

func (a *answerFiles) ReadSessionFile(ctx context.Context, owner peercred.Peer, id, p string, begin func(size int64) (io.Writer, error)) error {
	defer close(a.sessFile)
	w, err := begin(a.size)
	if err != nil {
		return err
	}
	_, err = io.Copy(w, io.LimitReader(zeros{}, a.size))
	return err
}

func (a *answerFiles) CanPutSessionFile(ctx context.Context, owner peercred.Peer, id string, size int64) error {
	return nil
}

func (a *answerFiles) PutSessionFile(ctx context.Context, owner peercred.Peer, id, p string, data []byte) error {
	return nil
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// TestFileAnswersEndInTime: a client that asks for an artifact or a
// session's file and never reads does not hold the file (an evicted
// artifact's blocks, a session's /work) past the answer's time, and a
// connection that carried a file's answer keeps no deadline for the next
// request on it.
func TestFileAnswersEndInTime(t *testing.T) {
	defer func(b time.Duration, r int64) { fileAnswerBase, fileAnswerRate = b, r }(fileAnswerBase, fileAnswerRate)
	fileAnswerBase, fileAnswerRate = 200*time.Millisecond, 1<<40
	exec := &answerFiles{size: 64 << 20, artifact: make(chan struct{}), sessFile: make(chan struct{})}
	c, stop := serve(t, exec, Config{Files: fileCaps})
	defer stop()
	for name, tc := range map[string]struct {
		path     string
		released chan struct{}
	}{
		"artifact":     {api.PathArtifacts + "/" + strings.Repeat("a", 64), exec.artifact},
		"session file": {api.PathSessions + "/s1/files/big.bin", exec.sessFile},
	} {
		conn, err := net.Dial("unix", c.Socket())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, "GET "+tc.path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		// Far more than the socket's buffers: never read, the answer
		// can only end by its deadline.
		select {
		case <-tc.released:
		case <-time.After(20 * time.Second):
			t.Errorf("%s: still held by a client that does not read", name)
		}
	}

	// A small answer, then a run on the same connection that outlasts
	// the answer's deadline.
	exec.size = 10
	exec.artifact = make(chan struct{})
	exec.block = make(chan struct{})
	hc := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", c.Socket())
	}}}
	resp, err := hc.Get("http://x" + api.PathArtifacts + "/" + strings.Repeat("a", 64))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(resp.Body); err != nil || len(b) != 10 {
		t.Fatalf("the artifact: %d bytes, %v", len(b), err)
	}
	resp.Body.Close()
	// The run answers once the deadline the artifact's answer had is
	// past.
	time.AfterFunc(fileAnswerBase+100*time.Millisecond, func() { close(exec.block) })
	reused := false
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://x"+api.PathRuns, strings.NewReader(`{"code":"x"}`))
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatalf("a run after a file's answer on the same connection: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || !reused {
		t.Errorf("a run after a file's answer: %s %q %v (connection reused: %v)", resp.Status, b, err, reused)
	}
}

// usageExec tells each uid's artifact figures.
type usageExec struct{ fakeExecutor }

func (*usageExec) Info() api.Info {
	return api.Info{Version: "test", Files: &api.FileCaps{StoreBytes: 1 << 30, StoreUsedBytes: 5000, StoreFiles: 5}}
}

func (*usageExec) ArtifactUsage(uid uint32) (int64, int) { return int64(uid), 1 }

func (*usageExec) OpenArtifact(uint32, string) (io.ReadCloser, int64, error) {
	return nil, 0, api.Errorf(api.ErrNotFound, "sha256", "none")
}

// TestInfoShowsTheCallersArtifacts: a caller other than root is told
// what its own artifacts count against the store's quota, not everyone's;
// root is told the totals.
func TestInfoShowsTheCallersArtifacts(t *testing.T) {
	s := newServer(t, Config{}, &usageExec{})
	info := s.svc.Runs.Info()
	s.callerFiles(&info, peercred.Peer{UID: 1000})
	if f := info.Files; f.StoreUsedBytes != 1000 || f.StoreFiles != 1 || f.StoreBytes != 1<<30 {
		t.Errorf("uid 1000: %+v", f)
	}
	info = s.svc.Runs.Info()
	s.callerFiles(&info, peercred.Peer{UID: 0})
	if f := info.Files; f.StoreUsedBytes != 5000 || f.StoreFiles != 5 {
		t.Errorf("root: %+v", f)
	}
	// And over the socket, as whoever runs the test.
	c, stop := serve(t, &usageExec{}, Config{})
	defer stop()
	got, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := int64(5000)
	if me := os.Getuid(); me != 0 {
		want = int64(me)
	}
	if got.Files.StoreUsedBytes != want {
		t.Errorf("info over the socket: %+v, want %d bytes", got.Files, want)
	}
}

// putHeaders starts a PUT of a session file of size bytes on a new
// connection and sends sent bytes of its body, no more.
func putHeaders(t *testing.T, c interface{ Socket() string }, id string, size, sent int) net.Conn {
	t.Helper()
	conn, err := net.Dial("unix", c.Socket())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "PUT %s/%s/files/data.csv HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", api.PathSessions, id, size, strings.Repeat("x", sent))
	return conn
}

// answer reads the status of the answer on conn, or "" when none came
// while the body was still owed.
func answer(t *testing.T, conn net.Conn) string {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.Status + " " + string(b)
}

// TestPutRefusedBeforeItsBody: a PUT that the session would refuse
// (unknown, another uid's, busy, lost, too big for it) or that is over
// the cap is answered at once, its body unread; and the bodies being
// read hold at most twice the largest body for one uid: past that a PUT
// is busy at once.
func TestPutRefusedBeforeItsBody(t *testing.T) {
	exec := &fileExec{
		can: func(id string, size int64) error {
			if id == "busy" {
				return api.Errorf(api.ErrSessionBusy, "session", "a run is in progress")
			}
			return nil
		},
		put: func(string, []byte) error { return nil },
	}
	c, stop := serve(t, exec, Config{Files: fileCaps})
	defer stop()
	if got := answer(t, putHeaders(t, c, "busy", 1<<20, 10)); !strings.Contains(got, "409") || !strings.Contains(got, "session_busy") {
		t.Errorf("a busy session: %q", got)
	}
	if got := answer(t, putHeaders(t, c, "s1", int(fileCaps.InBytes)+1, 10)); !strings.Contains(got, "413") {
		t.Errorf("over the cap: %q", got)
	}
	// Two bodies of the largest size a request may have, being sent, hold
	// this uid's share of all bodies (bodies.go), PUTs' too.
	var pending []net.Conn
	defer func() {
		for _, conn := range pending {
			conn.Close() // before the server stops
		}
	}()
	for range 2 {
		conn, err := net.Dial("unix", c.Socket())
		if err != nil {
			t.Fatal(err)
		}
		pending = append(pending, conn)
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n{\"code\": \"", api.PathRuns, fileCaps.RequestBytes())
	}
	// Let the server take them in (it answers nothing until their bodies
	// come): a small PUT once both are counted is refused.
	deadline := time.Now().Add(10 * time.Second)
	var got string
	for time.Now().Before(deadline) {
		conn := putHeaders(t, c, "s1", 3, 3)
		got = answer(t, conn)
		conn.Close()
		if !strings.Contains(got, "200") {
			break
		}
	}
	if !strings.Contains(got, "429") || !strings.Contains(got, "busy") {
		t.Errorf("past the uid's share: %q", got)
	}
}
