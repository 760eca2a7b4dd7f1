package integration

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
)

// TestSoakSessions creates 50 sessions, 8 at a time, amid one-shot bombs,
// and ends them every way a session ends: used and deleted, expired, lost
// to memory, killed after a timeout it ignored, deleted during a run. Then
// the daemon and the host must be as they were: no session, jail, cgroup,
// mount, descriptor or goroutine left.
func TestSoakSessions(t *testing.T) {
	if testing.Short() {
		t.Skip("the soak takes minutes; not in -short")
	}
	const total, parallel = 50, 8
	d := startDaemon(t, "--max-concurrent", "8", "--max-sessions", "64", "--max-sessions-per-uid", "64")
	pid := d.Cmd.Process.Pid
	hc := unixHTTP(d.Socket)
	ctx := context.Background()

	// Warm up: one session made, used and deleted, so that whatever the
	// daemon makes once exists before the baseline.
	s, err := d.Client.CreateSession(ctx, &api.SessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	inSession(t, d, s.ID, "1")
	if err := d.Client.DeleteSession(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ids := map[string]bool{s.ID: true}
	// And one of each bomb, so that the jail kept for the "tmp" bomb's
	// shape is there before the baseline too.
	for i, k := range soakKinds {
		res, err := soakRun(hc, k.req(i))
		if err != nil {
			t.Fatalf("warm-up %s: %v", k.name, err)
		}
		ids[res.RunID] = true
	}
	lastFDs := -1
	if !waitFor(30*time.Second, func() bool {
		d.Client.CloseIdleConnections()
		n := openFDs(t, pid)
		cg, procs := soakLeftovers(ids)
		info, err := d.Client.Info(ctx)
		steady := err == nil && n == lastFDs && len(cg) == 0 && len(procs) == 0 &&
			info.PrestartReady == info.Prestart && info.PrestartShapesReady == 1
		lastFDs = n
		return steady
	}) {
		t.Fatalf("the daemon did not settle before the baseline")
	}
	fdsBefore := openFDs(t, pid)
	goroutinesBefore := scrapeMetrics(t, d.Socket)["go_goroutines"]
	mountsBefore := mountCount(t)

	// One-shot bombs beside the sessions, until they are done.
	stopBombs := make(chan struct{})
	var bombs sync.WaitGroup
	bombs.Add(1)
	go func() {
		defer bombs.Done()
		for i := 1; ; i++ {
			select {
			case <-stopBombs:
				return
			default:
			}
			k := soakKindOf(2*i + 1) // the bombs, in turn
			res, err := soakRun(hc, k.req(i))
			if err == nil {
				err = k.check(i, res)
			}
			mu.Lock()
			if res != nil && res.RunID != "" {
				ids[res.RunID] = true
			}
			mu.Unlock()
			if err != nil {
				t.Errorf("bomb %s beside the sessions: %v", k.name, err)
			}
		}
	}()

	jobs := make(chan int)
	var failures []string
	fail := func(format string, args ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for w := 0; w < parallel; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				soakSession(t, d, hc, i, fail, func(id string) {
					mu.Lock()
					ids[id] = true
					mu.Unlock()
				})
			}
		}()
	}
	for i := 0; i < total; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	close(stopBombs)
	bombs.Wait()
	for i, f := range failures {
		if i == 20 {
			t.Errorf("... and %d more failures", len(failures)-20)
			break
		}
		t.Error(f)
	}

	// The expiring ones expire; then nothing is left.
	if !waitFor(30*time.Second, func() bool {
		list, err := d.Client.Sessions(ctx)
		return err == nil && len(list.Sessions) == 0
	}) {
		list, _ := d.Client.Sessions(ctx)
		t.Errorf("sessions left: %+v", list)
	}
	hc.CloseIdleConnections()
	if !waitFor(30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		cg, procs := soakLeftovers(ids)
		return len(cg) == 0 && len(procs) == 0
	}) {
		cg, procs := soakLeftovers(ids)
		t.Errorf("left behind: processes %v, cgroups %v", procs, cg)
	}
	if n := mountCount(t); n != mountsBefore {
		t.Errorf("mounts: %d before, %d after", mountsBefore, n)
	}
	var fdsAfter int
	var goroutinesAfter float64
	if !waitFor(30*time.Second, func() bool {
		// The workers' connections, kept for another request, are not
		// the daemon's leak; jails being built again are not either.
		d.Client.CloseIdleConnections()
		if info, err := d.Client.Info(ctx); err != nil || info.PrestartReady != info.Prestart || info.PrestartShapesReady != 1 {
			return false
		}
		fdsAfter = openFDs(t, pid)
		goroutinesAfter = scrapeMetrics(t, d.Socket)["go_goroutines"]
		return fdsAfter == fdsBefore && goroutinesAfter == goroutinesBefore
	}) {
		t.Errorf("the daemon leaked: fds %d before, %d after; goroutines %v before, %v after", fdsBefore, fdsAfter, goroutinesBefore, goroutinesAfter)
	}
	m := scrapeMetrics(t, d.Socket)
	created := m[`cellblock_sessions_total{event="created"}`]
	ended := m[`cellblock_sessions_total{event="expired"}`] + m[`cellblock_sessions_total{event="deleted"}`]
	if created != total+1 || ended != created {
		t.Errorf("metrics: %v sessions created, %v expired or deleted; want %d of each", created, ended, total+1)
	}
	if lost := m[`cellblock_sessions_total{event="lost"}`]; lost < total/5 {
		t.Errorf("metrics count %v sessions lost, want at least %d", lost, total/5)
	}
	if open := m["cellblock_sessions_open"]; open != 0 {
		t.Errorf("metrics: %v sessions open", open)
	}
}

// soakSession makes session i of the soak, uses it, and ends it one of
// five ways, reporting what went wrong with fail.
func soakSession(t *testing.T, d *Daemon, hc *http.Client, i int, fail func(string, ...any), seen func(string)) {
	ctx := context.Background()
	req := &api.SessionRequest{}
	switch i % 5 {
	case 0:
		req.IdleTimeoutMs = 1000 // left to expire
	case 1:
		req.MemoryBytes = 96 << 20
	}
	s, err := d.Client.CreateSession(ctx, req)
	if err != nil {
		fail("session %d: create: %v", i, err)
		return
	}
	seen(s.ID)
	cell := func(code string, timeoutMs int64) *api.Result {
		res, err := soakRun(hc, &api.RunRequest{Session: s.ID, Code: code, Mode: api.ModeCell, TimeoutMs: timeoutMs})
		if err != nil {
			fail("session %d: run %q: %v", i, code, err)
			return nil
		}
		return res
	}
	if res := cell(fmt.Sprintf("n = %d", i), 0); res == nil || res.Error != nil {
		fail("session %d: first run: %+v", i, res)
		return
	}
	if res := cell("n * 2", 0); res == nil || res.Value == nil || res.Value.Repr != fmt.Sprint(2*i) {
		fail("session %d: state: %+v", i, res)
		return
	}
	// Files: one put in, one the run writes out beside a link to
	// /etc/shadow, read back.
	in := fmt.Sprint(i)
	if _, err := d.Client.PutSessionFile(ctx, s.ID, "in.txt", strings.NewReader(in), int64(len(in))); err != nil {
		fail("session %d: put: %v", i, err)
		return
	}
	res := cell("import os\nos.makedirs('out', exist_ok=True)\nos.symlink('/etc/shadow', 'out/shadow')\nopen('out/o.txt', 'w').write(open('in.txt').read() * 2)", 0)
	if res == nil || len(res.Files) != 1 || res.Files[0].Size != int64(2*len(in)) || len(res.FilesSkipped) != 1 {
		fail("session %d: files out: %+v", i, res)
		return
	}
	if rc, n, err := d.Client.OpenSessionFile(ctx, s.ID, "out/o.txt"); err != nil || n != int64(2*len(in)) {
		fail("session %d: get: %v", i, err)
	} else {
		rc.Close()
	}
	switch i % 5 {
	case 0: // expires on its own
		return
	case 1: // lost to memory
		res := cell("b = []\nwhile True: b.append(bytearray(8 << 20))", 60_000)
		if res == nil || !res.OOMKilled || res.Session == nil || res.Session.State != api.SessionLost {
			fail("session %d: memory bomb: %+v", i, res)
		}
		if res := cell("n", 0); res == nil || res.Error == nil || res.Error.Type != api.ErrSessionLost {
			fail("session %d: after the memory bomb: %+v", i, res)
		}
	case 2: // a timeout it survives, then one it ignores
		if res := cell("while True: pass", 500); res == nil || !res.TimedOut || res.Session.State != api.SessionAlive {
			fail("session %d: interrupted spin: %+v", i, res)
		}
		if res := cell("n", 0); res == nil || res.Value == nil || res.Value.Repr != fmt.Sprint(i) {
			fail("session %d: after the timeout: %+v", i, res)
		}
		res := cell("import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass", 500)
		if res == nil || !res.TimedOut || res.Session.State != api.SessionLost {
			fail("session %d: stubborn spin: %+v", i, res)
		}
	case 3: // deleted while a run is in progress
		done := make(chan *api.Result, 1)
		go func() { done <- cell("import time\ntime.sleep(30)", 60_000) }()
		// The run is in progress once the session says it is busy.
		waitFor(20*time.Second, func() bool {
			info, err := d.Client.Session(ctx, s.ID)
			return err == nil && info.Busy
		})
		if err := d.Client.DeleteSession(ctx, s.ID); err != nil {
			fail("session %d: delete during a run: %v", i, err)
		}
		select {
		case res := <-done:
			if res != nil && res.Error == nil && res.Session != nil && res.Session.State == api.SessionAlive {
				fail("session %d: the run outlived its deleted session: %+v", i, res)
			}
		case <-time.After(30 * time.Second):
			fail("session %d: the run did not end when its session was deleted", i)
		}
		return
	case 4: // a fork bomb inside it, under its tasks limit
		res := cell(forkBombCode, 20_000)
		if res == nil || res.Error != nil {
			fail("session %d: fork bomb: %+v", i, res)
		} else if after := cell("n", 0); after == nil || (after.Error != nil && after.Error.Type != api.ErrSessionLost) {
			fail("session %d: after the fork bomb: %+v", i, after)
		}
	}
	if err := d.Client.DeleteSession(ctx, s.ID); err != nil && !strings.Contains(err.Error(), "session_not_found") {
		fail("session %d: delete: %v", i, err)
	}
}
