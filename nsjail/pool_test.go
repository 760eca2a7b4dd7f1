package nsjail

import (
	"testing"
	"time"
)

// TestPoolDeathBackoff: jails that die while they wait are rebuilt at
// once the first time, then after a pause that doubles up to
// poolRetryMax; a run's jail resets it.
func TestPoolDeathBackoff(t *testing.T) {
	p := &Pool{}
	p.noteExit(false)
	if !p.retryAt.IsZero() {
		t.Fatalf("the first death delays the rebuild until %v", p.retryAt)
	}
	var last time.Duration
	for i := range 12 {
		p.noteExit(false)
		wait := time.Until(p.retryAt)
		if wait <= 0 || wait > poolRetryMax || (i > 0 && wait < last-time.Second && wait < poolRetryMax-time.Second) {
			t.Fatalf("death %d: wait %v after %v", i+2, wait, last)
		}
		last = wait
	}
	if last < poolRetryMax-time.Second {
		t.Errorf("the pause stops growing at %v, before %v", last, poolRetryMax)
	}
	p.noteExit(true)
	if p.died != 0 || !p.retryAt.IsZero() {
		t.Errorf("a run's jail did not reset the count: %d %v", p.died, p.retryAt)
	}
}
