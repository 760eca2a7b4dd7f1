package main

import (
	"context"
	"fmt"
	"time"

	"github.com/cellblock/cellblock/internal/api"
)

// sessionBench reports what a live session costs: the API round trip of
// `x + 1` in it (the target: 5 ms), against the same cell in a
// prestarted jail of its own, and the memory an idle session holds.
func sessionBench(d *benchDaemon, n int) error {
	ctx := context.Background()
	c := d.Client
	s, err := c.CreateSession(ctx, &api.SessionRequest{})
	if err != nil {
		return fmt.Errorf("session bench: %w", err)
	}
	defer c.DeleteSession(ctx, s.ID)
	if res, err := c.Run(ctx, &api.RunRequest{Session: s.ID, Code: "x = 41"}); err != nil || res.Error != nil {
		return fmt.Errorf("session bench: %v %+v", err, res)
	}
	var inSession, oneShot []time.Duration
	for i := 0; i < n; i++ {
		if err := d.settle(); err != nil {
			return err
		}
		start := time.Now()
		res, err := c.Run(ctx, &api.RunRequest{Session: s.ID, Code: "x + 1", Mode: api.ModeCell})
		inSession = append(inSession, time.Since(start))
		if err != nil || res.Error != nil || res.Value == nil || res.Value.Repr != "42" {
			return fmt.Errorf("session bench: %v %+v", err, res)
		}
		if err := d.settle(); err != nil {
			return err
		}
		start = time.Now()
		res, err = c.Run(ctx, &api.RunRequest{Code: "x = 41\nx + 1", Mode: api.ModeCell})
		oneShot = append(oneShot, time.Since(start))
		if err != nil || res.Error != nil || res.Value == nil || res.Value.Repr != "42" {
			return fmt.Errorf("session bench: %v %+v", err, res)
		}
	}
	info, err := c.Session(ctx, s.ID)
	if err != nil {
		return err
	}
	fmt.Printf("\nsessions (%d interleaved API calls each, the bench's Go client):\n\n", n)
	fmt.Println("| run | median | p90 |")
	fmt.Println("|---|---|---|")
	fmt.Printf("| `x + 1` in a live session (target 5 ms) | %s | %s |\n", ms(median(inSession)), ms(percentile(inSession, 0.9)))
	fmt.Printf("| `x = 41; x + 1` in a prestarted jail of its own | %s | %s |\n", ms(median(oneShot)), ms(percentile(oneShot, 0.9)))
	fmt.Printf("\nan idle session holds %.1f MiB (its cgroup's memory, interpreter and jail included, after %d runs)\n",
		float64(info.MemoryBytes)/(1<<20), info.ExecutionCount)
	return nil
}
