package nsjail

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"
)

// Pool keeps a few jails built and started ahead of requests, so that a run
// does not wait for namespaces, mounts, pivot_root, seccomp and the init's
// start. Each jail is built for one prototype spec, carries out exactly one
// run and is then torn down like any other: nothing of one run is ever
// seen by another, and the program (Python) still starts fresh in it. Runs
// that need a differently built jail (another rootfs, dependencies, tmpfs
// size, preload list) do not use the pool.
//
// A pool whose prototype preloads modules hands out only jails whose
// runner has finished importing them (a run never waits for another's
// preload, it gets a jail built for it instead), and only to runs whose
// memory limit is above what the waiting jail already holds. Jails that
// die while they wait (an import that crashes the interpreter) are rebuilt
// after a growing pause, not at once.
type Pool struct {
	r     *Runner
	proto Spec
	size  int
	log   *slog.Logger

	mu     sync.Mutex
	ready  []*Jail
	closed bool

	kick chan struct{} // wakes the filler
	stop chan struct{}
	done chan struct{}
	seq  uint64 // guarded by mu
	tag  string

	// died counts the jails in a row whose init exited before a run
	// took them; the next build waits until retryAt. Guarded by mu.
	died    int
	retryAt time.Time
}

// Pool timings.
const (
	// poolRetryMin and poolRetryMax bound the back-off after a failed
	// build.
	poolRetryMin = time.Second
	poolRetryMax = time.Minute
)

// NewPool starts keeping size jails built for proto ready. proto's ID is
// not used; jails are named "pre-<tag>-<n>".
func (r *Runner) NewPool(proto *Spec, size int) (*Pool, error) {
	if size < 1 {
		return nil, fmt.Errorf("nsjail: pool size %d must be at least 1", size)
	}
	p := &Pool{
		r: r, proto: *proto, size: size, log: r.log,
		kick: make(chan struct{}, 1),
		stop: make(chan struct{}),
		done: make(chan struct{}),
		tag:  strconv.FormatInt(time.Now().UnixNano(), 36),
	}
	p.proto.ID = p.jailID(0)
	if err := p.proto.Validate(); err != nil {
		return nil, err
	}
	go p.fill()
	p.wake()
	return p, nil
}

func (p *Pool) jailID(n uint64) string {
	return "pre-" + p.tag + "-" + strconv.FormatUint(n, 10)
}

// Take returns a ready jail that can carry out spec, or nil when there is
// none (the pool is empty, closed, nil, or spec needs another jail). The
// caller must Launch or Close it.
//
// The pool is refilled once the taken jail's init has exited (its run is
// over) rather than at once, and jails are built at the lowest CPU weight, so that building a
// successor competes as little as it can with runs for the CPU; an empty
// pool starts refilling at once.
func (p *Pool) Take(spec *Spec) *Jail {
	if p == nil || !p.proto.sameJail(spec) {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// Dead jails go; of the live ones, one whose interpreter is up
	// already is best, else the oldest (its Python has had the longest to
	// start, and is still well ahead of a jail built now). With a preload,
	// only one that is done with it: a preload can take longer than a
	// fresh jail and the run's own imports.
	for _, j := range p.dropDead() {
		go p.discard(j)
	}
	preload := len(p.proto.Preload) > 0
	pick := -1
	for i, j := range p.ready {
		if j.isWarm() && (!preload || j.holdsLessThan(spec.Limits.MemoryBytes)) {
			pick = i
			break
		}
	}
	if pick < 0 && len(p.ready) > 0 && !preload {
		pick = 0
	}
	if pick < 0 {
		p.wake()
		return nil
	}
	j := p.ready[pick]
	p.ready = append(p.ready[:pick], p.ready[pick+1:]...)
	return j
}

// holdsLessThan reports whether the jail's memory usage (its preloaded
// modules) is under limit, the run's memory limit, which Launch puts on
// the jail's cgroup: at or over it the kernel would kill the run at once.
func (j *Jail) holdsLessThan(limit int64) bool {
	n, err := j.memoryUsage()
	return err == nil && n < limit
}

// Ready reports how many jails are waiting with their init alive and
// their interpreter up (the runner said it is ready).
func (p *Pool) Ready() int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, j := range p.ready {
		if j.alive() && j.isWarm() {
			n++
		}
	}
	return n
}

// Close stops refilling and tears down every waiting jail.
func (p *Pool) Close() error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	ready := p.ready
	p.ready = nil
	p.mu.Unlock()
	close(p.stop)
	<-p.done
	var errs []error
	for _, j := range ready {
		errs = append(errs, j.Close())
	}
	return errors.Join(errs...)
}

func (p *Pool) wake() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

func (p *Pool) discard(j *Jail) {
	if err := j.Close(); err != nil {
		p.log.Warn("discard prestarted jail", "jail", j.ID(), "err", err)
	}
}

// fill builds jails one at a time until size are ready, whenever it is
// woken: after a taken jail's run, or when a waiting jail's init dies.
func (p *Pool) fill() {
	defer close(p.done)
	backoff := poolRetryMin
	for {
		select {
		case <-p.stop:
			return
		case <-p.kick:
		}
		p.prune()
		for {
			p.mu.Lock()
			need := !p.closed && len(p.ready) < p.size
			if need {
				p.seq++
			}
			id := p.jailID(p.seq)
			wait := time.Until(p.retryAt)
			p.mu.Unlock()
			if !need {
				break
			}
			if wait > 0 {
				// Jails died waiting, one after another.
				select {
				case <-p.stop:
					return
				case <-time.After(wait):
				}
			}
			spec := p.proto
			spec.ID = id
			// Built at the lowest CPU weight: the build takes only
			// what runs in flight leave. Close stops the filler between
			// builds, not within one.
			j, err := p.r.prepare(context.Background(), id, &spec, true)
			if err != nil {
				p.log.Warn("prestart a jail", "err", err, "retry_in", backoff)
				select {
				case <-p.stop:
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, poolRetryMax)
				continue
			}
			backoff = poolRetryMin
			j.prestarted = true
			j.pool = p
			// The one wake-up for this jail: when its init exits, whether
			// its run is over or it died waiting, prune it and refill. A
			// run's jail is torn down first, after the run's answer, so
			// that neither the teardown nor the successor's build
			// competes with it.
			go func() {
				<-j.exited
				p.noteExit(j.wasLaunched())
				if j.claimed() {
					<-j.gone
				}
				p.wake()
			}()
			p.mu.Lock()
			closed := p.closed
			if !closed {
				p.ready = append(p.ready, j)
			}
			p.mu.Unlock()
			if closed {
				p.discard(j)
				return
			}
		}
	}
}

// noteExit counts a jail's end: one that died before a run took it
// delays the build after the next one (the first is rebuilt at once, the
// next after poolRetryMin, doubling up to poolRetryMax), so that a jail
// that cannot live (its preload crashes its interpreter) is not rebuilt
// in a loop; a launched one resets the count.
func (p *Pool) noteExit(launched bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if launched {
		p.died = 0
		p.retryAt = time.Time{}
		return
	}
	p.died++
	if p.died > 1 {
		p.retryAt = time.Now().Add(min(poolRetryMin<<min(p.died-2, 16), poolRetryMax))
	}
}

// prune drops ready jails whose init has died.
func (p *Pool) prune() {
	p.mu.Lock()
	dead := p.dropDead()
	p.mu.Unlock()
	for _, j := range dead {
		p.log.Warn("a prestarted jail died while it waited", "jail", j.ID())
		p.discard(j)
	}
}

// dropDead takes the jails whose init has exited out of the ready list
// and returns them; p.mu is held.
func (p *Pool) dropDead() []*Jail {
	var dead []*Jail
	live := p.ready[:0]
	for _, j := range p.ready {
		if j.alive() {
			live = append(live, j)
		} else {
			dead = append(dead, j)
		}
	}
	p.ready = live
	return dead
}
