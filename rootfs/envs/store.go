package envs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellblock/cellblock/rootfs"
)

// Errors of the store.
var (
	// ErrNotFound: no environment has that ID.
	ErrNotFound = errors.New("no such environment")
	// ErrInUse: the environment is attached to a run and cannot be removed.
	ErrInUse = errors.New("environment is in use")
	// ErrClosed: the store was closed (the daemon is shutting down).
	ErrClosed = errors.New("environment store is closed")
)

// metaFormat is the version of meta.json; entries of another version are
// deleted by Open.
const metaFormat = 1

// Names inside the store directory.
const (
	metaFileName = "meta.json"
	siteDirName  = "site-packages"
	buildPrefix  = ".build-"
	trashPrefix  = ".trash-"
)

// Config configures a Store.
type Config struct {
	// Dir is the store's directory, usually <state-dir>/envs. It is created
	// with mode 0755: build jails reach their directory through it.
	Dir string
	// Budget is the most disk space all environments may take, in bytes;
	// beyond it the least recently used ones not in use are deleted. 0
	// keeps no environment once no run uses it.
	Budget int64
	// MaxBuilds is how many builds may run at once; 0 means 1.
	MaxBuilds int
	// Log receives builds, evictions and removals; nil discards.
	Log *slog.Logger
}

// BuildFunc installs an environment's requirements into site, a new empty
// directory on the host that becomes the environment's site-packages. It
// must write nothing else. ctx ends when the store is closed.
type BuildFunc func(ctx context.Context, site string) (BuildResult, error)

// BuildResult is what a BuildFunc reports besides the installed files.
type BuildResult struct {
	// Installer names the installer and its version, e.g. "pip 23.2.1".
	Installer string
	// WheelHashes maps normalized project names to the hashes of the
	// wheels installed ("sha256:<hex>"), when the installer said.
	WheelHashes map[string]string
}

// Info describes one environment.
type Info struct {
	ID           string
	Spec         Spec
	Installer    string
	Packages     []Package
	SizeBytes    int64
	Built        time.Time
	BuildSeconds float64
	LastUsed     time.Time
	// InUse is how many runs hold the environment now.
	InUse int
	// Preload are the modules prestarted jails of this environment
	// import while they wait (SetPreload); not part of its key.
	Preload []string
}

// Stats summarizes the store.
type Stats struct {
	Entries int
	Bytes   int64
	Budget  int64
	// Builds counts the environments this store built since Open.
	Builds int64
}

// metadata is meta.json.
type metadata struct {
	Format       int       `json:"format"`
	ID           string    `json:"id"`
	Spec         Spec      `json:"spec"`
	Installer    string    `json:"installer"`
	Packages     []Package `json:"packages"`
	SizeBytes    int64     `json:"size_bytes"`
	Built        time.Time `json:"built"`
	BuildSeconds float64   `json:"build_seconds"`
	// Preload is set after the build (SetPreload), so it is not in the
	// key; readers of format 1 without it see none.
	Preload []string `json:"preload,omitempty"`
}

// entry is one installed environment.
type entry struct {
	meta     metadata
	dir      string
	refs     int
	lastUsed time.Time
}

func (e *entry) info() Info {
	return Info{
		ID: e.meta.ID, Spec: e.meta.Spec, Installer: e.meta.Installer, Packages: e.meta.Packages,
		SizeBytes: e.meta.SizeBytes, Built: e.meta.Built, BuildSeconds: e.meta.BuildSeconds,
		LastUsed: e.lastUsed, InUse: e.refs, Preload: slices.Clone(e.meta.Preload),
	}
}

// flight is one build in progress; every Acquire of its key waits on it.
type flight struct {
	done    chan struct{}
	waiters int    // Acquires counting on the result; set before done closes
	entry   *entry // the result, when err is nil
	err     error
}

// Store is the environment cache. It is safe for concurrent use. One
// daemon owns a store directory.
type Store struct {
	dir    string
	budget int64
	log    *slog.Logger
	sem    chan struct{} // bounds concurrent builds

	ctx    context.Context // builds' context, ended by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // builds in progress

	mu      sync.Mutex
	envs    map[string]*entry
	flights map[string]*flight
	builds  int64
	closed  bool
}

// Open opens the store in cfg.Dir, deletes what interrupted builds and
// removals left, loads the environments there and evicts down to the
// budget.
func Open(cfg Config) (*Store, error) {
	if !filepath.IsAbs(cfg.Dir) {
		return nil, fmt.Errorf("environment store %q: not an absolute path", cfg.Dir)
	}
	if cfg.Budget < 0 {
		return nil, fmt.Errorf("environment store: negative budget %d", cfg.Budget)
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("environment store: %w", err)
	}
	if err := os.Chmod(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("environment store: %w", err)
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Store{
		dir: cfg.Dir, budget: cfg.Budget, log: log,
		sem: make(chan struct{}, max(cfg.MaxBuilds, 1)),
		ctx: ctx, cancel: cancel,
		envs: make(map[string]*entry), flights: make(map[string]*flight),
	}
	if err := s.load(); err != nil {
		cancel()
		return nil, err
	}
	s.mu.Lock()
	trash := s.evictLocked()
	s.mu.Unlock()
	s.discard(trash)
	return s, nil
}

// load reads the store directory.
func (s *Store) load() error {
	dirents, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("environment store: %w", err)
	}
	for _, d := range dirents {
		name, p := d.Name(), filepath.Join(s.dir, d.Name())
		if strings.HasPrefix(name, buildPrefix) || strings.HasPrefix(name, trashPrefix) {
			if err := rootfs.RemoveTree(p); err != nil {
				return fmt.Errorf("environment store: remove leftover %s: %w", name, err)
			}
			continue
		}
		if !validID(name) || !d.IsDir() {
			continue
		}
		e, err := loadEntry(p)
		if err != nil || e.meta.ID != name {
			s.log.Warn("deleting unreadable environment", "env", name, "err", err)
			if err := rootfs.RemoveTree(p); err != nil {
				return fmt.Errorf("environment store: remove %s: %w", name, err)
			}
			continue
		}
		s.envs[name] = e
	}
	return nil
}

func loadEntry(dir string) (*entry, error) {
	b, err := readRegular(filepath.Join(dir, metaFileName))
	if err != nil {
		return nil, err
	}
	var m metadata
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	if m.Format != metaFormat {
		return nil, fmt.Errorf("format %d, want %d", m.Format, metaFormat)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, err
	}
	return &entry{meta: m, dir: dir, lastUsed: fi.ModTime()}, nil
}

// Close cancels builds in progress and waits for them. Leases stay valid.
func (s *Store) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
}

// Lease is an environment held by a run: it is not evicted or removed
// until released.
type Lease struct {
	// Env describes the environment.
	Env Info
	// Site is the host path of its site-packages directory.
	Site string
	// CacheHit is true when the environment existed when asked for: no
	// build was started or waited for.
	CacheHit bool

	once    sync.Once
	release func()
}

// Release gives the environment back; it may be called more than once.
func (l *Lease) Release() { l.once.Do(l.release) }

// Acquire returns the environment for spec, building it with build unless
// it exists. Concurrent calls for one key share one build; if it fails,
// each gets its error (failures are not cached). Cancelling ctx stops the
// wait, not the build, whose result the next request can use.
func (s *Store) Acquire(ctx context.Context, spec Spec, build BuildFunc) (*Lease, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	id := spec.ID()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	if e := s.envs[id]; e != nil {
		e.refs++
		s.touch(e)
		l := s.lease(e, true)
		s.mu.Unlock()
		return l, nil
	}
	f := s.flights[id]
	if f == nil {
		f = &flight{done: make(chan struct{})}
		s.flights[id] = f
		s.wg.Add(1)
		go s.build(f, id, spec, build)
	}
	f.waiters++
	s.mu.Unlock()

	select {
	case <-f.done:
	case <-ctx.Done():
		s.mu.Lock()
		select {
		case <-f.done:
			// It finished meanwhile and counted this call.
			s.mu.Unlock()
			if f.err == nil {
				s.release(f.entry)
			}
		default:
			f.waiters--
			s.mu.Unlock()
		}
		return nil, ctx.Err()
	}
	if f.err != nil {
		return nil, f.err
	}
	return s.lease(f.entry, false), nil
}

// lease wraps a reference already counted in e.refs.
func (s *Store) lease(e *entry, hit bool) *Lease {
	return &Lease{
		Env:      e.info(),
		Site:     filepath.Join(e.dir, siteDirName),
		CacheHit: hit,
		release:  func() { s.release(e) },
	}
}

// touch records a use of e, in memory and as the directory's
// modification time. The caller holds s.mu, or e is not shared yet.
func (s *Store) touch(e *entry) {
	now := time.Now()
	e.lastUsed = now
	if err := os.Chtimes(e.dir, now, now); err != nil {
		s.log.Warn("record environment use", "env", e.meta.ID, "err", err)
	}
}

func (s *Store) release(e *entry) {
	s.mu.Lock()
	e.refs--
	var trash []string
	if e.refs == 0 {
		trash = s.evictLocked()
	}
	s.mu.Unlock()
	s.discard(trash)
}

// build runs one flight: builds, installs the result for its waiters and
// evicts what no longer fits.
func (s *Store) build(f *flight, id string, spec Spec, build BuildFunc) {
	defer s.wg.Done()
	e, err := s.buildEntry(id, spec, build)
	s.mu.Lock()
	delete(s.flights, id)
	var trash []string
	if err == nil {
		e.refs = f.waiters
		s.envs[id] = e
		s.builds++
		f.entry = e
		trash = s.evictLocked()
	}
	f.err = err
	close(f.done)
	s.mu.Unlock()
	s.discard(trash)
}

// buildEntry builds the environment in a temporary directory, records
// what was installed, seals the tree and renames it into place.
func (s *Store) buildEntry(id string, spec Spec, build BuildFunc) (_ *entry, err error) {
	select {
	case s.sem <- struct{}{}:
	case <-s.ctx.Done():
		return nil, ErrClosed
	}
	defer func() { <-s.sem }()
	start := time.Now()
	tmp, err := os.MkdirTemp(s.dir, buildPrefix+id+"-")
	if err != nil {
		return nil, fmt.Errorf("build environment %s: %w", id, err)
	}
	defer func() {
		if err != nil {
			if rerr := rootfs.RemoveTree(tmp); rerr != nil {
				s.log.Error("remove failed environment build", "env", id, "err", rerr)
			}
		}
	}()
	site := filepath.Join(tmp, siteDirName)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("build environment %s: %w", id, err)
	}
	if err := os.Mkdir(site, 0o755); err != nil {
		return nil, fmt.Errorf("build environment %s: %w", id, err)
	}
	s.log.Info("building environment", "env", id, "python", spec.Python, "requirements", spec.Requirements, "policy", spec.Policy)
	res, err := build(s.ctx, site)
	if err != nil {
		return nil, err
	}
	pkgs, err := readInstalled(site, res.WheelHashes)
	if err != nil {
		return nil, fmt.Errorf("build environment %s: %w", id, err)
	}
	size, err := treeSize(tmp)
	if err != nil {
		return nil, fmt.Errorf("build environment %s: size: %w", id, err)
	}
	m := metadata{
		Format: metaFormat, ID: id, Spec: spec, Installer: res.Installer, Packages: pkgs,
		SizeBytes: size, Built: time.Now().UTC(), BuildSeconds: time.Since(start).Seconds(),
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(tmp, metaFileName), append(data, '\n'), 0o444); err != nil {
		return nil, fmt.Errorf("build environment %s: %w", id, err)
	}
	if err := rootfs.Seal(tmp); err != nil {
		return nil, fmt.Errorf("build environment %s: make read-only: %w", id, err)
	}
	dst := filepath.Join(s.dir, id)
	if err := os.Rename(tmp, dst); err != nil {
		return nil, fmt.Errorf("build environment %s: install: %w", id, err)
	}
	e := &entry{meta: m, dir: dst}
	s.touch(e)
	s.log.Info("environment built", "env", id, "installer", res.Installer, "packages", len(pkgs),
		"size_bytes", size, "seconds", m.BuildSeconds)
	return e, nil
}

// evictLocked takes the least recently used environments out of the store
// until the rest fit the budget, and returns their directories for
// discard.
func (s *Store) evictLocked() []string {
	us := make([]usage, 0, len(s.envs))
	for id, e := range s.envs {
		us = append(us, usage{id: id, size: e.meta.SizeBytes, lastUsed: e.lastUsed, inUse: e.refs > 0})
	}
	var trash []string
	for _, id := range evictions(us, s.budget) {
		e := s.envs[id]
		p, err := s.retireLocked(e)
		if err != nil {
			s.log.Error("evict environment", "env", id, "err", err)
			continue
		}
		s.log.Info("evicted environment", "env", id, "size_bytes", e.meta.SizeBytes, "budget", s.budget)
		trash = append(trash, p)
	}
	return trash
}

// retireLocked renames e's directory out of the store's namespace and
// forgets e. The caller deletes the returned path with discard, outside
// the lock.
func (s *Store) retireLocked(e *entry) (string, error) {
	p := filepath.Join(s.dir, trashPrefix+e.meta.ID+"-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	if err := os.Rename(e.dir, p); err != nil {
		return "", err
	}
	delete(s.envs, e.meta.ID)
	return p, nil
}

func (s *Store) discard(paths []string) {
	for _, p := range paths {
		if err := rootfs.RemoveTree(p); err != nil {
			s.log.Error("delete environment", "path", p, "err", err)
		}
	}
}

// List describes every environment, most recently used first.
func (s *Store) List() []Info {
	s.mu.Lock()
	infos := make([]Info, 0, len(s.envs))
	for _, e := range s.envs {
		infos = append(infos, e.info())
	}
	s.mu.Unlock()
	slices.SortFunc(infos, func(a, b Info) int {
		if c := b.LastUsed.Compare(a.LastUsed); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return infos
}

// Remove deletes the environment with the given ID. It fails with
// ErrNotFound or, while a run holds it, ErrInUse.
func (s *Store) Remove(id string) (Info, error) {
	if !validID(id) {
		return Info{}, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	s.mu.Lock()
	e := s.envs[id]
	if e == nil {
		s.mu.Unlock()
		return Info{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if e.refs > 0 {
		s.mu.Unlock()
		return Info{}, fmt.Errorf("%w: %s is attached to %d run(s)", ErrInUse, id, e.refs)
	}
	info := e.info()
	p, err := s.retireLocked(e)
	s.mu.Unlock()
	if err != nil {
		return Info{}, fmt.Errorf("remove environment %s: %w", id, err)
	}
	s.log.Info("removed environment", "env", id)
	s.discard([]string{p})
	return info, nil
}

// Prune deletes every environment no run holds and returns what it
// deleted.
func (s *Store) Prune() ([]Info, error) {
	s.mu.Lock()
	var removed []Info
	var trash []string
	var errs []error
	for _, e := range s.envs {
		if e.refs > 0 {
			continue
		}
		info := e.info()
		p, err := s.retireLocked(e)
		if err != nil {
			errs = append(errs, fmt.Errorf("remove environment %s: %w", info.ID, err))
			continue
		}
		removed = append(removed, info)
		trash = append(trash, p)
	}
	s.mu.Unlock()
	s.discard(trash)
	if len(removed) > 0 {
		s.log.Info("pruned environments", "count", len(removed))
	}
	slices.SortFunc(removed, func(a, b Info) int { return strings.Compare(a.ID, b.ID) })
	return removed, errors.Join(errs...)
}

// SetPreload replaces the preload list of the environment with the given
// ID and returns its description. The list is the caller's to check; it is
// stored in meta.json, rewritten whole and renamed into place, so that a
// crash leaves the old list or the new one. It fails with ErrNotFound.
func (s *Store) SetPreload(id string, mods []string) (Info, error) {
	if !validID(id) {
		return Info{}, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.envs[id]
	if e == nil {
		return Info{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if len(mods) == 0 {
		mods = nil
	}
	if slices.Equal(e.meta.Preload, mods) {
		return e.info(), nil
	}
	m := e.meta
	m.Preload = slices.Clone(mods)
	if err := writeMeta(e.dir, m); err != nil {
		return Info{}, fmt.Errorf("set the preload list of environment %s: %w", id, err)
	}
	e.meta = m
	s.log.Info("environment preload list", "env", id, "preload", mods)
	return e.info(), nil
}

// writeMeta replaces meta.json in dir, a sealed (read-only) environment
// directory, which it opens for writing only meanwhile.
func writeMeta(dir string, m metadata) (err error) {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	defer func() {
		if cerr := os.Chmod(dir, 0o555); err == nil {
			err = cerr
		}
	}()
	tmp := filepath.Join(dir, "."+metaFileName+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW, 0o444)
	if err != nil {
		return err
	}
	_, err = f.Write(append(data, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, metaFileName))
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// Stats summarizes the store.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{Entries: len(s.envs), Budget: s.budget, Builds: s.builds}
	for _, e := range s.envs {
		st.Bytes += e.meta.SizeBytes
	}
	return st
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }
