package rootfs

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/cellblock/cellblock/nsjail/layout"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The tests in this file build real rootfs trees and run them in a chroot:
// they need root and take seconds, so they skip (with the reason) without
// root or with -short.

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: builds root-owned trees and runs python in a chroot")
	}
	if testing.Short() {
		t.Skip("slow: builds rootfs trees (skipped with -short)")
	}
}

// testLogger sends the store's log to the test log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// checkScript runs in a chroot of a built rootfs and reports what the
// tests check.
const checkScript = `
import sys, os, json, importlib
out = {"version": list(sys.version_info[:3]), "prefix": sys.prefix, "exec_prefix": sys.exec_prefix,
       "base_prefix": sys.base_prefix, "executable": sys.executable, "path": sys.path,
       "failed": {}, "uid": os.getuid()}
for name in ["encodings", "ssl", "sqlite3", "ctypes", "decimal", "lzma", "bz2", "zlib", "hashlib",
             "uuid", "json", "asyncio", "multiprocessing", "readline", "pwd", "socket", "venv"]:
    try:
        importlib.import_module(name)
    except Exception as e:
        out["failed"][name] = repr(e)
try:
    import pip
    out["pip_importable"] = True
except ImportError:
    out["pip_importable"] = False
try:
    import ensurepip
    out["ensurepip_version"] = ensurepip.version()
except Exception as e:
    out["ensurepip_error"] = repr(e)
import sysconfig
sp = sysconfig.get_paths()["purelib"]
out["site_packages"] = sorted(os.listdir(sp)) if os.path.isdir(sp) else None
import ssl
out["ca_certs"] = len(ssl.create_default_context().get_ca_certs())
import pwd
out["sandbox_home"] = pwd.getpwuid(1000).pw_dir
import sqlite3
out["sqlite"] = sqlite3.connect(":memory:").execute("select 1+1").fetchone()[0]
import ctypes
out["ctypes"] = ctypes.CDLL("libc.so.6").getpid() == os.getpid()
import hashlib, uuid, decimal, lzma, bz2, zlib
out["sha256"] = hashlib.sha256(b"x").hexdigest()[:8]
out["uuid4"] = len(str(uuid.uuid4()))
out["lzma"] = lzma.decompress(lzma.compress(b"abc")) == b"abc"
out["bz2"] = bz2.decompress(bz2.compress(b"abc")) == b"abc"
if sys.version_info >= (3, 9):
    import zoneinfo
    out["tz"] = str(zoneinfo.ZoneInfo("Europe/Paris"))
# Every stdlib module has a valid .pyc, so nothing compiles at import.
import importlib.util
stale = []
stdlib = sysconfig.get_paths()["stdlib"]
magic = importlib.util.MAGIC_NUMBER
for d, dirs, files in os.walk(stdlib):
    dirs[:] = [x for x in dirs if x not in ("__pycache__", "site-packages")]
    for f in files:
        if not f.endswith(".py"):
            continue
        src = os.path.join(d, f)
        pyc = importlib.util.cache_from_source(src)
        try:
            with open(pyc, "rb") as fh:
                head = fh.read(16)
        except OSError:
            stale.append(src)
            continue
        st = os.stat(src)
        if head[:4] != magic or int.from_bytes(head[8:12], "little") != int(st.st_mtime) & 0xFFFFFFFF:
            stale.append(src)
out["stale_pyc"] = stale[:20]
out["stale_pyc_count"] = len(stale)
print(json.dumps(out))
`

type checkResult struct {
	Version          [3]int            `json:"version"`
	Prefix           string            `json:"prefix"`
	ExecPrefix       string            `json:"exec_prefix"`
	BasePrefix       string            `json:"base_prefix"`
	Executable       string            `json:"executable"`
	Path             []string          `json:"path"`
	Failed           map[string]string `json:"failed"`
	UID              int               `json:"uid"`
	PipImportable    bool              `json:"pip_importable"`
	EnsurepipVersion string            `json:"ensurepip_version"`
	EnsurepipError   string            `json:"ensurepip_error"`
	SitePackages     []string          `json:"site_packages"`
	CACerts          int               `json:"ca_certs"`
	SandboxHome      string            `json:"sandbox_home"`
	SQLite           int               `json:"sqlite"`
	Ctypes           bool              `json:"ctypes"`
	SHA256           string            `json:"sha256"`
	UUID4            int               `json:"uuid4"`
	LZMA             bool              `json:"lzma"`
	BZ2              bool              `json:"bz2"`
	TZ               string            `json:"tz"`
	StalePyc         []string          `json:"stale_pyc"`
	StalePycCount    int               `json:"stale_pyc_count"`
}

// checkRootfs runs checkScript in p's tree and checks the results.
func checkRootfs(t *testing.T, p Python, wantVersion string) {
	t.Helper()
	out, err := runInRoot(context.Background(), p.Dir, []string{p.Executable, "-c", checkScript})
	if err != nil {
		t.Fatalf("run python in chroot of %s: %v", p.ID, err)
	}
	var r checkResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("parse %q: %v", out, err)
	}
	got := strings.Join([]string{strconv.Itoa(r.Version[0]), strconv.Itoa(r.Version[1]), strconv.Itoa(r.Version[2])}, ".")
	if !strings.HasPrefix(wantVersion, got) {
		t.Errorf("%s: sys.version_info %s, want %s", p.ID, got, wantVersion)
	}
	if r.Prefix != "/usr" || r.ExecPrefix != "/usr" || r.BasePrefix != "/usr" {
		t.Errorf("%s: prefix %q exec_prefix %q base_prefix %q, want /usr", p.ID, r.Prefix, r.ExecPrefix, r.BasePrefix)
	}
	if r.Executable != Executable {
		t.Errorf("%s: sys.executable %q, want %q", p.ID, r.Executable, Executable)
	}
	for _, d := range r.Path {
		if d != "" && !strings.HasPrefix(d, "/usr/") {
			t.Errorf("%s: sys.path entry %q outside /usr", p.ID, d)
		}
	}
	if len(r.Failed) > 0 {
		t.Errorf("%s: imports failed: %v", p.ID, r.Failed)
	}
	if r.UID != 65534 {
		t.Errorf("%s: ran as uid %d, want 65534", p.ID, r.UID)
	}
	if r.PipImportable {
		t.Errorf("%s: pip is importable: host site-packages leaked", p.ID)
	}
	if hostHasPipWheel(t, p.Source) {
		if r.EnsurepipVersion == "" || p.PipWheel == "" || !strings.Contains(p.PipWheel, "pip-"+r.EnsurepipVersion) {
			t.Errorf("%s: PipWheel %q, ensurepip.version() %q (%s)", p.ID, p.PipWheel, r.EnsurepipVersion, r.EnsurepipError)
		}
	} else {
		t.Logf("%s: the host interpreter has no pip wheel for ensurepip; not checked", p.ID)
	}
	if r.SitePackages == nil || len(r.SitePackages) > 0 {
		t.Errorf("%s: site-packages = %v, want an empty directory", p.ID, r.SitePackages)
	}
	if r.CACerts == 0 {
		t.Errorf("%s: ssl default context loaded no CA certificates", p.ID)
	}
	if r.SandboxHome != "/work" {
		t.Errorf("%s: uid 1000 home %q, want /work", p.ID, r.SandboxHome)
	}
	if r.SQLite != 2 || !r.Ctypes || r.SHA256 != "2d711642" || r.UUID4 != 36 || !r.LZMA || !r.BZ2 {
		t.Errorf("%s: module smoke results wrong: %+v", p.ID, r)
	}
	if r.Version[1] >= 9 && r.TZ != "Europe/Paris" {
		t.Errorf("%s: zoneinfo gave %q", p.ID, r.TZ)
	}
	if r.StalePycCount > 0 {
		t.Errorf("%s: %d stdlib modules without a valid .pyc, e.g. %v", p.ID, r.StalePycCount, r.StalePyc)
	}
	checkReadOnly(t, p.Dir)
}

// hostHasPipWheel reports whether the host interpreter has a pip wheel
// for ensurepip (pyenv builds always do; Debian's needs python3-pip-whl).
func hostHasPipWheel(t *testing.T, python string) bool {
	t.Helper()
	h, err := probe(context.Background(), python)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Join(h.Stdlib, "ensurepip", "_bundled"), h.WheelPkgDir} {
		if m, _ := filepath.Glob(filepath.Join(d, "pip-*.whl")); d != "" && len(m) > 0 {
			return true
		}
	}
	return false
}

// hostPythonOrSkip probes an interpreter the test needs, skipping when the
// machine does not have it.
func hostPythonOrSkip(t *testing.T, python string) *hostPython {
	t.Helper()
	if strings.Contains(python, "/") {
		if _, err := os.Stat(python); err != nil {
			t.Skipf("needs %s: %v", python, err)
		}
	} else if _, err := exec.LookPath(python); err != nil {
		t.Skipf("needs %s on PATH: %v", python, err)
	}
	h, err := probe(context.Background(), python)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// checkReadOnly checks that nothing in the tree is writable by anyone,
// everything is readable by others, and all is owned by root.
func checkReadOnly(t *testing.T, dir string) {
	t.Helper()
	bad := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(path)
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return nil
		}
		m := fi.Mode()
		st := fi.Sys().(*syscall.Stat_t)
		switch {
		case m.Perm()&0o222 != 0:
			t.Errorf("%s is writable: %v", path, m)
		case m&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0:
			t.Errorf("%s has special bits: %v", path, m)
		case m.Perm()&0o004 == 0 || (m.IsDir() && m.Perm()&0o001 == 0):
			t.Errorf("%s is not readable by others: %v", path, m)
		case !m.IsDir() && !m.IsRegular():
			t.Errorf("%s is not a regular file, directory or symlink: %v", path, m)
		case st.Uid != 0 || st.Gid != 0:
			t.Errorf("%s is owned by %d:%d", path, st.Uid, st.Gid)
		default:
			return nil
		}
		if bad++; bad > 10 {
			return errors.New("too many bad files")
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// TestRootStore builds the default rootfs and pyenv's 3.12.1 and 3.13.0
// (when installed) into one store, runs each in a chroot and exercises
// Pick and Remove.
func TestRootStore(t *testing.T) {
	requireRoot(t)
	host := hostPythonOrSkip(t, DefaultInterpreter)
	dir := filepath.Join(t.TempDir(), "state", "rootfs")
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	s.SetLogger(testLogger(t))
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("store created %s with mode %v (%v), want 0755", d, fi.Mode(), err)
		}
	}

	start := time.Now()
	def, err := s.EnsureDefault(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("default rootfs %s built in %v", def.ID, time.Since(start))
	if !def.Default || def.Version != host.versionString() || def.Source != host.Executable {
		t.Errorf("default = %+v, want version %s from %s", def, host.versionString(), host.Executable)
	}
	if def.ID != "cpython-"+host.versionString() || def.Executable != Executable || def.ABI != host.SOABI {
		t.Errorf("default = %+v", def)
	}
	checkRootfs(t, def, host.versionString())
	if def.PipWheel != "" {
		checkPipWheel(t, def)
	}

	// A second EnsureDefault, and importing the same interpreter, return
	// the stored rootfs without rebuilding it.
	fi1, _ := os.Stat(filepath.Join(dir, def.ID, metaFileName))
	start = time.Now()
	again, err := s.EnsureDefault(context.Background())
	if err != nil || again != def {
		t.Errorf("EnsureDefault again = %+v, %v; want %+v", again, err, def)
	}
	same, err := s.Import(context.Background(), DefaultInterpreter)
	if err != nil || same != def {
		t.Errorf("Import(%s) again = %+v, %v; want %+v", DefaultInterpreter, same, err, def)
	}
	fi2, _ := os.Stat(filepath.Join(dir, def.ID, metaFileName))
	if !fi1.ModTime().Equal(fi2.ModTime()) {
		t.Errorf("re-import rebuilt the rootfs")
	}
	t.Logf("EnsureDefault + Import of an existing rootfs took %v", time.Since(start))

	versions := []string{def.Version}
	for _, v := range []string{"3.12.1", "3.13.0"} {
		t.Run("pyenv-"+v, func(t *testing.T) {
			py := "/root/.pyenv/versions/" + v + "/bin/python3"
			hostPythonOrSkip(t, py)
			start := time.Now()
			p, err := s.Import(context.Background(), py)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("rootfs %s built in %v", p.ID, time.Since(start))
			if p.Version != v || p.ID != "cpython-"+v || p.Default {
				t.Errorf("Import(%s) = %+v", py, p)
			}
			checkRootfs(t, p, v)
			versions = append(versions, v)
		})
	}

	ps, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range ps {
		got = append(got, p.Version)
	}
	want := append([]string{}, versions...)
	sort.Slice(want, func(i, j int) bool {
		a, _ := parseVersion(want[i])
		b, _ := parseVersion(want[j])
		return compareVersions(a, b) < 0
	})
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("List versions %v, want %v", got, want)
	}
	has := func(v string) bool { return strings.Contains(" "+strings.Join(versions, " ")+" ", " "+v+" ") }

	if has("3.12.1") {
		if p, err := s.Pick("3.12"); err != nil || p.Version != "3.12.1" {
			t.Errorf("Pick(3.12) = %+v, %v", p, err)
		}
	}
	if p, err := s.Pick(""); err != nil || p.ID != def.ID {
		t.Errorf("Pick(\"\") = %+v, %v", p, err)
	}
	if p, err := s.Pick(def.Version); err != nil || p.ID != def.ID {
		t.Errorf("Pick(%s) = %+v, %v", def.Version, p, err)
	}
	_, err = s.Pick("3.99")
	if !errors.Is(err, ErrUnknownVersion) {
		t.Errorf("Pick(3.99) error %v, want ErrUnknownVersion", err)
	} else {
		for _, v := range versions {
			if !strings.Contains(err.Error(), v) {
				t.Errorf("Pick(3.99) error %q does not name %s", err, v)
			}
		}
	}
	if p, err := s.PickSpecifier(">=" + want[len(want)-1]); err != nil || p.Version != want[len(want)-1] {
		t.Errorf("PickSpecifier(>=%s) = %+v, %v", want[len(want)-1], p, err)
	}

	// Remove takes a rootfs out at once; Open deletes its files.
	if has("3.13.0") {
		if err := s.Remove("cpython-3.13.0"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Pick("3.13"); !errors.Is(err, ErrUnknownVersion) {
			t.Errorf("Pick(3.13) after Remove: %v", err)
		}
	}
	if _, err := Open(dir); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") && e.Name() != lockFileName {
			t.Errorf("Open left %s behind", e.Name())
		}
	}
}

// checkPipWheel runs pip from the rootfs's bundled wheel, with a tmpfs
// on /tmp as the jail gives (pip unpacks certifi's bundle there).
func checkPipWheel(t *testing.T, p Python) {
	t.Helper()
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Errorf("cannot check pip from the wheel: %v", err)
		return
	}
	script := `mount --make-rprivate / && mount -t tmpfs tmpfs "$1/tmp" && exec chroot --userspec=65534:65534 "$1" ` +
		Executable + ` "$2/pip" --version`
	cmd := exec.Command(unshare, "-m", "sh", "-c", script, "sh", p.Dir, p.PipWheel)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1"}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "pip ") {
		t.Errorf("pip from %s: %v\n%s", p.PipWheel, err, out)
	}
}

// TestRootOlderPythons builds rootfses from the 3.8 to 3.10 interpreters
// pyenv has on this machine and runs them.
func TestRootOlderPythons(t *testing.T) {
	requireRoot(t)
	pys, _ := filepath.Glob("/root/.pyenv/versions/3.*/bin/python3")
	var tested int
	s, err := Open(filepath.Join(t.TempDir(), "rootfs"))
	if err != nil {
		t.Fatal(err)
	}
	s.SetLogger(testLogger(t))
	for _, py := range pys {
		v := filepath.Base(filepath.Dir(filepath.Dir(py)))
		pv, err := parseVersion(v)
		if err != nil || pv.release[1] < 6 || pv.release[1] > 10 {
			continue
		}
		p, err := s.Import(context.Background(), py)
		if pv.release[1] < minMinor {
			if err == nil || !strings.Contains(err.Error(), "need CPython 3.8 or newer") {
				t.Errorf("Import(%s) = %+v, %v; want a clear rejection", py, p, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Import(%s): %v", py, err)
			continue
		}
		checkRootfs(t, p, v)
		tested++
	}
	if tested == 0 {
		t.Skip("no pyenv CPython 3.8-3.10 on this machine")
	}
}

// TestRootDebianPython builds from Debian's own interpreter, whose
// standard library has distribution patches (ensurepip wheels in
// /usr/share/python-wheels, EXTERNALLY-MANAGED, dist-packages).
func TestRootDebianPython(t *testing.T) {
	requireRoot(t)
	const py = "/usr/bin/python3.11"
	hostPythonOrSkip(t, py)
	s, err := Open(filepath.Join(t.TempDir(), "rootfs"))
	if err != nil {
		t.Fatal(err)
	}
	s.SetLogger(testLogger(t))
	start := time.Now()
	p, err := s.Import(context.Background(), py)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rootfs %s built in %v", p.ID, time.Since(start))
	if !p.Default {
		t.Errorf("first rootfs in a store is not the default: %+v", p)
	}
	checkRootfs(t, p, p.Version)
	if _, err := os.Stat(filepath.Join(p.Dir, "usr/lib/python3.11/EXTERNALLY-MANAGED")); err == nil {
		t.Errorf("EXTERNALLY-MANAGED was copied")
	}
}

// TestRootReimportChangedSource rebuilds when the source binary changed
// and swaps the tree atomically under the same ID.
func TestRootReimportChangedSource(t *testing.T) {
	requireRoot(t)
	host := hostPythonOrSkip(t, DefaultInterpreter)
	dir := filepath.Join(t.TempDir(), "rootfs")
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	p1, err := s.Import(context.Background(), host.Executable)
	if err != nil {
		t.Fatal(err)
	}
	// Pretend the interpreter was updated in place.
	metaPath := filepath.Join(dir, p1.ID, metaFileName)
	m := rewriteMeta(t, metaPath, func(m *metadata) { m.SourceStamp.Size-- })
	p2, err := s.Import(context.Background(), host.Executable)
	if err != nil {
		t.Fatal(err)
	}
	if p2 != p1 {
		t.Errorf("rebuild changed the rootfs: %+v != %+v", p2, p1)
	}
	m2, err := readMeta(metaPath)
	if err != nil || m2.SourceStamp.Size == m.SourceStamp.Size || !m2.Built.After(m.Built) {
		t.Errorf("not rebuilt: %+v %v", m2, err)
	}
	if out, err := runInRoot(context.Background(), p2.Dir, []string{Executable, "-c", "print(1)"}); err != nil || string(out) != "1\n" {
		t.Errorf("rebuilt rootfs does not run: %q %v", out, err)
	}
	entries, _ := os.ReadDir(dir)
	retired := 0
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), retiredPrefix) {
			retired++
		}
	}
	if retired != 1 {
		t.Errorf("%d retired trees after a replacement, want 1", retired)
	}
}

// TestRootStartupTime compares `python -c pass` in the chroot with the
// host interpreter; it only logs, timing on shared machines is noisy.
func TestRootStartupTime(t *testing.T) {
	requireRoot(t)
	host := hostPythonOrSkip(t, DefaultInterpreter)
	s, err := Open(filepath.Join(t.TempDir(), "rootfs"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.EnsureDefault(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	median := func(run func() error) time.Duration {
		var ds []time.Duration
		for i := 0; i < n; i++ {
			start := time.Now()
			if err := run(); err != nil {
				t.Fatal(err)
			}
			ds = append(ds, time.Since(start))
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[n/2]
	}
	chroot := median(func() error {
		_, err := runInRoot(context.Background(), p.Dir, []string{Executable, "-c", "pass"})
		return err
	})
	hostT := median(func() error {
		return exec.Command(host.Executable, "-c", "pass").Run()
	})
	hostI := median(func() error {
		return exec.Command(host.Executable, "-I", "-c", "pass").Run()
	})
	hostS := median(func() error {
		return exec.Command(host.Executable, "-I", "-S", "-c", "pass").Run()
	})
	chrootS := median(func() error {
		_, err := runInRoot(context.Background(), p.Dir, []string{Executable, "-I", "-S", "-c", "pass"})
		return err
	})
	t.Logf("python -c pass, median of %d: chroot %v, host %v, host -I %v; with -I -S: chroot %v, host %v",
		n, chroot, hostT, hostI, chrootS, hostS)
}

// stepHook is a slog handler that calls fn with each build step the
// store logs as done, and passes every record on.
type stepHook struct {
	slog.Handler
	fn func(step string)
}

func (h stepHook) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "rootfs build step" {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "step" {
				h.fn(a.Value.String())
			}
			return true
		})
	}
	return h.Handler.Handle(ctx, r)
}

func (h stepHook) WithAttrs(as []slog.Attr) slog.Handler {
	return stepHook{h.Handler.WithAttrs(as), h.fn}
}

func (h stepHook) WithGroup(name string) slog.Handler {
	return stepHook{h.Handler.WithGroup(name), h.fn}
}

// TestRootImportCancelled cancels a build once its first step is done (the
// daemon's SIGTERM during its first start): Import must give up at once,
// with the context's error, and leave nothing in the store.
func TestRootImportCancelled(t *testing.T) {
	requireRoot(t)
	hostPythonOrSkip(t, DefaultInterpreter)
	dir := filepath.Join(t.TempDir(), "rootfs")
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		mu        sync.Mutex
		steps     []string
		cancelled time.Time
	)
	s.SetLogger(slog.New(stepHook{testLogger(t).Handler(), func(step string) {
		mu.Lock()
		defer mu.Unlock()
		steps = append(steps, step)
		if cancelled.IsZero() {
			cancelled = time.Now()
			cancel()
		}
	}}))

	_, err = s.Import(ctx, DefaultInterpreter)
	returned := time.Now()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Import with its context cancelled during the build: %v, want context.Canceled", err)
	}
	mu.Lock()
	t.Logf("steps done: %v; Import returned %v after the cancel", steps, returned.Sub(cancelled))
	if len(steps) > 1 {
		t.Errorf("the build went on after the cancel: steps %v", steps)
	}
	if d := returned.Sub(cancelled); d > 10*time.Second {
		t.Errorf("Import returned %v after the cancel", d)
	}
	mu.Unlock()
	checkEmptyStore(t, s)

	// A context cancelled before the call: nothing is even probed.
	_, err = s.EnsureDefault(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("EnsureDefault with a cancelled context: %v, want context.Canceled", err)
	}
	checkEmptyStore(t, s)
}

// checkEmptyStore fails unless the store holds nothing but its lock file,
// even before the next Open's clean-up.
func checkEmptyStore(t *testing.T, s *Store) {
	t.Helper()
	entries, err := os.ReadDir(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != lockFileName {
			t.Errorf("the store holds %s", e.Name())
		}
	}
	if ps, err := s.List(); err != nil || len(ps) != 0 {
		t.Errorf("the store lists %v, %v", ps, err)
	}
}

// An entry of an older format is invisible until Upgrade rebuilds it from
// its interpreter under the same ID; then it has the runner's mount point.
func TestRootUpgradeOlderFormat(t *testing.T) {
	requireRoot(t)
	host := hostPythonOrSkip(t, DefaultInterpreter)
	dir := filepath.Join(t.TempDir(), "rootfs")
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	p1, err := s.Import(context.Background(), host.Executable)
	if err != nil {
		t.Fatal(err)
	}
	rewriteMeta(t, filepath.Join(dir, p1.ID, metaFileName), func(m *metadata) { m.Format = formatVersion - 1 })
	if ps, _ := s.List(); len(ps) != 0 {
		t.Fatalf("an entry of an older format is listed: %+v", ps)
	}
	done, err := s.Upgrade(context.Background())
	if err != nil || len(done) != 1 || done[0] != p1.ID {
		t.Fatalf("Upgrade = %q, %v; want [%s]", done, err, p1.ID)
	}
	ps, _ := s.List()
	if len(ps) != 1 || ps[0].ID != p1.ID || !ps[0].Default {
		t.Fatalf("after Upgrade: %+v", ps)
	}
	if fi, err := os.Stat(filepath.Join(ps[0].Dir, layout.RunnerDir)); err != nil || !fi.IsDir() {
		t.Errorf("no runner mount point in the upgraded rootfs: %v", err)
	}
	if done, err := s.Upgrade(context.Background()); len(done) != 0 || err != nil {
		t.Errorf("second Upgrade = %q, %v", done, err)
	}
}

// rewriteMeta changes a stored rootfs's metadata file (read-only, as the
// store leaves it) with change, and returns what it wrote.
func rewriteMeta(t *testing.T, path string, change func(*metadata)) *metadata {
	t.Helper()
	m, err := readMeta(path)
	if err != nil {
		t.Fatal(err)
	}
	change(m)
	os.Chmod(path, 0o644)
	os.Remove(path)
	if err := writeMeta(path, m); err != nil {
		t.Fatal(err)
	}
	return m
}
