// Package artifacts is cellblockd's artifact store: the content of the
// files runs wrote under /work/out, kept content-addressed under the state
// directory (sha256/HEX, root's, mode 0600), with a record of which uids
// produced each one and when (meta/HEX.json), which survives a restart.
//
// An artifact is readable only by a uid that produced it (root aside);
// to any other uid it does not exist. Each uid's claim expires a time to
// live after it last produced the artifact, and an artifact no uid claims
// is deleted; past the store's quota the least recently produced ones go
// first. Content is written to a temporary file and renamed into place, so
// a reader never sees half of one, and a reader holds its file open, so
// eviction never cuts a read short.
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
	"sort"
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
	// sweepEvery is how often expired claims are dropped.
	sweepEvery = time.Minute
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
	// MaxBytes is the quota: content plus Overhead per artifact.
	MaxBytes int64
	// TTL is how long a uid keeps an artifact after it last produced it.
	TTL time.Duration
	// OnEvict, if set, is told of each artifact deleted, and why
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
	bytes int64 // content plus Overhead of every item
}

// item is one artifact.
type item struct {
	Size int64 `json:"size"`
	// Owners maps each uid that produced it to when it last did.
	Owners map[uint32]time.Time `json:"owners"`
}

// produced is when any uid last produced it.
func (it *item) produced() time.Time {
	var t time.Time
	for _, at := range it.Owners {
		if at.After(t) {
			t = at
		}
	}
	return t
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
	s := &Store{cfg: cfg, items: map[string]*item{}, stop: make(chan struct{}), done: make(chan struct{})}
	if err := s.load(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.expire(cfg.Now())
	s.fit(0)
	s.mu.Unlock()
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
		s.mu.Lock()
		s.expire(s.cfg.Now())
		s.mu.Unlock()
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
		var it item
		if ok && validSum(sum) && s.readMeta(sum, &it) == nil {
			if st, err := os.Lstat(s.content(sum)); err == nil && st.Mode().IsRegular() && st.Size() == it.Size && len(it.Owners) > 0 {
				s.items[sum] = &it
				s.bytes += it.Size + Overhead
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

// record is an item as its meta file holds it: uids as strings.
type record struct {
	Size   int64                `json:"size"`
	Owners map[string]time.Time `json:"owners"`
}

func (s *Store) readMeta(sum string, it *item) error {
	b, err := os.ReadFile(s.meta(sum))
	if err != nil {
		return err
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return err
	}
	it.Size, it.Owners = r.Size, map[uint32]time.Time{}
	for k, t := range r.Owners {
		uid, err := strconv.ParseUint(k, 10, 32)
		if err != nil {
			return err
		}
		it.Owners[uint32(uid)] = t
	}
	return nil
}

// writeMeta writes it's record: a temporary file renamed into place.
func (s *Store) writeMeta(sum string, it *item) error {
	r := record{Size: it.Size, Owners: map[string]time.Time{}}
	for uid, t := range it.Owners {
		r.Owners[strconv.FormatUint(uint64(uid), 10)] = t
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
// the owner produced it now, and returns its SHA-256 in hex. It makes
// room under the quota, expired artifacts first, then the least recently
// produced.
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
	s.mu.Lock()
	defer s.mu.Unlock()
	it, ok := s.items[sum]
	if !ok {
		need := w.n + Overhead
		if need > s.cfg.MaxBytes {
			return "", fmt.Errorf("%w (%d bytes)", ErrTooBig, s.cfg.MaxBytes)
		}
		s.expire(now)
		s.fit(need)
		if err := os.Rename(tmp, s.content(sum)); err != nil {
			return "", fmt.Errorf("artifact store: %w", err)
		}
		it = &item{Size: w.n, Owners: map[uint32]time.Time{}}
		s.items[sum] = it
		s.bytes += need
	}
	it.Owners[w.owner] = now
	if err := s.writeMeta(sum, it); err != nil {
		s.cfg.Log.Warn("artifact store: write a record", "sha256", sum, "err", err)
	}
	return sum, nil
}

// expire drops the claims older than the TTL at now, and the artifacts
// left with none. Call with s.mu held.
func (s *Store) expire(now time.Time) {
	for sum, it := range s.items {
		changed := false
		for uid, at := range it.Owners {
			if now.Sub(at) > s.cfg.TTL {
				delete(it.Owners, uid)
				changed = true
			}
		}
		switch {
		case len(it.Owners) == 0:
			s.evict(sum, EvictExpired)
		case changed:
			_ = s.writeMeta(sum, it)
		}
	}
}

// fit evicts the least recently produced artifacts until need more bytes
// fit under the quota. Call with s.mu held.
func (s *Store) fit(need int64) {
	if s.bytes+need <= s.cfg.MaxBytes {
		return
	}
	sums := make([]string, 0, len(s.items))
	for sum := range s.items {
		sums = append(sums, sum)
	}
	sort.Slice(sums, func(i, j int) bool { return s.items[sums[i]].produced().Before(s.items[sums[j]].produced()) })
	for _, sum := range sums {
		if s.bytes+need <= s.cfg.MaxBytes {
			return
		}
		s.evict(sum, EvictQuota)
	}
}

// evict deletes one artifact. Call with s.mu held. A reader that has it
// open reads on: its file is unlinked, not cut.
func (s *Store) evict(sum, reason string) {
	it, ok := s.items[sum]
	if !ok {
		return
	}
	delete(s.items, sum)
	s.bytes -= it.Size + Overhead
	if err := os.Remove(s.meta(sum)); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.cfg.Log.Warn("artifact store: remove a record", "sha256", sum, "err", err)
	}
	if err := os.Remove(s.content(sum)); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.cfg.Log.Warn("artifact store: remove an artifact", "sha256", sum, "err", err)
	}
	s.cfg.OnEvict(reason)
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
		at, mine := it.Owners[uid]
		if !mine || now.Sub(at) > s.cfg.TTL {
			return nil, 0, ErrNotFound
		}
	}
	fd, err := unix.Open(s.content(sum), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("artifact store: open %s: %w", sum, err)
	}
	return os.NewFile(uintptr(fd), sum), it.Size, nil
}

// Stats is what the store holds: bytes (content plus Overhead each) and
// artifacts.
func (s *Store) Stats() (bytes int64, files int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes, len(s.items)
}

// MaxBytes is the quota; TTL how long a claim lasts.
func (s *Store) MaxBytes() int64    { return s.cfg.MaxBytes }
func (s *Store) TTL() time.Duration { return s.cfg.TTL }
