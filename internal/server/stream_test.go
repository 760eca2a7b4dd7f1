package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/record"
)

// spewer's runs write output until they are cancelled.
type spewer struct{ canceled chan string }

func (s *spewer) Execute(ctx context.Context, run *Run) (*api.Result, error) {
	id, req, onOutput := run.ID, run.Request, run.Output
	if req.Code != "spew" {
		return &api.Result{Stdout: "ran", Phases: &api.Phases{}}, nil
	}
	chunk := []byte(strings.Repeat("x", 64<<10))
	for ctx.Err() == nil {
		onOutput("stdout", chunk)
	}
	s.canceled <- id
	return &api.Result{ExitCode: 137, Phases: &api.Phases{}}, nil
}

func (s *spewer) Info() api.Info { return api.Info{Version: "test"} }

// TestStalledCallerCancelsTheRun: a caller that stays connected but does
// not read its stream gets its run cancelled once a write to it has
// waited streamWriteTimeout, and the run's slot goes to the next.
func TestStalledCallerCancelsTheRun(t *testing.T) {
	old := streamWriteTimeout
	streamWriteTimeout = 200 * time.Millisecond
	t.Cleanup(func() { streamWriteTimeout = old })
	sp := &spewer{canceled: make(chan string, 1)}
	records := make(chan record.Run, 10)
	c, stop := serve(t, sp, Config{MaxConcurrent: 1, Observer: func(r record.Run) { records <- r }})
	defer stop()
	conn, err := net.Dial("unix", c.Socket())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body, _ := json.Marshal(api.RunRequest{Code: "spew"})
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAccept: %s\r\nContent-Length: %d\r\n\r\n%s",
		api.PathRuns, api.StreamContentType, len(body), body)
	// It never reads.
	select {
	case <-sp.canceled:
	case <-time.After(30 * time.Second):
		t.Fatal("the run of a caller that does not read was not cancelled")
	}
	select {
	case r := <-records:
		if e := r.Result.Error; e == nil || e.Type != api.ErrCanceled || !strings.Contains(e.Message, "the caller stopped reading the run's stream") {
			t.Errorf("recorded %+v", e)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the run was not recorded")
	}
	res, err := c.Run(context.Background(), &api.RunRequest{Code: "next"})
	if err != nil || res.Error != nil || res.Stdout != "ran" {
		t.Fatalf("the next run: %+v %v", res, err)
	}
}
