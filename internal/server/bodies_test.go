package server

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/peercred"
)

// startBody opens a connection and sends the headers of a request whose
// body is size bytes, and sent of them.
func startBody(t *testing.T, socket, method, path string, size int64, sent string) net.Conn {
	t.Helper()
	conn, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", method, path, size, sent)
	return conn
}

// A body that does not arrive in time is refused, and holds nothing
// after; one that did arrive leaves its run all the time it needs.
func TestBodiesArriveInTime(t *testing.T) {
	defer func(b time.Duration, r int64) { fileAnswerBase, fileAnswerRate = b, r }(fileAnswerBase, fileAnswerRate)
	fileAnswerBase, fileAnswerRate = 300*time.Millisecond, 1<<40
	exec := &fakeExecutor{block: make(chan struct{})}
	c, stop := serve(t, exec, Config{})
	defer stop()

	for _, path := range []string{api.PathRuns, api.PathSessions, api.PathEnvs, "/v1/runs/r1/tool-calls/c1"} {
		got := answer(t, startBody(t, c.Socket(), "POST", path, 100, `{"code": "`))
		if path == api.PathRuns && (!strings.Contains(got, "400") || !strings.Contains(got, "did not arrive in time")) {
			t.Errorf("a run whose body stalls: %q", got)
		}
		if got == "" {
			t.Errorf("POST %s whose body stalls: no answer", path)
		}
	}

	// A run whose body came whole runs past the body's deadline.
	time.AfterFunc(4*fileAnswerBase, func() { close(exec.block) })
	res, err := c.Run(context.Background(), &api.RunRequest{Code: "print(1)"})
	if err != nil || res.Error != nil || res.Stdout != "ran: print(1)" {
		t.Errorf("a run longer than its body's deadline: %+v %v", res, err)
	}
}

// Eight requests of the largest body that never send its end: one uid's
// share holds two, the six others are refused at once (429), the two are
// cut at their deadline, and the uid's next request goes through.
func TestBodiesHoldAShare(t *testing.T) {
	defer func(b time.Duration, r int64) { fileAnswerBase, fileAnswerRate = b, r }(fileAnswerBase, fileAnswerRate)
	fileAnswerBase, fileAnswerRate = 2*time.Second, 1<<40
	c, stop := serve(t, &fakeExecutor{}, Config{Files: fileCaps})
	defer stop()
	largest := fileCaps.RequestBytes()
	// The first MiB of each is sent beside the others: a refused one's
	// is not read, and its writer waits until net/http closes it.
	var conns []net.Conn
	for range 8 {
		conn := startBody(t, c.Socket(), "POST", api.PathRuns, largest, `{"code": "`)
		go conn.Write([]byte(strings.Repeat("x", 1<<20)))
		conns = append(conns, conn)
	}
	busy, late := 0, 0
	for _, conn := range conns {
		switch got := answer(t, conn); {
		case strings.Contains(got, "429") && strings.Contains(got, "busy"):
			busy++
		case strings.Contains(got, "400") && strings.Contains(got, "did not arrive in time"):
			late++
		default:
			t.Errorf("a stalled body: %q", got)
		}
	}
	if busy != 6 || late != 2 {
		t.Errorf("%d refused busy and %d cut late, want 6 and 2", busy, late)
	}
	if res, err := c.Run(context.Background(), &api.RunRequest{Code: "print(1)"}); err != nil || res.Error != nil {
		t.Errorf("the next run: %+v %v", res, err)
	}
}

// A uid's connections past MaxConnsPerUID are refused as they are
// accepted, with an answer; once one closes, the next gets in.
func TestConnectionsPerUID(t *testing.T) {
	c, stop := serve(t, &fakeExecutor{}, Config{MaxConnsPerUID: 3})
	defer stop()
	var open []net.Conn
	for range 3 {
		conn, err := net.Dial("unix", c.Socket())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		open = append(open, conn)
	}
	// Accepted in order: the fourth is past the cap whatever the first
	// three are doing.
	got := answer(t, startBody(t, c.Socket(), "POST", api.PathRuns, 2, "{}"))
	if !strings.Contains(got, "429") || !strings.Contains(got, "the most connections cellblockd takes from one uid (3)") {
		t.Errorf("the fourth connection: %q", got)
	}
	open[0].Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := c.Run(context.Background(), &api.RunRequest{Code: "print(1)"})
		if err == nil && res.Error == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no run after a connection closed: %+v %v", res, err)
		}
		c.CloseIdleConnections()
		time.Sleep(50 * time.Millisecond)
	}
}

func TestConnCounter(t *testing.T) {
	c := &connCounter{perUID: 2, total: 3}
	for i, step := range []struct {
		uid  uint32
		want bool
	}{{1000, true}, {1000, true}, {1000, false}, {1001, true}, {1001, false}, {0, true}, {0, true}, {0, false}} {
		if got := c.take(step.uid); got != step.want {
			t.Errorf("step %d: take(%d) = %v, want %v", i, step.uid, got, step.want)
		}
	}
	c.give(1000)
	if !c.take(1001) || c.take(1002) {
		t.Error("after one closed: the total lets one more in, and no more")
	}
	c.give(0)
	if !c.take(0) {
		t.Error("root is bounded by its own connections only")
	}
}

// The callers Uncounted names (the daemon's: root) are never refused.
func TestUncountedConnections(t *testing.T) {
	c, stop := serve(t, &fakeExecutor{}, Config{MaxConnsPerUID: 1, MaxConns: 1, Uncounted: func(peercred.Peer) bool { return true }})
	defer stop()
	for range 3 {
		conn, err := net.Dial("unix", c.Socket())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
	}
	if res, err := c.Run(context.Background(), &api.RunRequest{Code: "print(1)"}); err != nil || res.Error != nil {
		t.Errorf("an uncounted caller's fourth connection: %+v %v", res, err)
	}
}
