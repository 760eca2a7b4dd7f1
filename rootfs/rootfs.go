// Package rootfs owns the store of read-only Python root filesystems that
// jails run on, and lays down the other read-only trees the daemon mounts
// into jails (InstallFiles: the runner's files).
//
// A rootfs is a minimal tree built from a CPython interpreter on the host:
// the interpreter binary at /usr/bin/pythonX.Y (with python3 and python
// links), its standard library relocated to /usr/lib/pythonX.Y (without
// installed packages, test suites or Tk, with compiled bytecode), the
// shared libraries it and its extension modules need (found by reading
// ELF headers as the dynamic loader would) and the loader itself in
// /usr/lib/<multiarch>, a minimal /etc (passwd, group, hosts, nsswitch.conf,
// an empty resolv.conf, the CA bundle), time zone data, and empty
// mountpoints for the jail (layout.MountPoints: /tmp, /work, /dev, /proc,
// the init's and the runner's directories). What the jail expects to find
// (the mountpoints, the /etc files and the accounts in them) is package
// nsjail/layout's; this package only lays it down.
//
// The store directory holds one directory per rootfs, named by its ID:
//
//	<store>/default             symlink to the default rootfs's ID
//	<store>/<id>/meta.json      what was built, from what, when
//	<store>/<id>/root/          the tree (Python.Dir), mounted read-only as /
//
// Builds happen in a temporary directory in the store and are renamed into
// place, so a rootfs is either complete or absent. Built trees are never
// modified: they are root-owned, directories 0555, files 0444 or 0555, all
// readable by any uid so that a jail's user in a user namespace can use
// them. A rebuilt rootfs replaces the old one atomically; the old tree is
// deleted by the next Open, since a running jail may still have it
// mounted. A build that fails or is cancelled removes its partial tree.
//
// The package must not mount anything, run untrusted code (it runs only
// host interpreters the operator chose, and the built interpreter in a
// chroot as nobody to check it), or copy host state that is secret or
// host-specific into a rootfs: no shadow, machine-id, hostname or host
// site-packages.
package rootfs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultInterpreter is the interpreter EnsureDefault builds from, looked
// up on PATH.
const DefaultInterpreter = "python3"

// formatVersion is the layout version of a built rootfs. Entries of
// another version are ignored by List and Pick and rebuilt when their
// interpreter is imported again (Upgrade does that for all of them).
// Version 2 adds the runner's mount point (layout.RunnerDir).
const formatVersion = 2

// Names inside the store directory.
const (
	metaFileName  = "meta.json"
	treeDirName   = "root"
	defaultLink   = "default"
	lockFileName  = ".lock"
	buildPrefix   = ".build-"
	retiredPrefix = ".retired-"
	linkTmpPrefix = ".default-"
)

// Python describes one rootfs in the store.
type Python struct {
	ID         string // stable, filesystem-safe, e.g. "cpython-3.12.1" or "cpython-3.12.1-2"
	Version    string // "3.12.1" (pre-releases like "3.13.0rc1")
	Dir        string // absolute host path of the tree, mounted read-only as /
	Executable string // path inside the rootfs: always "/usr/bin/python3"
	Source     string // the host interpreter it was built from (symlink-resolved)
	ABI        string // sysconfig SOABI, e.g. "cpython-312-x86_64-linux-gnu"
	Default    bool
	// PipWheel is the path inside the rootfs of the newest pip wheel that
	// ensurepip bundles ("" if none), for running pip as
	// `python <PipWheel>/pip ...`.
	PipWheel string
}

// metadata is meta.json.
type metadata struct {
	Format       int         `json:"format"`
	ID           string      `json:"id"`
	Version      string      `json:"version"`
	Executable   string      `json:"executable"`
	Source       string      `json:"source"`
	SourceStamp  sourceStamp `json:"source_stamp"`
	ABI          string      `json:"abi"`
	PipWheel     string      `json:"pip_wheel,omitempty"`
	Built        time.Time   `json:"built"`
	BuildSeconds float64     `json:"build_seconds"`
	Libraries    []string    `json:"libraries"`
	Dropped      []string    `json:"dropped_modules,omitempty"`
}

// Store is the rootfs store. Its methods are safe for concurrent use;
// builds hold a lock on the store directory, so two processes sharing one
// do not build at the same time either.
type Store struct {
	dir string

	mu  sync.Mutex
	log *slog.Logger
	// listed is list's last answer, for the store directory as stamped
	// (see list); s.mu guards both.
	listed      []Python
	listedStamp dirStamp
}

// dirStamp tells a directory's versions apart: an entry added, removed or
// renamed (every change of the store: a rootfs moved in or out, the
// default link replaced) changes its ctime and mtime.
type dirStamp struct {
	ino          uint64
	mtime, ctime int64
}

// racyStamp is how recent a stamp may be and still not be trusted: a
// filesystem's timestamps are as coarse as the kernel's tick (4 ms at HZ
// 250), so a change in the same tick as a listing keeps the stamp it saw.
const racyStamp = 100 * time.Millisecond

// Open opens the store at dir (usually <state-dir>/rootfs), creating it
// and any missing parents with mode 0755, and removes what interrupted
// builds and replacements left behind.
func Open(dir string) (*Store, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("open rootfs store %s: %w", dir, err)
	}
	if err := mkdirAllMode(abs, 0o755); err != nil {
		return nil, fmt.Errorf("open rootfs store %s: %w", dir, err)
	}
	s := &Store{dir: abs, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	entries, err := os.ReadDir(abs)
	if err != nil {
		return nil, fmt.Errorf("open rootfs store %s: %w", dir, err)
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, buildPrefix) || strings.HasPrefix(name, retiredPrefix) || strings.HasPrefix(name, linkTmpPrefix) {
			if err := RemoveTree(filepath.Join(abs, name)); err != nil {
				return nil, fmt.Errorf("open rootfs store %s: remove leftover: %w", dir, err)
			}
		}
	}
	return s, nil
}

// mkdirAllMode is os.MkdirAll with an exact mode (whatever the umask) on
// the directories it creates; existing ones are left alone.
func mkdirAllMode(dir string, mode os.FileMode) error {
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", dir)
		}
		return nil
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := mkdirAllMode(parent, mode); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, mode); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return os.Chmod(dir, mode)
}

// SetLogger sets where the store logs builds and their warnings; the
// default (and nil) discards.
func (s *Store) SetLogger(l *slog.Logger) {
	if l == nil {
		l = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = l
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// lock takes the store's cross-process lock.
func (s *Store) lock() (func(), error) {
	f, err := os.OpenFile(filepath.Join(s.dir, lockFileName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock rootfs store: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock rootfs store: %w", err)
	}
	return func() { f.Close() }, nil
}

// EnsureDefault returns the default rootfs, building it from the host's
// python3 (DefaultInterpreter on PATH) when the store is empty. If the
// store has rootfses but none is marked default (its default was removed),
// the highest version becomes the default.
func (s *Store) EnsureDefault(ctx context.Context) (Python, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ps, err := s.list()
	if err != nil {
		return Python{}, err
	}
	for _, p := range ps {
		if p.Default {
			return p, nil
		}
	}
	if p, ok := best(ps); ok {
		if err := s.setDefault(p.ID); err != nil {
			return Python{}, err
		}
		p.Default = true
		return p, nil
	}
	h, err := probe(ctx, DefaultInterpreter)
	if err != nil {
		return Python{}, fmt.Errorf("build default rootfs: %w", err)
	}
	p, err := s.importProbed(ctx, h)
	if err != nil {
		return Python{}, fmt.Errorf("build default rootfs: %w", err)
	}
	return p, nil
}

// Upgrade rebuilds every rootfs of an older format from the interpreter
// it was built from, under the same ID, and returns the IDs it rebuilt.
// One whose interpreter is gone stays as it is (unusable, and listed by
// nobody) and is reported in the error, which does not stop the others.
func (s *Store) Upgrade(ctx context.Context) ([]string, error) {
	s.mu.Lock()
	metas, err := s.readMetas()
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	var done []string
	var errs []error
	for _, m := range metas {
		if m.Format == formatVersion {
			continue
		}
		if _, err := s.Import(ctx, m.Source); err != nil {
			errs = append(errs, fmt.Errorf("upgrade rootfs %s: %w", m.ID, err))
			continue
		}
		done = append(done, m.ID)
	}
	return done, errors.Join(errs...)
}

// Import builds a rootfs from the interpreter at pythonPath (a binary, a
// symlink, a shim script such as pyenv's, or a name looked up on PATH) and
// records it. The first rootfs in a store becomes its default.
//
// A rootfs is identified by (real interpreter path, version, ABI).
// Importing an interpreter that is already stored returns the stored
// rootfs unchanged, unless the interpreter binary changed since (size or
// modification time, e.g. a distribution update) or the store's layout
// format changed: then it is rebuilt and atomically replaces the old one
// under the same ID. Another interpreter of an already stored version
// (say a pyenv 3.11.7 and a /usr/local 3.11.7) gets its own rootfs whose
// ID has a numeric suffix ("cpython-3.11.7-2").
func (s *Store) Import(ctx context.Context, pythonPath string) (Python, error) {
	h, err := probe(ctx, pythonPath)
	if err != nil {
		return Python{}, fmt.Errorf("import %s: %w", pythonPath, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := s.importProbed(ctx, h)
	if err != nil {
		return Python{}, fmt.Errorf("import %s: %w", pythonPath, err)
	}
	return p, nil
}

// importProbed does Import's work; s.mu is held.
func (s *Store) importProbed(ctx context.Context, h *hostPython) (Python, error) {
	unlock, err := s.lock()
	if err != nil {
		return Python{}, err
	}
	defer unlock()
	stamp, err := stampOf(h.Executable)
	if err != nil {
		return Python{}, err
	}
	version := h.versionString()
	metas, err := s.readMetas()
	if err != nil {
		return Python{}, err
	}
	id := ""
	for _, m := range metas {
		if m.Source != h.Executable || m.Version != version || m.ABI != h.SOABI {
			continue
		}
		if m.Format == formatVersion && m.SourceStamp.Size == stamp.Size && m.SourceStamp.ModTime.Equal(stamp.ModTime) {
			return s.python(m, s.defaultID()), nil
		}
		id = m.ID // rebuild in place
	}
	if id == "" {
		if id, err = s.newID("cpython-" + version); err != nil {
			return Python{}, err
		}
	}
	m, tmp, err := s.build(ctx, h, id, stamp)
	if err != nil {
		return Python{}, err
	}
	if err := s.install(tmp, id); err != nil {
		RemoveTree(tmp)
		return Python{}, err
	}
	def := s.defaultID()
	if def == "" {
		if err := s.setDefault(id); err != nil {
			return Python{}, err
		}
		def = id
	}
	s.log.Info("rootfs built", "id", id, "source", h.Executable, "seconds", m.BuildSeconds, "dropped_modules", m.Dropped)
	return s.python(m, def), nil
}

// newID returns base, or base-2, base-3, ... whichever is unused.
func (s *Store) newID(base string) (string, error) {
	for n := 1; ; n++ {
		id := base
		if n > 1 {
			id = base + "-" + strconv.Itoa(n)
		}
		if _, err := os.Lstat(filepath.Join(s.dir, id)); errors.Is(err, fs.ErrNotExist) {
			return id, nil
		} else if err != nil {
			return "", fmt.Errorf("choose rootfs id: %w", err)
		}
	}
}

// build builds the rootfs in a new temporary directory of the store and
// returns its metadata and that directory, ready to be installed.
func (s *Store) build(ctx context.Context, h *hostPython, id string, stamp sourceStamp) (*metadata, string, error) {
	start := time.Now()
	tmp, err := os.MkdirTemp(s.dir, buildPrefix+id+"-")
	if err != nil {
		return nil, "", fmt.Errorf("build rootfs %s: %w", id, err)
	}
	m, err := s.buildIn(ctx, tmp, h, id, stamp, start)
	if err != nil {
		RemoveTree(tmp)
		return nil, "", fmt.Errorf("build rootfs %s from %s: %w", id, h.Executable, err)
	}
	return m, tmp, nil
}

func (s *Store) buildIn(ctx context.Context, tmp string, h *hostPython, id string, stamp sourceStamp, start time.Time) (*metadata, error) {
	b, err := newBuilder(h, filepath.Join(tmp, treeDirName), s.log)
	if err != nil {
		return nil, err
	}
	if err := b.run(ctx); err != nil {
		return nil, err
	}
	m := &metadata{
		Format:       formatVersion,
		ID:           id,
		Version:      h.versionString(),
		Executable:   Executable,
		Source:       h.Executable,
		SourceStamp:  stamp,
		ABI:          h.SOABI,
		PipWheel:     b.pipWheel,
		Built:        time.Now().UTC(),
		BuildSeconds: time.Since(start).Seconds(),
		Libraries:    b.libraries,
		Dropped:      b.dropped,
	}
	if err := writeMeta(filepath.Join(tmp, metaFileName), m); err != nil {
		return nil, err
	}
	if err := os.Chmod(tmp, dirMode); err != nil {
		return nil, err
	}
	return m, nil
}

func writeMeta(path string, m *metadata) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("encode metadata: %w", err)
	}
	if err := writeFile(path, string(data)+"\n", fileMode); err != nil {
		return fmt.Errorf("write metadata: %w", err)
	}
	return nil
}

func readMeta(path string) (*metadata, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := &metadata{}
	if err := json.Unmarshal(data, m); err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	return m, nil
}

// install moves a finished build to <store>/<id>. An existing rootfs of
// that ID is swapped out atomically (renameat2 RENAME_EXCHANGE) and
// retired: a jail may still have it mounted, so it is deleted by the next
// Open.
func (s *Store) install(tmp, id string) error {
	dst := filepath.Join(s.dir, id)
	if _, err := os.Lstat(dst); errors.Is(err, fs.ErrNotExist) {
		if err := os.Rename(tmp, dst); err != nil {
			return fmt.Errorf("install rootfs %s: %w", id, err)
		}
		return nil
	}
	if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dst, unix.RENAME_EXCHANGE); err != nil {
		// Filesystems without RENAME_EXCHANGE: retire, then rename.
		if err := s.retire(id); err != nil {
			return err
		}
		if err := os.Rename(tmp, dst); err != nil {
			return fmt.Errorf("install rootfs %s: %w", id, err)
		}
		return nil
	}
	// tmp now holds the old tree. Had this rename failed, its build name
	// would get it deleted by the next Open all the same.
	if err := os.Rename(tmp, filepath.Join(s.dir, retiredPrefix+filepath.Base(tmp))); err != nil {
		s.log.Warn("rootfs: could not rename replaced tree", "id", id, "err", err)
	}
	return nil
}

// retire moves <store>/<id> out of the store's namespace for deletion by
// the next Open.
func (s *Store) retire(id string) error {
	name := retiredPrefix + id + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if err := os.Rename(filepath.Join(s.dir, id), filepath.Join(s.dir, name)); err != nil {
		return fmt.Errorf("retire rootfs %s: %w", id, err)
	}
	return nil
}

// readMetas reads the metadata of every rootfs in the store, whatever its
// format. Unreadable entries are logged and skipped.
func (s *Store) readMetas() ([]*metadata, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("read rootfs store: %w", err)
	}
	var metas []*metadata
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		m, err := readMeta(filepath.Join(s.dir, e.Name(), metaFileName))
		if err != nil {
			s.log.Warn("rootfs: skipping unreadable store entry", "entry", e.Name(), "err", err)
			continue
		}
		if m.ID != e.Name() {
			s.log.Warn("rootfs: skipping store entry with mismatched id", "entry", e.Name(), "id", m.ID)
			continue
		}
		metas = append(metas, m)
	}
	return metas, nil
}

// defaultID reads the default link; "" if there is none or it dangles.
func (s *Store) defaultID() string {
	id, err := os.Readlink(filepath.Join(s.dir, defaultLink))
	if err != nil {
		return ""
	}
	if _, err := os.Stat(filepath.Join(s.dir, id, metaFileName)); err != nil {
		return ""
	}
	return id
}

// setDefault points the default link at id, atomically.
func (s *Store) setDefault(id string) error {
	tmp := filepath.Join(s.dir, linkTmpPrefix+strconv.Itoa(os.Getpid()))
	os.Remove(tmp)
	if err := os.Symlink(id, tmp); err != nil {
		return fmt.Errorf("set default rootfs: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, defaultLink)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("set default rootfs: %w", err)
	}
	return nil
}

func (s *Store) python(m *metadata, defaultID string) Python {
	return Python{
		ID:         m.ID,
		Version:    m.Version,
		Dir:        filepath.Join(s.dir, m.ID, treeDirName),
		Executable: m.Executable,
		Source:     m.Source,
		ABI:        m.ABI,
		Default:    m.ID == defaultID,
		PipWheel:   m.PipWheel,
	}
}

// list returns the usable rootfses sorted by version; s.mu is held. It
// reads the store again only when its directory changed (every run picks
// its interpreter here: reading each rootfs's metadata took 0.1 ms), or
// when the change it saw last could have been in the same tick as one
// since.
func (s *Store) list() ([]Python, error) {
	var stamp dirStamp
	var st unix.Stat_t
	fresh := false
	if err := unix.Stat(s.dir, &st); err == nil {
		stamp = dirStamp{ino: st.Ino, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
		fresh = time.Since(time.Unix(0, max(stamp.mtime, stamp.ctime))) < racyStamp
		if s.listed != nil && stamp == s.listedStamp && !fresh {
			return append([]Python(nil), s.listed...), nil
		}
	}
	ps, err := s.readList()
	if err == nil && stamp.ino != 0 && !fresh {
		s.listed, s.listedStamp = append([]Python(nil), ps...), stamp
	}
	return ps, err
}

// readList is list, read from the disk.
func (s *Store) readList() ([]Python, error) {
	metas, err := s.readMetas()
	if err != nil {
		return nil, err
	}
	def := s.defaultID()
	var ps []Python
	for _, m := range metas {
		if m.Format != formatVersion {
			continue
		}
		ps = append(ps, s.python(m, def))
	}
	sortPythons(ps)
	return ps, nil
}

// List returns the rootfses in the store, sorted by version.
func (s *Store) List() ([]Python, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.list()
}

// Pick chooses a rootfs by version: "" is the default; "3.12" the highest
// 3.12.x (final releases before pre-releases; among builds of one version,
// the default, else the first by ID); "3.12.1" exactly that version; an
// ID ("cpython-3.12.1-2") that rootfs. When nothing matches the error
// wraps ErrUnknownVersion and lists the versions in the store.
func (s *Store) Pick(version string) (Python, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ps, err := s.list()
	if err != nil {
		return Python{}, err
	}
	return pickVersion(ps, version)
}

// PickSpecifier chooses a rootfs for a PEP 440 version specifier such as
// a PEP 723 `requires-python` (">=3.9", ">=3.8,<3.12", "~=3.10",
// "==3.11.*"): the default if it satisfies the specifier, else the highest
// version that does; "" is the default. Pre-releases are only chosen when
// the specifier names one. A specifier that does not parse gives an error
// wrapping ErrInvalidSpecifier; no match, one wrapping ErrUnknownVersion.
func (s *Store) PickSpecifier(spec string) (Python, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ps, err := s.list()
	if err != nil {
		return Python{}, err
	}
	return pickSpecifier(ps, spec)
}
