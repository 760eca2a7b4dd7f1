package envs

import (
	"slices"
	"strings"
	"time"
)

// usage is what eviction knows about one environment.
type usage struct {
	id       string
	size     int64
	lastUsed time.Time
	inUse    bool
}

// evictions chooses which environments to delete so that the total size
// fits the budget: the least recently used first (ties by ID, for a
// stable order), never one in use. The total may stay over the budget when
// what is in use alone exceeds it.
func evictions(envs []usage, budget int64) []string {
	var total int64
	for _, e := range envs {
		total += e.size
	}
	if total <= budget {
		return nil
	}
	order := slices.Clone(envs)
	slices.SortFunc(order, func(a, b usage) int {
		if c := a.lastUsed.Compare(b.lastUsed); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	var victims []string
	for _, e := range order {
		if total <= budget {
			break
		}
		if e.inUse {
			continue
		}
		victims = append(victims, e.id)
		total -= e.size
	}
	return victims
}
