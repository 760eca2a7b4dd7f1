package artifacts

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// clock is a settable time for the tests.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func open(t *testing.T, dir string, max int64, ttl time.Duration, c *clock, evicted *[]string) *Store {
	t.Helper()
	s, err := Open(Config{Dir: dir, MaxBytes: max, TTL: ttl, Now: c.now, OnEvict: func(r string) {
		if evicted != nil {
			*evicted = append(*evicted, r)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func put(t *testing.T, s *Store, owner uint32, content string) string {
	t.Helper()
	w, err := s.Create(owner)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(w, content); err != nil {
		t.Fatal(err)
	}
	sum, err := w.Commit()
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

func read(s *Store, uid uint32, sum string) (string, error) {
	f, n, err := s.Open(uid, sum)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err == nil && int64(len(b)) != n {
		err = fmt.Errorf("%d bytes for size %d", len(b), n)
	}
	return string(b), err
}

func sumOf(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// TestOwnership: an artifact is its producers' (and root's); to anyone
// else it is exactly as absent as one that never existed.
func TestOwnership(t *testing.T) {
	c := &clock{t: time.Unix(1e9, 0)}
	s := open(t, t.TempDir(), 1<<20, time.Hour, c, nil)
	sum := put(t, s, 1000, "chart")
	if sum != sumOf("chart") {
		t.Fatalf("sum %s", sum)
	}
	for _, uid := range []uint32{1000, 0} {
		if got, err := read(s, uid, sum); err != nil || got != "chart" {
			t.Errorf("uid %d: %q %v", uid, got, err)
		}
	}
	_, errOther := read(s, 1001, sum)
	_, errNone := read(s, 1001, sumOf("never"))
	if !errors.Is(errOther, ErrNotFound) || errOther != errNone {
		t.Errorf("another uid: %v; an unknown artifact: %v", errOther, errNone)
	}
	for _, bad := range []string{"", "../../etc/passwd", strings.ToUpper(sum), sum + "0", "meta/" + sum[5:]} {
		if _, err := read(s, 0, bad); !errors.Is(err, ErrNotFound) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	// Produced again by another uid: both have it, stored once, and
	// each is charged for it in full.
	if put(t, s, 1001, "chart") != sum {
		t.Fatal("the same content, another sum")
	}
	if _, err := read(s, 1001, sum); err != nil {
		t.Errorf("the second producer: %v", err)
	}
	one := int64(len("chart")) + Overhead
	if b, n := s.Stats(); n != 2 || b != 2*one {
		t.Errorf("stats %d bytes, %d files", b, n)
	}
	for _, uid := range []uint32{1000, 1001} {
		if b, n := s.Usage(uid); n != 1 || b != one {
			t.Errorf("uid %d: usage %d bytes, %d files", uid, b, n)
		}
	}
	if b, n := s.Usage(1002); n != 0 || b != 0 {
		t.Errorf("a uid without artifacts: usage %d bytes, %d files", b, n)
	}
}

// TestFiles: content and records are root's alone, written whole.
func TestFiles(t *testing.T) {
	dir := t.TempDir()
	c := &clock{t: time.Unix(1e9, 0)}
	s := open(t, dir, 1<<20, time.Hour, c, nil)
	sum := put(t, s, 1000, "x")
	for _, p := range []string{dir, filepath.Join(dir, "sha256", sum), filepath.Join(dir, "meta", sum+".json")} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if m := st.Mode().Perm(); m&0o077 != 0 {
			t.Errorf("%s: mode %v", p, m)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "tmp")); len(ents) != 0 {
		t.Errorf("temporary files left: %v", ents)
	}
	// Aborted: nothing stays.
	w, _ := s.Create(1000)
	io.WriteString(w, "half")
	w.Abort()
	if _, err := w.Commit(); err == nil {
		t.Error("committed after Abort")
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "tmp")); len(ents) != 0 {
		t.Errorf("an aborted artifact left %v", ents)
	}
}

// TestQuota: past the quota the committing uid's own least recently
// produced artifacts go first; a file larger than the quota is refused.
func TestQuota(t *testing.T) {
	c := &clock{t: time.Unix(1e9, 0)}
	var evicted []string
	s := open(t, t.TempDir(), 3*(Overhead+100), time.Hour, c, &evicted)
	a := put(t, s, 1, strings.Repeat("a", 100))
	c.add(time.Second)
	other := put(t, s, 2, strings.Repeat("o", 100)) // older than b and cc
	c.add(time.Second)
	b := put(t, s, 1, strings.Repeat("b", 100))
	c.add(time.Second)
	put(t, s, 1, strings.Repeat("a", 100)) // a produced again: now uid 1's newest
	c.add(time.Second)
	d := put(t, s, 1, strings.Repeat("d", 100))
	if _, err := read(s, 1, b); !errors.Is(err, ErrNotFound) {
		t.Errorf("b, uid 1's least recently produced, is still there: %v", err)
	}
	for _, sum := range []string{a, other, d} {
		if _, err := read(s, 0, sum); err != nil {
			t.Errorf("%s: %v", sum[:8], err)
		}
	}
	if len(evicted) != 1 || evicted[0] != EvictQuota {
		t.Errorf("evictions %v", evicted)
	}
	w, _ := s.Create(1)
	io.WriteString(w, strings.Repeat("z", 4*(Overhead+100)))
	if _, err := w.Commit(); !errors.Is(err, ErrTooBig) {
		t.Errorf("over the quota: %v", err)
	}
}

// TestQuotaSmallAndBig: a uid with nothing in the store takes room from
// the uid that holds the most, not from a small one, even an older one.
func TestQuotaSmallAndBig(t *testing.T) {
	c := &clock{t: time.Unix(1e9, 0)}
	s := open(t, t.TempDir(), 4*(Overhead+100), time.Hour, c, nil)
	small := put(t, s, 2, strings.Repeat("s", 100)) // the oldest of all
	var big []string
	for _, x := range "abc" {
		c.add(time.Second)
		big = append(big, put(t, s, 1, strings.Repeat(string(x), 100)))
	}
	c.add(time.Second)
	put(t, s, 3, strings.Repeat("n", 100))
	if _, err := read(s, 2, small); err != nil {
		t.Errorf("the small uid lost its artifact: %v", err)
	}
	if _, err := read(s, 1, big[0]); !errors.Is(err, ErrNotFound) {
		t.Errorf("the big uid's least recently produced is still there: %v", err)
	}
	if b, n := s.Usage(1); n != 2 || b != 2*(Overhead+100) {
		t.Errorf("the big uid: %d bytes, %d files", b, n)
	}
}

// TestQuotaShared: whether another uid holds the same content changes
// nothing a commit costs, evicts or reports (the other uid holds some
// other content of that size instead): whether the committing uid has
// room, takes it from itself, or from the other uid, the biggest, down
// to that very content, whose file then stays. The file is removed only
// when no uid holds it, and the disk never holds more than is counted.
func TestQuotaShared(t *testing.T) {
	x, y := strings.Repeat("x", 100), strings.Repeat("y", 100)
	type seen struct {
		err        error
		bytes      int64
		files      int
		readable   []bool
		statsMoved [2]int64
		evictions  []string
	}
	run := func(t *testing.T, othersHold bool, mine, theirs int) seen {
		c := &clock{t: time.Unix(1e9, 0)}
		dir := t.TempDir()
		var evicted []string
		s := open(t, dir, 4*(Overhead+100), time.Hour, c, &evicted)
		held := y
		if othersHold {
			held = x
		}
		// uid 1's oldest is the content in question.
		for _, content := range []string{held, "1", "2", "3"}[:theirs] {
			put(t, s, 1, (content + strings.Repeat("-", 100))[:100])
			c.add(time.Second)
		}
		var sums []string
		for _, content := range "abc"[:mine] {
			sums = append(sums, put(t, s, 2, strings.Repeat(string(content), 100)))
			c.add(time.Second)
		}
		before := len(evicted)
		b0, n0 := s.Stats()
		w, _ := s.Create(2)
		io.WriteString(w, x)
		_, err := w.Commit()
		b1, n1 := s.Stats()
		got := seen{err: err, statsMoved: [2]int64{b1 - b0, int64(n1 - n0)}, evictions: evicted[before:]}
		got.bytes, got.files = s.Usage(2)
		for _, sum := range append(sums, sumOf(x)) {
			_, err := read(s, 2, sum)
			got.readable = append(got.readable, err == nil)
		}
		var disk int64
		ents, _ := os.ReadDir(filepath.Join(dir, "sha256"))
		for _, e := range ents {
			info, _ := e.Info()
			disk += info.Size() + Overhead
		}
		s.mu.Lock()
		if disk > s.bytes || len(ents) != len(s.items) {
			t.Errorf("the disk holds %d files of %d bytes, for %d artifacts of %d bytes counted", len(ents), disk, len(s.items), s.bytes)
		}
		s.mu.Unlock()
		return got
	}
	for _, tc := range []struct {
		name                     string
		mine, theirs             int
		wantFiles, wantEvictions int
	}{
		{"room", 1, 1, 2, 0},
		{"from its own", 2, 2, 2, 1},
		{"from the biggest", 0, 4, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			alone, shared := run(t, false, tc.mine, tc.theirs), run(t, true, tc.mine, tc.theirs)
			if fmt.Sprint(alone) != fmt.Sprint(shared) {
				t.Errorf("a commit of content another uid holds differs:\nalone  %+v\nshared %+v", alone, shared)
			}
			if alone.err != nil || alone.files != tc.wantFiles || len(alone.evictions) != tc.wantEvictions || !alone.readable[len(alone.readable)-1] {
				t.Errorf("%+v", alone)
			}
		})
	}
}

// TestTTL: a uid's claim ends a TTL after it last produced the artifact;
// an artifact nobody claims is deleted, expired ones before any other.
func TestTTL(t *testing.T) {
	c := &clock{t: time.Unix(1e9, 0)}
	var evicted []string
	s := open(t, t.TempDir(), 1<<20, time.Hour, c, &evicted)
	sum := put(t, s, 1, "x")
	c.add(40 * time.Minute)
	put(t, s, 2, "x")
	c.add(30 * time.Minute)
	if _, err := read(s, 1, sum); !errors.Is(err, ErrNotFound) {
		t.Errorf("uid 1 after 70 minutes: %v", err)
	}
	if _, err := read(s, 2, sum); err != nil {
		t.Errorf("uid 2 after 30 minutes: %v", err)
	}
	c.add(31 * time.Minute)
	s.expire(c.now()) // the sweep
	if _, err := read(s, 0, sum); !errors.Is(err, ErrNotFound) || len(evicted) != 2 || evicted[1] != EvictExpired {
		t.Errorf("after every claim expired: %v, evictions %v", err, evicted)
	}
}

// TestRestart: records survive a restart; half-written files, content
// without a record and records without content do not.
func TestRestart(t *testing.T) {
	dir := t.TempDir()
	c := &clock{t: time.Unix(1e9, 0)}
	s := open(t, dir, 1<<20, time.Hour, c, nil)
	sum := put(t, s, 1000, "kept")
	gone := put(t, s, 1000, "gone")
	s.Close()
	os.Remove(filepath.Join(dir, "sha256", gone))
	os.WriteFile(filepath.Join(dir, "sha256", sumOf("orphan")), []byte("orphan"), 0o600)
	os.WriteFile(filepath.Join(dir, "tmp", "content-123"), []byte("half"), 0o600)
	os.WriteFile(filepath.Join(dir, "meta", "junk.json"), []byte("{"), 0o600)

	s = open(t, dir, 1<<20, time.Hour, c, nil)
	if got, err := read(s, 1000, sum); err != nil || got != "kept" {
		t.Errorf("after a restart: %q %v", got, err)
	}
	if _, err := read(s, 1001, sum); !errors.Is(err, ErrNotFound) {
		t.Errorf("another uid after a restart: %v", err)
	}
	if _, err := read(s, 1000, gone); !errors.Is(err, ErrNotFound) {
		t.Errorf("a record without content: %v", err)
	}
	for _, p := range []string{filepath.Join("sha256", sumOf("orphan")), filepath.Join("tmp", "content-123"), filepath.Join("meta", "junk.json"), filepath.Join("meta", gone+".json")} {
		if _, err := os.Stat(filepath.Join(dir, p)); !os.IsNotExist(err) {
			t.Errorf("%s survived the restart", p)
		}
	}
	if _, n := s.Stats(); n != 1 {
		t.Errorf("%d artifacts after the restart", n)
	}
	// Expired while the daemon was down.
	s.Close()
	c.add(2 * time.Hour)
	s = open(t, dir, 1<<20, time.Hour, c, nil)
	if _, n := s.Stats(); n != 0 {
		t.Errorf("%d artifacts past their TTL", n)
	}
}

// TestConcurrent: runs producing the same content at once store it once;
// a reader holding an artifact reads it whole while it is evicted.
func TestConcurrent(t *testing.T) {
	c := &clock{t: time.Unix(1e9, 0)}
	dir := t.TempDir()
	s := open(t, dir, 20*(Overhead+1000), time.Hour, c, nil)
	content := strings.Repeat("p", 1000)
	var wg sync.WaitGroup
	sums := make([]string, 16)
	for i := range sums {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := s.Create(uint32(i))
			if err != nil {
				t.Error(err)
				return
			}
			for range 10 {
				io.WriteString(w, content[:100])
			}
			sums[i], err = w.Commit()
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for i, sum := range sums {
		if got, err := read(s, uint32(i), sum); err != nil || got != content {
			t.Errorf("uid %d: %v", i, err)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "sha256")); len(ents) != 1 {
		t.Errorf("%d files for one content", len(ents))
	}
	if _, n := s.Stats(); n != 16 {
		t.Errorf("%d claims of 16 uids", n)
	}

	s = open(t, t.TempDir(), 4*(Overhead+1000), time.Hour, c, nil)
	sum := put(t, s, 3, content)
	f, _, err := s.Open(3, sum)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := range 4 { // past the quota: the first goes
		c.add(time.Second)
		put(t, s, 3, strings.Repeat(fmt.Sprint(i), 1000))
	}
	if _, err := read(s, 3, sum); !errors.Is(err, ErrNotFound) {
		t.Fatalf("not evicted: %v", err)
	}
	if b, err := io.ReadAll(f); err != nil || string(b) != content {
		t.Errorf("the open reader got %d bytes, %v", len(b), err)
	}
}

// fill adds n one-byte artifacts that owner produced, one a second from
// at on, to the store's index alone (no files: what is measured is the
// index's work), and returns their hashes, oldest first.
func fill(s *Store, n int, owner uint32, at time.Time) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	sums := make([]string, n)
	for i := range sums {
		sums[i] = fmt.Sprintf("%064x", i)
		s.claim(sums[i], 1, owner, at.Add(time.Duration(i)*time.Second))
	}
	return sums
}

// work is how many items and claims f made the store look at.
func work(s *Store, f func()) int64 {
	s.mu.Lock()
	before := s.examined
	s.mu.Unlock()
	f()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.examined - before
}

// has reports whether the store's index has sum.
func has(s *Store, sum string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.items[sum] != nil
}

// TestCommitWorkIsLogarithmic: with the store full of 200,000 small
// artifacts, a commit looks at O(log n) of them (a few hundred at most:
// heaps, no scan, no sort), whether it evicts, finds the content stored,
// or refreshes a claim; the sweep with nothing due looks at none.
func TestCommitWorkIsLogarithmic(t *testing.T) {
	const n = 200000
	c := &clock{t: time.Unix(1e9, 0)}
	var evicted []string
	s := open(t, t.TempDir(), n*(1+Overhead), 1000*time.Hour, c, &evicted)
	sums := fill(s, n, 1000, c.now())
	c.add(n * time.Second)
	bound := int64(16 * bits.Len(n)) // 16 log2 n: 288
	check := func(what string, w int64) {
		t.Helper()
		if w > bound {
			t.Errorf("%s looked at %d items and claims of %d (bound %d)", what, w, n, bound)
		}
	}
	// One byte each, as those in the store: one eviction makes room.
	check("a commit that evicts", work(s, func() { put(t, s, 1000, "a") }))
	if has(s, sums[0]) || !has(s, sums[1]) || len(evicted) != 1 {
		t.Errorf("not the least recently produced alone was evicted: %v", evicted)
	}
	c.add(time.Second)
	check("a commit of stored content", work(s, func() { put(t, s, 1000, "a") }))
	s.mu.Lock()
	s.claim(sums[1], 1, 1000, c.now()) // produced again: now the newest
	s.mu.Unlock()
	check("a commit that evicts again", work(s, func() { put(t, s, 1000, "b") }))
	if !has(s, sums[1]) || has(s, sums[2]) {
		t.Errorf("an artifact produced again was evicted, or the least recently produced was not")
	}
	if w := work(s, func() { s.expire(c.now()) }); w > 1 {
		t.Errorf("a sweep with nothing due looked at %d", w)
	}
	// Past the TTL of a few: what a commit evicts has expired, and only
	// what it needs goes before the sweep.
	c.add(1000*time.Hour - time.Duration(n-10)*time.Second)
	check("a commit that expires", work(s, func() { put(t, s, 1000, "c") }))
	if has(s, sums[3]) || !has(s, sums[4]) || evicted[len(evicted)-1] != EvictExpired {
		t.Errorf("evictions %v", evicted[1:])
	}
}

// BenchmarkCommitFull: commits of new content into a store full of
// 200,000 small artifacts, each evicting one.
func BenchmarkCommitFull(b *testing.B) {
	const n = 200000
	s, err := Open(Config{Dir: b.TempDir(), MaxBytes: n * (1 + Overhead), TTL: 1000 * time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	fill(s, n, 1000, time.Now().Add(-time.Hour))
	b.ResetTimer()
	for i := range b.N {
		w, err := s.Create(1000)
		if err != nil {
			b.Fatal(err)
		}
		fmt.Fprint(w, i)
		if _, err := w.Commit(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestChurn: commits of a few contents at once, in a quota that holds
// two, evict and store the same content over and over; the files on
// disk stay those of the index (an eviction's files, removed after the
// lock is let go, never take a content stored again since).
func TestChurn(t *testing.T) {
	dir := t.TempDir()
	c := &clock{t: time.Unix(1e9, 0)}
	s := open(t, dir, 2*(Overhead+10), time.Hour, c, nil)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				w, err := s.Create(uint32(g))
				if err != nil {
					t.Error(err)
					return
				}
				fmt.Fprintf(w, "content-%02d", (i+g)%3)
				sum, err := w.Commit()
				if err != nil {
					t.Error(err)
					return
				}
				if g == 0 {
					c.add(time.Millisecond)
				}
				if f, _, err := s.Open(uint32(g), sum); err == nil {
					f.Close()
				} else if !errors.Is(err, ErrNotFound) {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sub := range []string{"sha256", "meta"} {
		ents, _ := os.ReadDir(filepath.Join(dir, sub))
		if len(ents) != len(s.items) {
			t.Errorf("%d files in %s for %d artifacts", len(ents), sub, len(s.items))
		}
	}
	for sum, it := range s.items {
		if st, err := os.Stat(filepath.Join(dir, "sha256", sum)); err != nil || st.Size() != it.size {
			t.Errorf("%s: %v", sum[:8], err)
		}
	}
	if len(s.deleting) != 0 {
		t.Errorf("still deleting %v", s.deleting)
	}
}
