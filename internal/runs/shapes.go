package runs

import (
	"context"
	"sync"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/deps"
	"github.com/cellblock/cellblock/nsjail"
	"github.com/cellblock/cellblock/rootfs"
)

// shapes keeps one prestarted jail for each shape of jail (see
// nsjail.Spec.Shape: interpreter, dependency environment and its preload
// list, tmp size)
// that recent runs used besides the default one, which the executor's
// own pool serves. A shape gets its pool after its first run, which
// builds its jail on request; it keeps it while runs use it, and loses
// it after idle without a run, or to a shape used more recently when
// max shapes have pools. A pool of a shape with dependencies holds its
// environment (a lease) while it lives, so that the store cannot evict
// it under a waiting jail; removing or pruning environments closes those
// pools first.
type shapes struct {
	e    *Executor
	max  int
	idle time.Duration

	mu       sync.Mutex
	pools    map[string]*shapePool
	closed   bool
	starting sync.WaitGroup
	stop     chan struct{}
	done     chan struct{}
}

type shapePool struct {
	pool *nsjail.Pool // nil while it starts
	env  *deps.Attachment
	last time.Time // the last run that wanted this shape
}

func newShapes(e *Executor, max int, idle time.Duration) *shapes {
	s := &shapes{e: e, max: max, idle: idle, pools: map[string]*shapePool{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go s.decay()
	return s
}

// take returns a prestarted jail for spec, a run on py with req's
// environment and limits l, or nil. Without a pool for spec's shape it
// starts one, for the shape's next run.
func (s *shapes) take(spec *nsjail.Spec, py rootfs.Python, req *api.RunRequest, l api.Limits) *nsjail.Jail {
	return s.want(spec, py, req, l).Take(spec) // nil while the pool starts
}

// want notes a use of spec's shape now and returns its pool, nil when it
// has none yet: then it starts one, for the shape's next run.
func (s *shapes) want(spec *nsjail.Spec, py rootfs.Python, req *api.RunRequest, l api.Limits) *nsjail.Pool {
	if s == nil {
		return nil
	}
	key := spec.Shape()
	s.mu.Lock()
	sp := s.pools[key]
	if sp == nil {
		if !s.closed {
			s.pools[key] = &shapePool{last: time.Now()}
			evicted := s.evictLocked()
			s.starting.Add(1)
			go func() {
				defer s.starting.Done()
				s.start(key, py, req, l)
			}()
			s.mu.Unlock()
			closeAll(evicted)
			return nil
		}
		s.mu.Unlock()
		return nil
	}
	sp.last = time.Now()
	pool := sp.pool
	s.mu.Unlock()
	return pool
}

// evictLocked takes the least recently used shapes' pools out while there
// are more than max, and returns them for closing.
func (s *shapes) evictLocked() []*shapePool {
	var out []*shapePool
	for len(s.pools) > s.max {
		var oldest string
		for k, sp := range s.pools {
			if oldest == "" || sp.last.Before(s.pools[oldest].last) {
				oldest = k
			}
		}
		out = append(out, s.pools[oldest])
		delete(s.pools, oldest)
	}
	return out
}

// start builds the pool of shape key, after a run on py with req and l.
// Its jails are built for a request with nothing of req's but what fixes
// the shape: the environment and the tmp size. The run's code, variables
// and stdin never reach another run's jail.
func (s *shapes) start(key string, py rootfs.Python, req *api.RunRequest, l api.Limits) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sp := &shapePool{}
	fail := func(msg string, err error) {
		sp.env.Release()
		s.mu.Lock()
		if cur := s.pools[key]; cur != nil && cur.pool == nil {
			delete(s.pools, key)
		}
		s.mu.Unlock()
		s.e.log.Warn(msg, "err", err)
	}
	// The environment again (a cache hit): the pool's own lease.
	py2, env, err := s.e.deps.Resolve(ctx, s.e.store, req)
	sp.env = env
	if err != nil {
		fail("prestart a jail of another shape: environment", err)
		return
	}
	limits := s.e.cfg.Defaults
	limits.TmpBytes = l.TmpBytes
	proto := s.e.spec("prestart", py2, &api.RunRequest{}, limits, env)
	if py2.Dir != py.Dir || proto.Shape() != key {
		fail("prestart a jail of another shape: the shape moved", nil)
		return
	}
	pool, err := s.e.runner.NewPool(proto, 1)
	if err != nil {
		fail("prestart a jail of another shape", err)
		return
	}
	sp.pool = pool
	s.mu.Lock()
	cur := s.pools[key]
	if s.closed || cur == nil || cur.pool != nil {
		// Closed, evicted or decayed while it started.
		s.mu.Unlock()
		closeAll([]*shapePool{sp})
		return
	}
	sp.last = cur.last
	s.pools[key] = sp
	s.mu.Unlock()
}

// decay closes the pools of shapes no run has wanted for s.idle.
func (s *shapes) decay() {
	defer close(s.done)
	t := time.NewTicker(max(s.idle/4, time.Second))
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.drop(func(sp *shapePool) bool { return time.Since(sp.last) >= s.idle })
	}
}

// drop closes the pools for which which says so.
func (s *shapes) drop(which func(*shapePool) bool) {
	if s == nil {
		return
	}
	var gone []*shapePool
	s.mu.Lock()
	for k, sp := range s.pools {
		if sp.pool != nil && which(sp) {
			gone = append(gone, sp)
			delete(s.pools, k)
		}
	}
	s.mu.Unlock()
	closeAll(gone)
}

// dropEnvironments closes the pools that hold a dependency environment.
func (s *shapes) dropEnvironments() {
	s.drop(func(sp *shapePool) bool { return sp.env != nil })
}

// ready counts the jails of other shapes that wait now.
func (s *shapes) ready() int {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, sp := range s.pools {
		n += sp.pool.Ready()
	}
	return n
}

// close closes every pool; pools still starting close themselves.
func (s *shapes) close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	var all []*shapePool
	for _, sp := range s.pools {
		if sp.pool != nil {
			all = append(all, sp)
		}
	}
	s.pools = map[string]*shapePool{}
	s.mu.Unlock()
	close(s.stop)
	<-s.done
	closeAll(all)
	s.starting.Wait()
}

func closeAll(sps []*shapePool) {
	for _, sp := range sps {
		if sp.pool != nil {
			_ = sp.pool.Close() // logged by the jails
		}
		sp.env.Release()
	}
}
