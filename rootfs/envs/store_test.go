package envs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellblock/cellblock/rootfs"
)

// fakeBuild installs one distribution per requirement name, counting calls.
type fakeBuild struct {
	calls atomic.Int32
	// gate, when set, holds every build until it is closed.
	gate chan struct{}
	fail error
}

func (f *fakeBuild) fn(spec Spec) BuildFunc {
	return func(ctx context.Context, site string) (BuildResult, error) {
		f.calls.Add(1)
		if f.gate != nil {
			select {
			case <-f.gate:
			case <-ctx.Done():
				return BuildResult{}, ctx.Err()
			}
		}
		if f.fail != nil {
			return BuildResult{}, f.fail
		}
		for _, r := range spec.Requirements {
			req, _ := ParseRequirement(r)
			di := filepath.Join(site, req.Name+"-1.0.dist-info")
			if err := os.Mkdir(di, 0o755); err != nil {
				return BuildResult{}, err
			}
			meta := "Metadata-Version: 2.1\nName: " + req.Name + "\nVersion: 1.0\n"
			if err := os.WriteFile(filepath.Join(di, "METADATA"), []byte(meta), 0o644); err != nil {
				return BuildResult{}, err
			}
			if err := os.WriteFile(filepath.Join(di, "RECORD"), []byte(req.Name+"\n"), 0o644); err != nil {
				return BuildResult{}, err
			}
		}
		return BuildResult{Installer: "fake"}, nil
	}
}

// awaitWaiters waits until n Acquire calls wait for the build of id in
// flight: they are counted on it and can only get its result. The store
// offers no event for a caller that starts waiting, so this polls.
func awaitWaiters(t *testing.T, s *Store, id string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		got := 0
		if f := s.flights[id]; f != nil {
			got = f.waiters
		}
		s.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d callers wait for the build of %s after 10s, want %d", got, id, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func specFor(reqs ...string) Spec {
	s := testSpec()
	s.Requirements, _ = Normalize(reqs)
	return s
}

// storeDir is a store directory that is deleted after the test even
// though its environments are read-only (the test may not run as root).
func storeDir(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "envs")
	t.Cleanup(func() { _ = rootfs.RemoveTree(dir) })
	return dir
}

func openStore(t *testing.T, dir string, budget int64) *Store {
	t.Helper()
	s, err := Open(Config{Dir: dir, Budget: budget, MaxBuilds: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestStoreBuildOnceAndHit(t *testing.T) {
	dir := storeDir(t)
	s := openStore(t, dir, 1<<30)
	fb := &fakeBuild{}
	spec := specFor("cbalpha", "cbbeta")
	l, err := s.Acquire(context.Background(), spec, fb.fn(spec))
	if err != nil {
		t.Fatal(err)
	}
	if l.CacheHit || l.Env.ID != spec.ID() || len(l.Env.Packages) != 2 || l.Env.Installer != "fake" {
		t.Errorf("first lease %+v", l)
	}
	if l.Site != filepath.Join(dir, spec.ID(), "site-packages") {
		t.Errorf("site %s", l.Site)
	}
	fi, err := os.Stat(l.Site)
	if err != nil || fi.Mode().Perm() != 0o555 {
		t.Errorf("site-packages is not read-only: %v %v", fi.Mode(), err)
	}
	if got := s.List(); len(got) != 1 || got[0].InUse != 1 {
		t.Errorf("list while held: %+v", got)
	}
	l.Release()
	l.Release() // twice is harmless
	l2, err := s.Acquire(context.Background(), spec, fb.fn(spec))
	if err != nil {
		t.Fatal(err)
	}
	if !l2.CacheHit || fb.calls.Load() != 1 {
		t.Errorf("second acquire: hit %v, builds %d", l2.CacheHit, fb.calls.Load())
	}
	l2.Release()
	if st := s.Stats(); st.Entries != 1 || st.Builds != 1 || st.Bytes <= 0 {
		t.Errorf("stats %+v", st)
	}
	if got := s.List(); got[0].InUse != 0 {
		t.Errorf("still in use after release: %+v", got)
	}
}

func TestStoreConcurrentAcquireBuildsOnce(t *testing.T) {
	s := openStore(t, storeDir(t), 1<<30)
	fb := &fakeBuild{gate: make(chan struct{})}
	spec := specFor("cbgamma")
	const n = 8
	var wg sync.WaitGroup
	leases := make([]*Lease, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			leases[i], errs[i] = s.Acquire(context.Background(), spec, fb.fn(spec))
		}()
	}
	// The build is held until every caller waits for it: none can come
	// late and find the environment built.
	awaitWaiters(t, s, spec.ID(), n)
	close(fb.gate)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if leases[i].Env.ID != spec.ID() {
			t.Errorf("lease %d: env %s", i, leases[i].Env.ID)
		}
		if leases[i].CacheHit {
			t.Errorf("lease %d was a cache hit: it did not wait for the build", i)
		}
	}
	if c := fb.calls.Load(); c != 1 {
		t.Errorf("%d builds for one key", c)
	}
	if got := s.List()[0].InUse; got != n {
		t.Errorf("in use by %d, want %d", got, n)
	}
	for _, l := range leases {
		l.Release()
	}
	if got := s.List()[0].InUse; got != 0 {
		t.Errorf("in use by %d after every release", got)
	}
}

func TestStoreFailureNotCached(t *testing.T) {
	dir := storeDir(t)
	s := openStore(t, dir, 1<<30)
	boom := errors.New("no matching distribution found for cbmissing")
	fb := &fakeBuild{fail: boom}
	spec := specFor("cbmissing")
	for range 2 {
		if _, err := s.Acquire(context.Background(), spec, fb.fn(spec)); !errors.Is(err, boom) {
			t.Fatalf("acquire: %v", err)
		}
	}
	if fb.calls.Load() != 2 {
		t.Errorf("a failed build was cached: %d builds", fb.calls.Load())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Errorf("a failed build left %v", entries)
	}
}

func TestStoreCancelWhileWaiting(t *testing.T) {
	s := openStore(t, storeDir(t), 1<<30)
	fb := &fakeBuild{gate: make(chan struct{})}
	spec := specFor("cbslow")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := s.Acquire(ctx, spec, fb.fn(spec))
		done <- err
	}()
	awaitWaiters(t, s, spec.ID(), 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled acquire: %v", err)
	}
	close(fb.gate) // the build goes on and is kept
	l, err := s.Acquire(context.Background(), spec, fb.fn(spec))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if fb.calls.Load() != 1 {
		t.Errorf("%d builds", fb.calls.Load())
	}
	if got := s.List()[0].InUse; got != 1 {
		t.Errorf("in use by %d, want 1 (the cancelled caller must not hold it)", got)
	}
}

func TestStoreEvictionAndPersistence(t *testing.T) {
	dir := storeDir(t)
	s, err := Open(Config{Dir: dir, Budget: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	fb := &fakeBuild{}
	ids := map[string]string{}
	for _, name := range []string{"a", "b", "c", "a"} { // a is used again last
		spec := specFor(name)
		ids[name] = spec.ID()
		l, err := s.Acquire(context.Background(), spec, fb.fn(spec))
		if err != nil {
			t.Fatal(err)
		}
		l.Release()
		time.Sleep(5 * time.Millisecond)
	}
	one := s.List()[0].SizeBytes
	s.Close()

	// Reopened with room for two, the least recently used (b) goes.
	s = openStore(t, dir, 2*one)
	got := s.List()
	if len(got) != 2 || got[0].ID != ids["a"] || got[1].ID != ids["c"] {
		t.Fatalf("after reopening with room for two: %+v", got)
	}
	if _, err := os.Stat(filepath.Join(dir, ids["b"])); !os.IsNotExist(err) {
		t.Errorf("evicted environment's directory remains: %v", err)
	}

	// A new build evicts the least recently used one not in use: c is
	// held, so a goes although c is older.
	specC := specFor("c")
	held, err := s.Acquire(context.Background(), specC, fb.fn(specC))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	a, _ := s.Acquire(context.Background(), specFor("a"), fb.fn(specFor("a")))
	a.Release()
	time.Sleep(5 * time.Millisecond)
	specD := specFor("d")
	d, err := s.Acquire(context.Background(), specD, fb.fn(specD))
	if err != nil {
		t.Fatal(err)
	}
	d.Release()
	left := map[string]bool{}
	for _, e := range s.List() {
		left[e.ID] = true
	}
	if !left[ids["c"]] || !left[specD.ID()] || left[ids["a"]] || len(left) != 2 {
		t.Errorf("after building d with c held: %v (a=%s c=%s d=%s)", left, ids["a"], ids["c"], specD.ID())
	}
	held.Release()
}

func TestStoreZeroBudgetKeepsOnlyWhatIsHeld(t *testing.T) {
	dir := storeDir(t)
	s := openStore(t, dir, 0)
	fb := &fakeBuild{}
	spec := specFor("a")
	l, err := s.Acquire(context.Background(), spec, fb.fn(spec))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.List()) != 1 {
		t.Fatalf("an environment in use was evicted")
	}
	if _, err := os.Stat(l.Site); err != nil {
		t.Fatalf("site of a held environment: %v", err)
	}
	l.Release()
	if len(s.List()) != 0 {
		t.Errorf("over budget and unused, yet kept: %+v", s.List())
	}
}

func TestStoreRemoveAndPrune(t *testing.T) {
	dir := storeDir(t)
	s := openStore(t, dir, 1<<30)
	fb := &fakeBuild{}
	var leases []*Lease
	for _, name := range []string{"a", "b", "c"} {
		spec := specFor(name)
		l, err := s.Acquire(context.Background(), spec, fb.fn(spec))
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	a, b, c := leases[0], leases[1], leases[2]
	if _, err := s.Remove(a.Env.ID); !errors.Is(err, ErrInUse) {
		t.Errorf("remove in use: %v", err)
	}
	a.Release()
	if _, err := s.Remove(a.Env.ID); err != nil {
		t.Errorf("remove: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, a.Env.ID)); !os.IsNotExist(err) {
		t.Errorf("removed environment remains: %v", err)
	}
	for _, id := range []string{a.Env.ID, "0123456789abcdef01234567", "../x"} {
		if _, err := s.Remove(id); !errors.Is(err, ErrNotFound) {
			t.Errorf("remove %q: %v", id, err)
		}
	}
	b.Release()
	removed, err := s.Prune()
	if err != nil || len(removed) != 1 || removed[0].ID != b.Env.ID {
		t.Errorf("prune with c held: %+v %v", removed, err)
	}
	if got := s.List(); len(got) != 1 || got[0].ID != c.Env.ID {
		t.Errorf("after prune: %+v", got)
	}
	c.Release()
}

func TestOpenSweeps(t *testing.T) {
	dir := storeDir(t)
	s, err := Open(Config{Dir: dir, Budget: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	fb := &fakeBuild{}
	spec := specFor("a")
	l, err := s.Acquire(context.Background(), spec, fb.fn(spec))
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	s.Close()
	junk := []string{".build-x-1", ".trash-y-2", "0123456789abcdef01234567"} // the last has no meta.json
	for _, j := range junk {
		if err := os.MkdirAll(filepath.Join(dir, j, "site-packages"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s = openStore(t, dir, 1<<30)
	if got := s.List(); len(got) != 1 || got[0].ID != spec.ID() || len(got[0].Packages) != 1 {
		t.Errorf("reopened: %+v", got)
	}
	for _, j := range junk {
		if _, err := os.Stat(filepath.Join(dir, j)); !os.IsNotExist(err) {
			t.Errorf("%s not swept: %v", j, err)
		}
	}
	if _, err := s.Acquire(context.Background(), Spec{}, nil); err == nil {
		t.Errorf("an invalid spec was accepted")
	}
}

// TestStoreSetPreload: the preload list is kept in meta.json, survives a
// reopen, shows in leases and the list, and leaves the directory sealed.
func TestStoreSetPreload(t *testing.T) {
	dir := storeDir(t)
	s := openStore(t, dir, 1<<30)
	fb := &fakeBuild{}
	spec := specFor("cbalpha")
	l, err := s.Acquire(context.Background(), spec, fb.fn(spec))
	if err != nil {
		t.Fatal(err)
	}
	if l.Env.Preload != nil {
		t.Errorf("a new environment preloads %q", l.Env.Preload)
	}
	info, err := s.SetPreload(spec.ID(), []string{"cbalpha", "json"})
	if err != nil || !slices.Equal(info.Preload, []string{"cbalpha", "json"}) {
		t.Fatalf("set preload: %+v %v", info, err)
	}
	l.Release()
	envDir := filepath.Join(dir, spec.ID())
	if fi, err := os.Stat(envDir); err != nil || fi.Mode().Perm() != 0o555 {
		t.Errorf("environment directory not sealed again: %v %v", fi.Mode(), err)
	}
	if ents, _ := os.ReadDir(envDir); len(ents) != 2 {
		t.Errorf("environment directory holds %d entries, want meta.json and site-packages", len(ents))
	}
	if got := s.List(); len(got) != 1 || !slices.Equal(got[0].Preload, []string{"cbalpha", "json"}) {
		t.Errorf("list: %+v", got)
	}
	l, err = s.Acquire(context.Background(), spec, fb.fn(spec))
	if err != nil || !slices.Equal(l.Env.Preload, []string{"cbalpha", "json"}) {
		t.Fatalf("lease after set: %+v %v", l, err)
	}
	l.Release()
	s.Close()

	s = openStore(t, dir, 1<<30)
	if got := s.List(); len(got) != 1 || !slices.Equal(got[0].Preload, []string{"cbalpha", "json"}) {
		t.Errorf("after reopen: %+v", got)
	}
	if info, err := s.SetPreload(spec.ID(), []string{}); err != nil || info.Preload != nil {
		t.Errorf("clear: %+v %v", info, err)
	}
	if got := s.List(); got[0].Preload != nil {
		t.Errorf("cleared list: %+v", got[0].Preload)
	}
	if _, err := s.SetPreload("0123456789abcdef01234567", []string{"x"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown id: %v", err)
	}
	if _, err := s.SetPreload("../x", []string{"x"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("bad id: %v", err)
	}
	if fb.calls.Load() != 1 {
		t.Errorf("setting the list rebuilt the environment: %d builds", fb.calls.Load())
	}
}
