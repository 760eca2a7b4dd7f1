package envs

import (
	"slices"
	"testing"
	"time"
)

func TestEvictions(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(min int) time.Time { return t0.Add(time.Duration(min) * time.Minute) }
	envs := []usage{
		{id: "new", size: 100, lastUsed: at(30)},
		{id: "old", size: 100, lastUsed: at(10)},
		{id: "oldest-busy", size: 100, lastUsed: at(0), inUse: true},
		{id: "mid", size: 100, lastUsed: at(20)},
	}
	for _, c := range []struct {
		budget int64
		want   []string
	}{
		{400, nil},
		{1000, nil},
		{399, []string{"old"}},
		{300, []string{"old"}},
		{250, []string{"old", "mid"}},
		{100, []string{"old", "mid", "new"}},
		// What is in use stays even when it alone is over the budget.
		{0, []string{"old", "mid", "new"}},
	} {
		if got := evictions(envs, c.budget); !slices.Equal(got, c.want) {
			t.Errorf("budget %d: evict %q, want %q", c.budget, got, c.want)
		}
	}
	// Ties in last use go by ID, so the choice is stable.
	tied := []usage{{id: "b", size: 1, lastUsed: t0}, {id: "a", size: 1, lastUsed: t0}}
	if got := evictions(tied, 1); !slices.Equal(got, []string{"a"}) {
		t.Errorf("tie: %q", got)
	}
	if got := evictions([]usage{{id: "x", size: 5, inUse: true}}, 0); got != nil {
		t.Errorf("evicted an environment in use: %q", got)
	}
}
