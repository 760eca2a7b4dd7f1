package nsjail

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/cellblock/cellblock/nsjail/runner"
)

// answeringEarly is a runner's channel whose reader never reads, yet
// answers every file at once, as a session's code that replaced the
// runner's handler could: next hands out those answers.
func answeringEarly(t *testing.T, files []InputFile) (*Jail, func() ([]byte, error)) {
	t.Helper()
	theirs, ours, err := socketpair()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { theirs.Close(); ours.Close() })
	i := 0
	next := func() ([]byte, error) {
		f := files[i]
		i++
		return []byte(`{"type":"` + runner.TypeFileWritten + `","path":"` + f.Path + `","bytes":` + strconv.Itoa(len(f.Data)) + `}`), nil
	}
	return &Jail{id: "test", rch: ours}, next
}

// TestSendFilesHasOneDeadline: a runner that answers and never reads the
// frames holds sendFiles until the send's one deadline, not a deadline
// per frame, and ctx ends it sooner; either way it gives up with the
// error that makes a session be killed (no Errno).
func TestSendFilesHasOneDeadline(t *testing.T) {
	files := []InputFile{{Path: "big.bin", Data: bytes.Repeat([]byte{1}, 16<<20)}}
	for _, how := range []string{"deadline", "ctx"} {
		t.Run(how, func(t *testing.T) {
			j, next := answeringEarly(t, files)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			deadline := time.Now().Add(time.Hour)
			if how == "deadline" {
				deadline = time.Now().Add(200 * time.Millisecond)
			}
			done := make(chan error, 1)
			go func() { done <- j.sendFiles(ctx, files, deadline, next) }()
			if how == "ctx" {
				cancel()
			}
			select {
			case err := <-done:
				var fe *FileError
				if !errors.As(err, &fe) || fe.Errno != "" {
					t.Errorf("gave up with %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("sendFiles still waits on a runner that does not read")
			}
		})
	}
}
