package integration

// Sessions through the real daemon: an interpreter that keeps its state
// between runs, one run at a time, owned by the uid that made it, ending
// plainly (expired, deleted, lost) and leaving nothing behind.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
)

// newSession creates a session on d and deletes it when the test ends.
func newSession(t *testing.T, d *Daemon, req *api.SessionRequest) *api.Session {
	t.Helper()
	s, err := d.Client.CreateSession(context.Background(), req)
	if err != nil {
		t.Fatalf("create session: %v\n%s", err, d.Log())
	}
	t.Cleanup(func() { _ = d.Client.DeleteSession(context.Background(), s.ID) })
	return s
}

// inSession runs code as a cell in session id.
func inSession(t *testing.T, d *Daemon, id, code string) *api.Result {
	t.Helper()
	return run(t, d, &api.RunRequest{Session: id, Code: code, Mode: api.ModeCell})
}

// errorType is the class of err, or "" when it carries none.
func errorType(err error) api.ErrorType {
	var e *api.Error
	if errors.As(err, &e) {
		return e.Type
	}
	return ""
}

// A variable, an import, a function and a file in /work live on from one
// run to the next; each run's output, stdin and value are its own.
func TestSessionKeepsState(t *testing.T) {
	d := daemon(t)
	s := newSession(t, d, &api.SessionRequest{})
	if s.State != api.SessionAlive || s.ExpiresAt.IsZero() || s.ID == "" {
		t.Fatalf("new session: %+v", s)
	}
	first := inSession(t, d, s.ID, "import json\nrows = [1, 2, 3]\ndef total(): return sum(rows)\nopen('/work/data.txt', 'w').write('kept')\nprint('first')")
	if first.Error != nil || first.ExitCode != 0 || first.Stdout != "first\n" {
		t.Fatalf("first run: %+v", first)
	}
	if first.Session == nil || first.Session.ID != s.ID || first.Session.ExecutionCount != 1 || first.Session.State != api.SessionAlive {
		t.Fatalf("first run's session: %+v", first.Session)
	}
	second := run(t, d, &api.RunRequest{Session: s.ID, Mode: api.ModeCell, Stdin: "line\n",
		Code: "import sys\nprint(sys.stdin.read().strip(), json.dumps(rows), open('/work/data.txt').read())\ntotal() + 1"})
	if second.Error != nil || second.ExitCode != 0 {
		t.Fatalf("second run: %+v", second)
	}
	if second.Stdout != "line [1, 2, 3] kept\n" {
		t.Errorf("second run's stdout %q: state or stdin did not carry over (stderr %q)", second.Stdout, second.Stderr)
	}
	if second.Value == nil || second.Value.Repr != "7" {
		t.Errorf("second run's value %+v, want 7", second.Value)
	}
	if second.Session.ExecutionCount != 2 || !second.Session.ExpiresAt.After(first.Session.ExpiresAt.Add(-time.Second)) {
		t.Errorf("second run's session: %+v", second.Session)
	}
	// A run with no stdin reads end of file, not the last run's.
	third := inSession(t, d, s.ID, "import sys\nsys.stdin.read()")
	if third.Value == nil || third.Value.Repr != "''" {
		t.Errorf("third run read stdin %+v, want ''", third.Value)
	}
	got, err := d.Client.Session(context.Background(), s.ID)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]api.Variable{}
	for _, v := range got.Variables {
		names[v.Name] = v
	}
	if v := names["rows"]; v.Type != "list" || !strings.Contains(v.Repr, "3 items") {
		t.Errorf("variable rows: %+v (all %+v)", v, got.Variables)
	}
	if v := names["json"]; v.Type != "module" {
		t.Errorf("variable json: %+v", v)
	}
	if got.ExecutionCount != 3 || got.MemoryBytes <= 0 || got.State != api.SessionAlive {
		t.Errorf("session: %+v", got)
	}
}

// A run that times out is interrupted (KeyboardInterrupt), and the session
// goes on with its variables; one that ignores the interrupt is killed and
// the session is lost, saying so until deleted.
func TestSessionTimeoutThenContinue(t *testing.T) {
	d := daemon(t)
	s := newSession(t, d, &api.SessionRequest{})
	inSession(t, d, s.ID, "x = 41")
	spin := run(t, d, &api.RunRequest{Session: s.ID, Code: "while True: pass", TimeoutMs: 1000})
	if !spin.TimedOut || spin.Session == nil || spin.Session.State != api.SessionAlive {
		t.Fatalf("timed-out run: timed_out %v session %+v stderr %q", spin.TimedOut, spin.Session, spin.Stderr)
	}
	if spin.Exception == nil || spin.Exception.Type != "KeyboardInterrupt" || strings.Contains(spin.Stderr, "_session.py") {
		t.Errorf("timed-out run's exception %+v, stderr %q (no runner frame expected)", spin.Exception, spin.Stderr)
	}
	after := inSession(t, d, s.ID, "x + 1")
	if after.Value == nil || after.Value.Repr != "42" || after.Session.State != api.SessionAlive {
		t.Fatalf("the session did not survive its timeout: %+v", after)
	}

	stubborn := run(t, d, &api.RunRequest{Session: s.ID, TimeoutMs: 500,
		Code: "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass"})
	if !stubborn.TimedOut || stubborn.Session == nil || stubborn.Session.State != api.SessionLost {
		t.Fatalf("a run that ignores the interrupt: timed_out %v session %+v", stubborn.TimedOut, stubborn.Session)
	}
	res := run(t, d, &api.RunRequest{Session: s.ID, Code: "x"})
	if res.Error == nil || res.Error.Type != api.ErrSessionLost {
		t.Errorf("a run in a lost session: %+v, want session_lost", res.Error)
	}
	info, err := d.Client.Session(context.Background(), s.ID)
	if err != nil || info.State != api.SessionLost {
		t.Errorf("lost session shows %+v, %v", info, err)
	}
}

// Code that fills the session's memory loses the session (and only it);
// so does os._exit. Another session runs on.
func TestSessionLostToMemoryAndExit(t *testing.T) {
	d := daemon(t)
	other := newSession(t, d, &api.SessionRequest{})
	inSession(t, d, other.ID, "kept = 'yes'")

	small := newSession(t, d, &api.SessionRequest{MemoryBytes: 64 << 20})
	hog := run(t, d, &api.RunRequest{Session: small.ID, TimeoutMs: 60_000,
		Code: "chunks = []\nwhile True: chunks.append(b'x' * (8 << 20))"})
	if !hog.OOMKilled || hog.Session == nil || hog.Session.State != api.SessionLost || hog.ExitCode != 137 {
		t.Errorf("memory hog: oom %v exit %d session %+v", hog.OOMKilled, hog.ExitCode, hog.Session)
	}

	quitter := newSession(t, d, &api.SessionRequest{})
	exit := inSession(t, d, quitter.ID, "import os\nos._exit(7)")
	if exit.Session == nil || exit.Session.State != api.SessionLost || exit.ExitCode != 7 {
		t.Errorf("os._exit: exit %d session %+v", exit.ExitCode, exit.Session)
	}
	// sys.exit is an exception like another in a session: it lives on.
	survivor := newSession(t, d, &api.SessionRequest{})
	sysExit := inSession(t, d, survivor.ID, "import sys\nsys.exit(3)")
	if sysExit.ExitCode != 3 || sysExit.Session.State != api.SessionAlive {
		t.Errorf("sys.exit(3): exit %d session %+v", sysExit.ExitCode, sysExit.Session)
	}

	res := inSession(t, d, other.ID, "kept")
	if res.Value == nil || res.Value.Repr != "'yes'" {
		t.Errorf("the other session was disturbed: %+v", res)
	}
}

// One run at a time: a second run while one is in progress is refused at
// once with session_busy, not queued.
func TestSessionBusy(t *testing.T) {
	d := daemon(t)
	s := newSession(t, d, &api.SessionRequest{})
	started := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = d.Client.RunStream(context.Background(), &api.RunRequest{Session: s.ID,
			Code: "import time\nprint('in', flush=True)\ntime.sleep(3)"}, func(stream, data string) {
			if strings.Contains(data, "in") {
				close(started)
			}
		})
	}()
	select {
	case <-started:
	case <-time.After(60 * time.Second):
		t.Fatal("the first run did not start")
	}
	t0 := time.Now()
	res := run(t, d, &api.RunRequest{Session: s.ID, Code: "1"})
	if res.Error == nil || res.Error.Type != api.ErrSessionBusy {
		t.Errorf("second run: %+v, want session_busy", res.Error)
	}
	if waited := time.Since(t0); waited > 2*time.Second {
		t.Errorf("the busy answer took %v: it waited for the first run", waited)
	}
	wg.Wait()
}

// Unknown, deleted and foreign ids all answer session_not_found; a
// deleted session's owner is told it was deleted; another uid learns
// nothing, not even that it exists.
func TestSessionOwnership(t *testing.T) {
	d := daemon(t)
	s := newSession(t, d, &api.SessionRequest{})
	inSession(t, d, s.ID, "secret = 1")

	// uid 65533 is allowed on the shared daemon's socket.
	if err := os.Chmod(d.Socket, 0o666); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(d.Socket, 0o660)
	as := func(method, path, body string) (int, api.Result) {
		t.Helper()
		args := []string{"-s", "-o", "-", "-w", "\n%{http_code}", "--unix-socket", d.Socket, "-X", method,
			"-H", "Content-Type: application/json", "http://cellblockd" + path}
		if body != "" {
			args = append(args, "-d", body)
		}
		cmd := exec.Command("curl", args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65533, Gid: 65534}}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("curl as uid 65533: %v", err)
		}
		// The body, then the status on a line of its own.
		text := strings.TrimSpace(string(out))
		i := strings.LastIndexByte(text, '\n')
		var r api.Result
		_ = json.Unmarshal([]byte(text[:max(i, 0)]), &r)
		var n int
		fmt.Sscan(text[i+1:], &n)
		return n, r
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skipf("curl not installed: %v", err)
	}
	// An id of this daemon's making that names no session.
	boot, _, _ := strings.Cut(s.ID, "-")
	never := boot + "-0000000000000000"
	_, unknown := as("GET", api.PathSessions+"/"+never, "")
	if unknown.Error == nil || unknown.Error.Type != api.ErrSessionNotFound {
		t.Fatalf("an unknown id: %+v", unknown.Error)
	}
	for _, c := range []struct{ method, path, body string }{
		{"GET", api.PathSessions + "/" + s.ID, ""},
		{"DELETE", api.PathSessions + "/" + s.ID, ""},
		{"POST", api.PathRuns, `{"session":"` + s.ID + `","code":"secret"}`},
	} {
		code, r := as(c.method, c.path, c.body)
		if code != 404 || r.Error == nil || r.Error.Type != api.ErrSessionNotFound {
			t.Errorf("uid 65533 %s %s: %d %+v, want 404 session_not_found", c.method, c.path, code, r.Error)
			continue
		}
		if r.Error.Message != strings.Replace(unknown.Error.Message, never, s.ID, 1) {
			t.Errorf("uid 65533 is told %q about another's session, and %q about an unknown one", r.Error.Message, unknown.Error.Message)
		}
	}
	cmd := exec.Command("curl", "-s", "--unix-socket", d.Socket, "http://cellblockd"+api.PathSessions)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65533, Gid: 65534}}
	out, err := cmd.Output()
	if err != nil || strings.Contains(string(out), s.ID) {
		t.Errorf("uid 65533's list shows root's session: %v %s", err, out)
	}
	// Still alive and intact for its owner.
	if res := inSession(t, d, s.ID, "secret"); res.Value == nil || res.Value.Repr != "1" {
		t.Errorf("the session after the other uid's attempts: %+v", res)
	}
	if err := d.Client.DeleteSession(context.Background(), s.ID); err != nil {
		t.Fatal(err)
	}
	_, err = d.Client.Session(context.Background(), s.ID)
	if errorType(err) != api.ErrSessionNotFound || !strings.Contains(err.Error(), "it was deleted") {
		t.Errorf("a deleted session: %v", err)
	}
	_, foreign := as("GET", api.PathSessions+"/"+s.ID, "")
	if foreign.Error == nil || foreign.Error.Message != strings.Replace(unknown.Error.Message, never, s.ID, 1) {
		t.Errorf("another uid is told what became of root's session: %+v", foreign.Error)
	}
}

// A session idle past its timeout ends, leaving nothing behind, and its
// owner is told it expired; a session for an unknown Python makes nothing.
func TestSessionExpiresAndLeavesNothing(t *testing.T) {
	d := startDaemon(t)
	mounts := mountCount(t)
	waitPrestarted(t, d)
	before := len(ourJailProcesses())
	s, err := d.Client.CreateSession(context.Background(), &api.SessionRequest{IdleTimeoutMs: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if res := inSession(t, d, s.ID, "1 + 1"); res.Value == nil || res.Value.Repr != "2" {
		t.Fatalf("run: %+v", res)
	}
	ok := waitFor(30*time.Second, func() bool {
		_, err := d.Client.Session(context.Background(), s.ID)
		return errorType(err) == api.ErrSessionNotFound
	})
	if !ok {
		t.Fatal("the session did not expire")
	}
	_, err = d.Client.Session(context.Background(), s.ID)
	if !strings.Contains(err.Error(), "it expired after 1s without a run") {
		t.Errorf("an expired session: %v", err)
	}
	if _, err := d.Client.CreateSession(context.Background(), &api.SessionRequest{Python: "3.2"}); errorType(err) != api.ErrUnknownPython {
		t.Errorf("a session for Python 3.2: %v, want unknown_python", err)
	}
	list, err := d.Client.Sessions(context.Background())
	if err != nil || len(list.Sessions) != 0 {
		t.Errorf("sessions left: %+v %v", list, err)
	}
	waitPrestarted(t, d)
	if !waitFor(30*time.Second, func() bool { return len(ourJailProcesses()) <= before }) {
		t.Errorf("jail processes left: %v", ourJailProcesses())
	}
	assertNothingLeft(t, mounts)
}

// Many creations are bounded: past the per-uid maximum the daemon answers
// busy, and creates nothing more.
func TestSessionLimits(t *testing.T) {
	d := startDaemon(t, "--max-sessions-per-uid", "2", "--max-sessions", "3")
	a := newSession(t, d, &api.SessionRequest{})
	newSession(t, d, &api.SessionRequest{})
	_, err := d.Client.CreateSession(context.Background(), &api.SessionRequest{})
	if errorType(err) != api.ErrBusy {
		t.Fatalf("a third session for one uid: %v, want busy", err)
	}
	if err := d.Client.DeleteSession(context.Background(), a.ID); err != nil {
		t.Fatal(err)
	}
	newSession(t, d, &api.SessionRequest{})
	// What fixes the jail belongs to the session, not to its runs.
	res := run(t, d, &api.RunRequest{Session: a.ID, Code: "1", MemoryBytes: 1 << 30})
	if res.Error == nil || res.Error.Type != api.ErrBadRequest || res.Error.Field != "memory_bytes" {
		t.Errorf("a run in a session asking for memory: %+v", res.Error)
	}
	if !strings.Contains(d.Log(), "session created") {
		t.Errorf("the log does not record sessions")
	}
}

// A session's code that floods the runner's channel between runs with
// large frames does not make the daemon hold them: frames nobody waits
// for are read and dropped, and the session's next run works.
func TestSessionFloodBetweenRuns(t *testing.T) {
	d := startDaemon(t)
	s := newSession(t, d, &api.SessionRequest{MemoryBytes: 512 << 20})
	before := procStatus(t, d.Cmd.Process.Pid, "VmRSS")
	// 96 frames of 8 MiB each (under the run's frame cap), from a thread
	// that starts once the run is over.
	// Whole frames, through the runner's own channel object, so that
	// they never cut into a frame of the runner's.
	flood := `
import threading, time
from cellblock import _channel
def flood(ch=_channel.channel):
    time.sleep(0.5)
    junk = 'x' * (8 << 20)
    for _ in range(96):
        ch.send_raw(junk)
    open('/work/flooded', 'w').write('done')
threading.Thread(target=flood, daemon=True).start()
'started'`
	if res := inSession(t, d, s.ID, flood); res.Value == nil || res.Value.Repr != "'started'" {
		t.Fatalf("flooding run: %+v", res)
	}
	if !waitFor(60*time.Second, func() bool {
		res := inSession(t, d, s.ID, "import os\nos.path.exists('/work/flooded')")
		return res.Value != nil && res.Value.Repr == "True"
	}) {
		t.Fatal("the flood did not finish")
	}
	if res := inSession(t, d, s.ID, "1 + 1"); res.Value == nil || res.Value.Repr != "2" || res.Session.State != api.SessionAlive {
		t.Errorf("the run after the flood: %+v", res)
	}
	hwm := procStatus(t, d.Cmd.Process.Pid, "VmHWM")
	if grew := hwm - before; grew > 128<<20 {
		t.Errorf("the daemon's peak RSS grew by %d MiB while a session flooded its channel with 768 MiB", grew>>20)
	}
}
