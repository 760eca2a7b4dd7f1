// Package artifacts is cellblockd's artifact store: the content of the
// files runs wrote under /work/out, kept content-addressed under the state
// directory (sha256/HEX, root's, mode 0600), with a record of which uids
// produced each one and when (meta/HEX.json), which survives a restart.
//
// An artifact is readable only by a uid that produced it (root aside);
// to any other uid it does not exist. Each uid's claim expires a time to
// live after it last produced the artifact, and an artifact no uid claims
// is deleted. Content is written to a temporary file and renamed into
// place, so a reader never sees half of one, and a reader holds its file
// open, so eviction never cuts a read short.
//
// The quota counts claims, not files: each uid is charged in full for
// every artifact it holds, as if nobody else held it (the disk holds
// each content once, so it never uses more than is counted). A commit
// that needs room takes it from expired claims first, then from the
// committing uid's own claims, least recently produced first, and only
// when it has none left from the uid that holds the most bytes: a uid
// that floods the store evicts itself, never a small user. Neither what
// a commit costs nor what it evicts, nor the figures a uid is told
// (Usage), depend on whether another uid holds the same content: no uid
// learns from the store what another produced.
//
// The store holds up to hundreds of thousands of small artifacts, and
// every commit and read takes its one lock: what a commit does under it
// is O(log n) in the artifacts held (heaps by time, no scan), expiry is
// the periodic sweep's, in batches, and evicted files are removed after
// the lock is let go.
//
// It stores and hands out bytes; it knows nothing of jails, requests or
// HTTP.
package artifacts

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Defaults of Config.
const (
	DefaultMaxBytes = 1 << 30
	DefaultTTL      = 24 * time.Hour
	// Overhead is what each artifact counts against the quota besides
	// its content: its record and the file system's blocks, so that many
	// small files cannot go past the quota unseen.
	Overhead = 4096
	// sweepEvery is how often expired claims are dropped, at most
	// sweepBatch at a time under the lock.
	sweepEvery = time.Minute
	sweepBatch = 256
)

// Eviction reasons, as Config.OnEvict is told.
const (
	EvictExpired = "expired"
	EvictQuota   = "quota"
)

// ErrNotFound is returned for an artifact that does not exist, has
// expired or been evicted, or that the caller did not produce: the same
// error for each, so that no uid learns of another's artifacts.
var ErrNotFound = errors.New("no such artifact")

// ErrTooBig is returned by Commit for content larger than the quota.
var ErrTooBig = errors.New("larger than the artifact store's quota")

// Config configures a Store.
type Config struct {
	// Dir is the store's directory (made 0700 if missing).
	Dir string
	// MaxBytes is the quota: content plus Overhead per artifact, for
	// each uid that holds it.
	MaxBytes int64
	// TTL is how long a uid keeps an artifact after it last produced it.
	TTL time.Duration
	// OnEvict, if set, is told of each claim dropped (a uid losing an
	// artifact, whether or not another uid keeps it), and why
	// (EvictExpired, EvictQuota).
	OnEvict func(reason string)
	Log     *slog.Logger
	// Now is the clock (tests set their own); nil means time.Now.
	Now func() time.Time
}

// Store is the artifact store. Its methods are safe for concurrent use.
type Store struct {
	cfg  Config
	stop chan struct{}
	done chan struct{}

	mu    sync.Mutex
	items map[string]*item
	// bytes is what counts against the quota: content plus Overhead of
	// every claim.
	bytes int64
	// ages holds every claim, the least recently produced first: the
	// next to expire.
	ages indexed[*claim]
	// owners holds each uid's claims; big the owners, the one with the
	// most bytes first.
	owners map[uint32]*owner
	big    indexed[*owner]
	// deleting counts by hash the evicted artifacts whose files are
	// being removed after the lock was let go: such content is not
	// stored again until gone signals they are.
	deleting map[string]int
	gone     *sync.Cond
	// examined counts the items and claims looked at, and compared, to
	// expire and make room: the work the tests bound.
	examined int64
}

// item is one artifact.
type item struct {
	sum  string
	size int64
	// claims holds each uid that produced it, and when it last did:
	// mostly one.
	claims []*claim
}

// cost is what each claim on it counts against the quota.
func (it *item) cost() int64 { return it.size + Overhead }

// claim is one uid's hold on an item.
type claim struct {
	uid    uint32
	it     *item
	at     time.Time // when uid last produced it
	agePos int       // in Store.ages
	ownPos int       // in its owner's claims
}

// owner is one uid's claims.
type owner struct {
	uid uint32
	// bytes is the cost of its claims.
	bytes int64
	// claims holds them, the least recently produced first.
	claims indexed[*claim]
	bigPos int // in Store.big
}

// Open opens the store at cfg.Dir, making it if needed: it removes what a
// crash left half-written and anything without its record, then starts
// dropping expired claims every minute. Close stops that.
func Open(cfg Config) (*Store, error) {
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.OnEvict == nil {
		cfg.OnEvict = func(string) {}
	}
	for _, d := range []string{cfg.Dir, filepath.Join(cfg.Dir, "sha256"), filepath.Join(cfg.Dir, "meta"), filepath.Join(cfg.Dir, "tmp")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("artifact store: %w", err)
		}
		if err := os.Chmod(d, 0o700); err != nil {
			return nil, fmt.Errorf("artifact store: %w", err)
		}
	}
	s := &Store{cfg: cfg, items: map[string]*item{}, owners: map[uint32]*owner{}, deleting: map[string]int{}, stop: make(chan struct{}), done: make(chan struct{})}
	s.gone = sync.NewCond(&s.mu)
	s.ages = indexed[*claim]{
		less: func(a, b *claim) bool { return a.at.Before(b.at) },
		pos:  func(c *claim) *int { return &c.agePos },
		cmps: &s.examined,
	}
	s.big = indexed[*owner]{
		less: func(a, b *owner) bool { return a.bytes > b.bytes || a.bytes == b.bytes && a.uid < b.uid },
		pos:  func(o *owner) *int { return &o.bigPos },
		cmps: &s.examined,
	}
	if err := s.load(); err != nil {
		return nil, err
	}
	s.expire(cfg.Now())
	s.mu.Lock()
	doomed := s.fit(nil, 0, cfg.Now(), nil) // under a lowered quota
	s.mu.Unlock()
	s.remove(doomed)
	go s.sweep()
	return s, nil
}

// Close stops the store's sweeps. The files stay for the next Open.
func (s *Store) Close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

func (s *Store) sweep() {
	defer close(s.done)
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.expire(s.cfg.Now())
	}
}

func (s *Store) content(sum string) string { return filepath.Join(s.cfg.Dir, "sha256", sum) }
func (s *Store) meta(sum string) string    { return filepath.Join(s.cfg.Dir, "meta", sum+".json") }

// validSum reports whether sum is a SHA-256 in lower-case hex.
func validSum(sum string) bool {
	if len(sum) != sha256.Size*2 {
		return false
	}
	for _, c := range []byte(sum) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// load reads the records and drops what does not match them.
func (s *Store) load() error {
	tmp := filepath.Join(s.cfg.Dir, "tmp")
	if ents, err := os.ReadDir(tmp); err == nil {
		for _, e := range ents {
			os.Remove(filepath.Join(tmp, e.Name()))
		}
	}
	metas, err := os.ReadDir(filepath.Join(s.cfg.Dir, "meta"))
	if err != nil {
		return fmt.Errorf("artifact store: %w", err)
	}
	for _, e := range metas {
		sum, ok := strings.CutSuffix(e.Name(), ".json")
		var r record
		if ok && validSum(sum) && s.readMeta(sum, &r) == nil {
			if st, err := os.Lstat(s.content(sum)); err == nil && st.Mode().IsRegular() && st.Size() == r.Size && len(r.Owners) > 0 {
				for uid, at := range r.Owners {
					s.claim(sum, r.Size, uid, at)
				}
				continue
			}
		}
		os.Remove(filepath.Join(s.cfg.Dir, "meta", e.Name()))
		if ok && validSum(sum) {
			os.Remove(s.content(sum))
		}
	}
	contents, err := os.ReadDir(filepath.Join(s.cfg.Dir, "sha256"))
	if err != nil {
		return fmt.Errorf("artifact store: %w", err)
	}
	for _, e := range contents {
		if _, ok := s.items[e.Name()]; !ok {
			os.RemoveAll(filepath.Join(s.cfg.Dir, "sha256", e.Name()))
		}
	}
	return nil
}

// record is an item as its meta file holds it.
type record struct {
	Size int64
	// Owners maps each uid that produced it to when it last did.
	Owners map[uint32]time.Time
}

// recordJSON is a record in JSON: uids as strings.
type recordJSON struct {
	Size   int64                `json:"size"`
	Owners map[string]time.Time `json:"owners"`
}

func (s *Store) readMeta(sum string, r *record) error {
	b, err := os.ReadFile(s.meta(sum))
	if err != nil {
		return err
	}
	var j recordJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	r.Size, r.Owners = j.Size, map[uint32]time.Time{}
	for k, t := range j.Owners {
		uid, err := strconv.ParseUint(k, 10, 32)
		if err != nil {
			return err
		}
		r.Owners[uint32(uid)] = t
	}
	return nil
}

// writeMeta writes its record: a temporary file renamed into place.
func (s *Store) writeMeta(it *item) error {
	sum := it.sum
	r := recordJSON{Size: it.size, Owners: map[string]time.Time{}}
	for _, c := range it.claims {
		r.Owners[strconv.FormatUint(uint64(c.uid), 10)] = c.at
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Join(s.cfg.Dir, "tmp"), "meta-")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), s.meta(sum))
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// Writer stores one artifact's content: write it, then Commit (or Abort).
type Writer struct {
	s     *Store
	owner uint32
	f     *os.File
	h     hash.Hash
	n     int64
	ended bool
}

// Create begins an artifact that owner produces.
func (s *Store) Create(owner uint32) (*Writer, error) {
	f, err := os.CreateTemp(filepath.Join(s.cfg.Dir, "tmp"), "content-")
	if err != nil {
		return nil, fmt.Errorf("artifact store: %w", err)
	}
	return &Writer{s: s, owner: owner, f: f, h: sha256.New()}, nil
}

// Write adds to the content.
func (w *Writer) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.h.Write(p[:n])
	w.n += int64(n)
	return n, err
}

// Abort drops the content. It is a no-op after Commit.
func (w *Writer) Abort() {
	if w.ended {
		return
	}
	w.ended = true
	w.f.Close()
	os.Remove(w.f.Name())
}

// Commit stores the content, or finds it stored already, records that
// the owner produced it now, and returns its SHA-256 in hex. A new claim
// needs room under the quota: see the package's doc for who makes it.
func (w *Writer) Commit() (string, error) {
	if w.ended {
		return "", errors.New("artifact store: the artifact was committed or aborted already")
	}
	w.ended = true
	sum := hex.EncodeToString(w.h.Sum(nil))
	tmp := w.f.Name()
	defer os.Remove(tmp) // after the rename, a no-op
	if err := w.f.Close(); err != nil {
		return "", fmt.Errorf("artifact store: %w", err)
	}
	s := w.s
	now := s.cfg.Now()
	var doomed []string
	defer func() { s.remove(doomed) }() // after the lock is let go
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.deleting[sum] > 0 {
		// Evicted a moment ago: its files go before it comes again.
		s.gone.Wait()
	}
	it := s.items[sum]
	if it == nil || it.claimOf(w.owner) == nil {
		// A new claim, whether or not another uid has the content.
		need := w.n + Overhead
		if need > s.cfg.MaxBytes {
			return "", fmt.Errorf("%w (%d bytes)", ErrTooBig, s.cfg.MaxBytes)
		}
		doomed = s.fit(s.owners[w.owner], need, now, doomed)
		if i := slices.Index(doomed, sum); i >= 0 {
			// Room was made with another uid's claim on this very
			// content: its file stays, for this one.
			doomed = slices.Delete(doomed, i, i+1)
			s.undelete(sum)
		} else if s.items[sum] == nil {
			if err := os.Rename(tmp, s.content(sum)); err != nil {
				return "", fmt.Errorf("artifact store: %w", err)
			}
		}
	}
	it = s.claim(sum, w.n, w.owner, now)
	if err := s.writeMeta(it); err != nil {
		s.cfg.Log.Warn("artifact store: write a record", "sha256", sum, "err", err)
	}
	return sum, nil
}

// claim records that uid produced the content sum of size bytes at at,
// adding the item if it is new, and charges uid for it unless it held it
// already. Call with s.mu held.
func (s *Store) claim(sum string, size int64, uid uint32, at time.Time) *item {
	it, ok := s.items[sum]
	if !ok {
		it = &item{sum: sum, size: size}
		s.items[sum] = it
	}
	o := s.owners[uid]
	if c := it.claimOf(uid); c != nil {
		c.at = at
		s.ages.fix(c)
		o.claims.fix(c)
		return it
	}
	if o == nil {
		o = &owner{uid: uid, claims: indexed[*claim]{
			less: func(a, b *claim) bool { return a.at.Before(b.at) },
			pos:  func(c *claim) *int { return &c.ownPos },
			cmps: &s.examined,
		}}
		s.owners[uid] = o
		s.big.add(o)
	}
	c := &claim{uid: uid, it: it, at: at}
	it.claims = append(it.claims, c)
	s.ages.add(c)
	o.claims.add(c)
	o.bytes += it.cost()
	s.big.fix(o)
	s.bytes += it.cost()
	return it
}

// claimOf is uid's claim on it, or nil.
func (it *item) claimOf(uid uint32) *claim {
	for _, c := range it.claims {
		if c.uid == uid {
			return c
		}
	}
	return nil
}

// expired reports whether c's time is up at now.
func (s *Store) expired(c *claim, now time.Time) bool { return now.Sub(c.at) > s.cfg.TTL }

// expire drops the claims whose time is up at now, and the artifacts
// left with none, sweepBatch at a time under the lock.
func (s *Store) expire(now time.Time) {
	for more := true; more; {
		var doomed []string
		s.mu.Lock()
		for n := 0; ; n++ {
			c, ok := s.ages.least()
			if !ok || !s.expired(c, now) {
				more = false
				break
			}
			if n == sweepBatch {
				break
			}
			s.examined++
			doomed = s.drop(c, EvictExpired, doomed)
		}
		s.mu.Unlock()
		s.remove(doomed)
	}
}

// fit drops claims until need more bytes fit under the quota at now:
// expired claims first, then those of committer (nil: none), least
// recently produced first, then, when it has none left, those of the uid
// that holds the most bytes. It adds the hashes whose files are to be
// removed to doomed. Call with s.mu held.
func (s *Store) fit(committer *owner, need int64, now time.Time, doomed []string) []string {
	for s.bytes+need > s.cfg.MaxBytes {
		s.examined++
		if c, ok := s.ages.least(); ok && s.expired(c, now) {
			doomed = s.drop(c, EvictExpired, doomed)
			continue
		}
		o := committer
		if o == nil || o.claims.Len() == 0 {
			if o, _ = s.big.least(); o == nil {
				break
			}
		}
		c, _ := o.claims.least()
		doomed = s.drop(c, EvictQuota, doomed)
	}
	return doomed
}

// drop ends one claim, and its artifact when it was the last: it adds
// the hash to doomed, whose files remove deletes once the lock is let
// go. Call with s.mu held.
func (s *Store) drop(c *claim, reason string, doomed []string) []string {
	it := c.it
	s.ages.remove(c)
	o := s.owners[c.uid]
	o.claims.remove(c)
	o.bytes -= it.cost()
	if o.claims.Len() == 0 {
		s.big.remove(o)
		delete(s.owners, o.uid)
	} else {
		s.big.fix(o)
	}
	s.bytes -= it.cost()
	it.claims = slices.DeleteFunc(it.claims, func(x *claim) bool { return x == c })
	s.cfg.OnEvict(reason)
	if len(it.claims) > 0 {
		if err := s.writeMeta(it); err != nil {
			s.cfg.Log.Warn("artifact store: write a record", "sha256", it.sum, "err", err)
		}
		return doomed
	}
	delete(s.items, it.sum)
	s.deleting[it.sum]++
	return append(doomed, it.sum)
}

// undelete takes back the removal of sum's files that drop asked for.
// Call with s.mu held.
func (s *Store) undelete(sum string) {
	if s.deleting[sum]--; s.deleting[sum] == 0 {
		delete(s.deleting, sum)
	}
}

// remove deletes the files of the artifacts drop took out, without the
// lock. A reader that has one open reads on: its file is unlinked, not
// cut.
func (s *Store) remove(doomed []string) {
	if len(doomed) == 0 {
		return
	}
	for _, sum := range doomed {
		// The record first: content without one is dropped at the next
		// Open, should the daemon stop here.
		if err := os.Remove(s.meta(sum)); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.cfg.Log.Warn("artifact store: remove a record", "sha256", sum, "err", err)
		}
		if err := os.Remove(s.content(sum)); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.cfg.Log.Warn("artifact store: remove an artifact", "sha256", sum, "err", err)
		}
	}
	s.mu.Lock()
	for _, sum := range doomed {
		s.undelete(sum)
	}
	s.mu.Unlock()
	s.gone.Broadcast()
}

// Open opens the artifact sum for uid, which must have produced it (root
// may open any), and returns it with its size. Any other case is
// ErrNotFound. The caller closes the file.
func (s *Store) Open(uid uint32, sum string) (*os.File, int64, error) {
	if !validSum(sum) {
		return nil, 0, ErrNotFound
	}
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	it, ok := s.items[sum]
	if !ok {
		return nil, 0, ErrNotFound
	}
	if uid != 0 {
		c := it.claimOf(uid)
		if c == nil || s.expired(c, now) {
			return nil, 0, ErrNotFound
		}
	}
	fd, err := unix.Open(s.content(sum), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("artifact store: open %s: %w", sum, err)
	}
	return os.NewFile(uintptr(fd), sum), it.size, nil
}

// Stats is what counts against the quota: bytes (content plus Overhead
// of every claim) and claims, all uids' together. Content that several
// uids hold counts for each (it is stored once): the figures move with
// each commit exactly as they would if nobody else held it.
func (s *Store) Stats() (bytes int64, files int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes, s.ages.Len()
}

// Usage is what uid's artifacts count against the quota: bytes (content
// plus Overhead each) and artifacts, as if nobody else held them.
func (s *Store) Usage(uid uint32) (bytes int64, files int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.owners[uid]
	if o == nil {
		return 0, 0
	}
	return o.bytes, o.claims.Len()
}

// MaxBytes is the quota; TTL how long a claim lasts.
func (s *Store) MaxBytes() int64    { return s.cfg.MaxBytes }
func (s *Store) TTL() time.Duration { return s.cfg.TTL }
