package cli

import (
	"context"
	"reflect"
	"syscall"
	"testing"

	"github.com/cellblock/cellblock/internal/api"
)

func TestExitStatus(t *testing.T) {
	refused := &api.Error{Type: api.ErrOverLimit, Field: "timeout_ms", Message: "too long"}
	for _, tc := range []struct {
		name           string
		res            api.Result
		plain, jsonOut int
	}{
		{"success", api.Result{ExitCode: 0}, 0, 0},
		{"program failed", api.Result{ExitCode: 3}, 3, 0},
		{"exit 255", api.Result{ExitCode: 255}, 255, 0},
		{"killed by a signal", api.Result{ExitCode: 128 + 9}, 137, 0},
		{"timed out", api.Result{ExitCode: 137, TimedOut: true}, 124, 0},
		{"out of memory", api.Result{ExitCode: 137, OOMKilled: true}, 137, 0},
		{"out of memory, odd status", api.Result{ExitCode: 1, OOMKilled: true}, 137, 0},
		{"timed out and out of memory", api.Result{TimedOut: true, OOMKilled: true}, 124, 0},
		{"truncated output", api.Result{ExitCode: 0, StdoutTruncated: true}, 0, 0},
		{"refused", api.Result{Error: refused}, 125, 125},
		{"refused with a status", api.Result{ExitCode: 1, TimedOut: true, Error: refused}, 125, 125},
		{"status out of range", api.Result{ExitCode: 256}, 1, 0},
		{"negative status", api.Result{ExitCode: -1}, 1, 0},
	} {
		if got := exitStatus(&tc.res, false); got != tc.plain {
			t.Errorf("%s: exitStatus = %d, want %d", tc.name, got, tc.plain)
		}
		if got := exitStatus(&tc.res, true); got != tc.jsonOut {
			t.Errorf("%s: exitStatus with --json = %d, want %d", tc.name, got, tc.jsonOut)
		}
	}
}

func TestInterruptedStatus(t *testing.T) {
	for _, tc := range []struct {
		cause error
		want  int
	}{
		{&interrupted{sig: syscall.SIGINT}, 130},
		{&interrupted{sig: syscall.SIGTERM}, 143},
		{nil, 130},
	} {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(tc.cause)
		if got := interruptedStatus(ctx); got != tc.want {
			t.Errorf("interruptedStatus(%v) = %d, want %d", tc.cause, got, tc.want)
		}
	}
}

func TestNotes(t *testing.T) {
	limits := &api.Limits{TimeoutMs: 2000, MemoryBytes: 128 << 20, OutputBytes: 1 << 20}
	for _, tc := range []struct {
		name string
		res  api.Result
		req  api.RunRequest
		want []string
	}{
		{"clean", api.Result{Limits: limits}, api.RunRequest{}, nil},
		{"timed out", api.Result{TimedOut: true, Limits: limits}, api.RunRequest{},
			[]string{"cellblock: timed out after 2s"}},
		{"timed out, limit from the request", api.Result{TimedOut: true}, api.RunRequest{TimeoutMs: 1500},
			[]string{"cellblock: timed out after 1.5s"}},
		{"timed out, limit unknown", api.Result{TimedOut: true}, api.RunRequest{},
			[]string{"cellblock: timed out"}},
		{"out of memory", api.Result{OOMKilled: true, Limits: limits}, api.RunRequest{},
			[]string{"cellblock: killed: out of memory (limit 128 MiB)"}},
		{"out of memory, odd limit", api.Result{OOMKilled: true}, api.RunRequest{MemoryBytes: 100000000},
			[]string{"cellblock: killed: out of memory (limit 95.4 MiB)"}},
		{"truncated", api.Result{StdoutTruncated: true, StderrTruncated: true, Limits: limits}, api.RunRequest{},
			[]string{"cellblock: stdout truncated at 1048576 bytes", "cellblock: stderr truncated at 1048576 bytes"}},
		{"refused", api.Result{Error: &api.Error{Type: api.ErrOverLimit, Field: "timeout_ms", Message: "600000 is above the daemon's maximum of 300000"}},
			api.RunRequest{}, []string{"cellblock: over_limit: timeout_ms: 600000 is above the daemon's maximum of 300000"}},
		{"refused, no field", api.Result{Error: &api.Error{Type: api.ErrBusy, Message: "the queue is full"}},
			api.RunRequest{}, []string{"cellblock: busy: the queue is full"}},
	} {
		if got := notes(&tc.res, &tc.req); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: notes = %q, want %q", tc.name, got, tc.want)
		}
	}
}
