package server

import (
	"context"
	"sync"

	"github.com/cellblock/cellblock/internal/api"
)

// admission lets at most slots runs execute at once and at most queue more
// wait for a slot; beyond that, callers are turned away at once.
type admission struct {
	slots chan struct{}
	mu    sync.Mutex
	queue int
	max   int
}

func newAdmission(slots, queue int) *admission {
	if slots < 1 {
		slots = 1
	}
	return &admission{slots: make(chan struct{}, slots), max: queue}
}

// acquire waits for a slot and returns its release.
func (a *admission) acquire(ctx context.Context) (func(), *api.Error) {
	select {
	case a.slots <- struct{}{}:
		return a.release, nil
	default:
	}
	a.mu.Lock()
	if a.queue >= a.max {
		a.mu.Unlock()
		return nil, api.Errorf(api.ErrBusy, "", "all %d run slots are busy and the queue of %d is full; retry later", cap(a.slots), a.max)
	}
	a.queue++
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.queue--
		a.mu.Unlock()
	}()
	select {
	case a.slots <- struct{}{}:
		return a.release, nil
	case <-ctx.Done():
		return nil, api.Errorf(api.ErrCanceled, "", "the caller went away while queued")
	}
}

func (a *admission) release() { <-a.slots }

// load returns how many runs execute and how many wait.
func (a *admission) load() (running, queued int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.slots), a.queue
}
