package rootfs

import (
	"context"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestMetadataRoundTrip(t *testing.T) {
	m := &metadata{
		Format:       formatVersion,
		ID:           "cpython-3.12.1",
		Version:      "3.12.1",
		Executable:   Executable,
		Source:       "/root/.pyenv/versions/3.12.1/bin/python3.12",
		SourceStamp:  sourceStamp{Size: 17584, ModTime: time.Date(2026, 5, 9, 7, 35, 32, 123, time.UTC)},
		ABI:          "cpython-312-x86_64-linux-gnu",
		PipWheel:     "/usr/lib/python3.12/ensurepip/_bundled/pip-23.2.1-py3-none-any.whl",
		Built:        time.Now().UTC().Round(0),
		BuildSeconds: 1.25,
		Libraries:    []string{"libc.so.6", "libpython3.12.so.1.0"},
		Dropped:      []string{"_tkinter.cpython-312-x86_64-linux-gnu.so"},
	}
	p := filepath.Join(t.TempDir(), metaFileName)
	if err := writeMeta(p, m); err != nil {
		t.Fatal(err)
	}
	got, err := readMeta(p)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, m)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != fileMode {
		t.Errorf("meta.json mode %v, %v", fi.Mode(), err)
	}
}

// addFakeEntry puts a rootfs entry into the store as a build would leave it.
func addFakeEntry(t *testing.T, s *Store, id, version string, format int) {
	t.Helper()
	dir := filepath.Join(s.Dir(), id)
	if err := os.MkdirAll(filepath.Join(dir, treeDirName), 0o755); err != nil {
		t.Fatal(err)
	}
	m := &metadata{Format: format, ID: id, Version: version, Executable: Executable, Source: "/x/" + id, ABI: "abi-" + version}
	if err := writeMeta(filepath.Join(dir, metaFileName), m); err != nil {
		t.Fatal(err)
	}
}

func ids(ps []Python) string {
	var out []string
	for _, p := range ps {
		id := p.ID
		if p.Default {
			id += "*"
		}
		out = append(out, id)
	}
	return strings.Join(out, " ")
}

func TestStoreWithoutBuilding(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "rootfs")
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ps, err := s.List(); err != nil || len(ps) != 0 {
		t.Fatalf("new store lists %v, %v", ps, err)
	}
	if _, err := s.Pick(""); !errors.Is(err, ErrUnknownVersion) {
		t.Errorf("Pick on an empty store: %v", err)
	}
	addFakeEntry(t, s, "cpython-3.12.1", "3.12.1", formatVersion)
	addFakeEntry(t, s, "cpython-3.11.7", "3.11.7", formatVersion)
	addFakeEntry(t, s, "cpython-3.13.0", "3.13.0", formatVersion)
	addFakeEntry(t, s, "cpython-3.9.18", "3.9.18", formatVersion+1) // another layout: ignored
	addFakeEntry(t, s, "cpython-3.10.13", "3.10.13", formatVersion)
	os.Remove(filepath.Join(dir, "cpython-3.10.13", metaFileName)) // broken: ignored
	if err := os.WriteFile(filepath.Join(dir, "cpython-3.10.13", metaFileName), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}

	ps, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(ps); got != "cpython-3.11.7 cpython-3.12.1 cpython-3.13.0" {
		t.Errorf("List = %s", got)
	}
	if ps[0].Dir != filepath.Join(dir, "cpython-3.11.7", treeDirName) || !filepath.IsAbs(ps[0].Dir) {
		t.Errorf("Dir = %s", ps[0].Dir)
	}

	// No default yet: EnsureDefault marks the highest version, no build.
	p, err := s.EnsureDefault(context.Background())
	if err != nil || p.ID != "cpython-3.13.0" || !p.Default {
		t.Fatalf("EnsureDefault = %+v, %v", p, err)
	}
	if err := s.SetDefault("cpython-3.11.7"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetDefault("cpython-3.9.99"); err == nil {
		t.Errorf("SetDefault of a missing id succeeded")
	}
	if err := s.SetDefault("../x"); !errors.Is(err, fs.ErrInvalid) {
		t.Errorf("SetDefault(../x) = %v", err)
	}
	if p, err := s.Pick(""); err != nil || p.ID != "cpython-3.11.7" {
		t.Errorf("Pick default = %+v, %v", p, err)
	}
	if p, err := s.Pick("3.12"); err != nil || p.ID != "cpython-3.12.1" {
		t.Errorf("Pick(3.12) = %+v, %v", p, err)
	}
	if _, err := s.Pick("3.9"); !errors.Is(err, ErrUnknownVersion) || !strings.Contains(err.Error(), "3.11.7, 3.12.1, 3.13.0") {
		t.Errorf("Pick(3.9) = %v", err)
	}
	if p, err := s.PickSpecifier(">=3.12,<3.13"); err != nil || p.ID != "cpython-3.12.1" {
		t.Errorf("PickSpecifier = %+v, %v", p, err)
	}

	// Removing the default moves the default to the highest version.
	if err := s.Remove("cpython-3.11.7"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("cpython-3.11.7"); err == nil {
		t.Errorf("second Remove succeeded")
	}
	ps, _ = s.List()
	if got := ids(ps); got != "cpython-3.12.1 cpython-3.13.0*" {
		t.Errorf("after Remove: %s", got)
	}
	if id, err := s.newID("cpython-3.12.1"); err != nil || id != "cpython-3.12.1-2" {
		t.Errorf("newID = %s, %v", id, err)
	}

	// Leftovers of builds and removals go at the next Open, also when
	// read-only.
	if err := os.MkdirAll(filepath.Join(dir, buildPrefix+"x-1", treeDirName, "usr"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Seal(filepath.Join(dir, buildPrefix+"x-1")); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if got := strings.Join(names, " "); got != ".lock cpython-3.10.13 cpython-3.12.1 cpython-3.13.0 cpython-3.9.18 default" {
		t.Errorf("after Open: %s", got)
	}
	for _, p := range []string{dir, filepath.Dir(dir)} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("%s mode %v, %v; want 0755", p, fi.Mode(), err)
		}
	}
}

func TestOpenRejectsFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(p); err == nil {
		t.Errorf("Open of a file succeeded")
	}
}

// TestProbeShim resolves the real interpreter behind a shell-script shim
// and a symlink to it.
func TestProbeShim(t *testing.T) {
	h := hostPythonForTest(t)
	dir := t.TempDir()
	shim := filepath.Join(dir, "python3")
	script := "#!/bin/sh\nexec '" + h.Executable + "' \"$@\"\n"
	if err := os.WriteFile(shim, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "py")
	if err := os.Symlink(shim, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{shim, link} {
		got, err := probe(context.Background(), p)
		if err != nil {
			t.Fatalf("probe(context.Background(), %s): %v", p, err)
		}
		if got.Executable != h.Executable || got.versionString() != h.versionString() || got.SOABI != h.SOABI {
			t.Errorf("probe(context.Background(), %s) = %s %s %s, want %s %s %s", p, got.Executable, got.versionString(), got.SOABI,
				h.Executable, h.versionString(), h.SOABI)
		}
	}
	if !filepath.IsAbs(h.Stdlib) || !filepath.IsAbs(h.Dynload) || h.CacheTag == "" || len(h.PycMagic) != 8 {
		t.Errorf("probe result incomplete: %+v", h)
	}
	if real, _ := filepath.EvalSymlinks(h.Executable); real != h.Executable {
		t.Errorf("Executable %s is not symlink-resolved (%s)", h.Executable, real)
	}
}

// TestProbeRejects checks the clear errors for unsupported interpreters,
// with fake interpreters printing what old ones would.
func TestProbeRejects(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct{ out, want string }{
		"python2":  {`{"version": [2, 7, 18], "releaselevel": "final", "serial": 0, "implementation": ""}`, "python 2.7.18 at"},
		"python37": {`{"version": [3, 7, 16], "releaselevel": "final", "serial": 0, "implementation": "cpython"}`, "need CPython 3.8 or newer"},
		"pypy":     {`{"version": [3, 10, 14], "releaselevel": "final", "serial": 0, "implementation": "pypy"}`, `"pypy", only CPython`},
		"garbage":  {`Python 3.12.1`, "parse output"},
		"relative": {`{"version": [3, 12, 1], "releaselevel": "final", "serial": 0, "implementation": "cpython", "executable": "python3"}`, "want an absolute path"},
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\ncat <<'EOF'\n"+tc.out+"\nEOF\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		_, err := probe(context.Background(), p)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("probe(context.Background(), %s) error %v, want it to contain %q", name, err, tc.want)
		}
	}
	failing := filepath.Join(dir, "failing")
	if err := os.WriteFile(failing, []byte("#!/bin/sh\necho 'pyenv: python3: command not found' >&2\nexit 127\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := probe(context.Background(), failing); err == nil || !strings.Contains(err.Error(), "command not found") {
		t.Errorf("probe of a failing shim: %v", err)
	}
	// A real Python 2, when this machine has one.
	for _, py2 := range []string{"/root/.pyenv/versions/2.7.18/bin/python2.7", "/usr/bin/python2"} {
		if _, err := os.Stat(py2); err != nil {
			continue
		}
		if _, err := probe(context.Background(), py2); err == nil || !strings.Contains(err.Error(), "need CPython 3.8 or newer") {
			t.Errorf("probe(context.Background(), %s): %v", py2, err)
		}
	}
}

func TestNewBuilderLayouts(t *testing.T) {
	for name, tc := range map[string]struct {
		h       hostPython
		stdlib  string
		trees   []pyTree
		wantErr bool
	}{
		"pyenv": {
			h: hostPython{Version: [3]int{3, 12, 1}, BasePrefix: "/root/.pyenv/versions/3.12.1", BaseExecPrefix: "/root/.pyenv/versions/3.12.1",
				Stdlib: "/root/.pyenv/versions/3.12.1/lib/python3.12", PlatStdlib: "/root/.pyenv/versions/3.12.1/lib/python3.12",
				Dynload: "/root/.pyenv/versions/3.12.1/lib/python3.12/lib-dynload"},
			stdlib: "/usr/lib/python3.12",
			trees:  []pyTree{{"/root/.pyenv/versions/3.12.1/lib/python3.12", "/usr/lib/python3.12"}},
		},
		"fedora": {
			h: hostPython{Version: [3]int{3, 12, 1}, BasePrefix: "/usr", BaseExecPrefix: "/usr",
				Stdlib: "/usr/lib64/python3.12", PlatStdlib: "/usr/lib64/python3.12", Dynload: "/usr/lib64/python3.12/lib-dynload"},
			stdlib: "/usr/lib64/python3.12",
			trees:  []pyTree{{"/usr/lib64/python3.12", "/usr/lib64/python3.12"}},
		},
		"split exec prefix": {
			h: hostPython{Version: [3]int{3, 11, 0}, BasePrefix: "/opt/py", BaseExecPrefix: "/opt/py-x86",
				Stdlib: "/opt/py/lib/python3.11", PlatStdlib: "/opt/py-x86/lib/python3.11", Dynload: "/opt/py-x86/lib/python3.11/lib-dynload"},
			stdlib: "/usr/lib/python3.11",
			trees: []pyTree{{"/opt/py/lib/python3.11", "/usr/lib/python3.11"},
				{"/opt/py-x86/lib/python3.11", "/usr/lib/python3.11"}},
		},
		"outside prefix": {
			h: hostPython{Version: [3]int{3, 11, 0}, BasePrefix: "/opt/py", BaseExecPrefix: "/opt/py",
				Stdlib: "/srv/lib/python3.11", PlatStdlib: "/srv/lib/python3.11", Dynload: "/srv/lib/python3.11/lib-dynload"},
			wantErr: true,
		},
	} {
		b, err := newBuilder(&tc.h, "/nonexistent", nil)
		if tc.wantErr {
			if err == nil {
				t.Errorf("%s: no error", name)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if b.stdlib != tc.stdlib || !reflect.DeepEqual(b.trees, tc.trees) {
			t.Errorf("%s: stdlib %s trees %v; want %s %v", name, b.stdlib, b.trees, tc.stdlib, tc.trees)
		}
		if d, ok := b.inRoot(tc.h.Dynload); !ok || !strings.HasSuffix(d, "/lib-dynload") || !strings.HasPrefix(d, "/usr/") {
			t.Errorf("%s: lib-dynload in root %q %v", name, d, ok)
		}
	}
}

func TestStdlibFilter(t *testing.T) {
	f := stdlibFilter("cpython-311")
	for _, tc := range []struct {
		rel   string
		isDir bool
		want  treeAction
	}{
		{"os.py", false, copyEntry},
		{"site-packages", true, emptyDir},
		{"test", true, skipEntry},
		{"ctypes/test", true, skipEntry},
		{"lib2to3/tests", true, skipEntry},
		{"idlelib", true, skipEntry},
		{"tkinter", true, skipEntry},
		{"turtledemo", true, skipEntry},
		{"ensurepip", true, copyEntry},
		{"ensurepip/_bundled/pip-23.2.1-py3-none-any.whl", false, copyEntry},
		{"__pycache__/os.cpython-311.pyc", false, copyEntry},
		{"__pycache__/os.cpython-311.opt-1.pyc", false, skipEntry},
		{"json/__pycache__/decoder.cpython-310.pyc", false, skipEntry},
		{"lib-dynload/_ssl.cpython-311-x86_64-linux-gnu.so", false, copyEntry},
		{"lib-dynload/_testcapi.cpython-311-x86_64-linux-gnu.so", false, skipEntry},
		{"lib-dynload/_tkinter.cpython-311-x86_64-linux-gnu.so", false, skipEntry},
		{"lib-dynload/xxlimited_35.cpython-311-x86_64-linux-gnu.so", false, skipEntry},
		{"config-3.11-x86_64-linux-gnu/libpython3.11.a", false, skipEntry},
		{"config-3.11-x86_64-linux-gnu/Makefile", false, copyEntry},
		{"EXTERNALLY-MANAGED", false, skipEntry},
		{"lib2to3/Grammar3.11.7.final.0.pickle", false, copyEntry},
	} {
		if got := f(tc.rel, tc.isDir); got != tc.want {
			t.Errorf("filter(%q) = %v, want %v", tc.rel, got, tc.want)
		}
	}
}

func TestCopyTree(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src")
	outside := filepath.Join(t.TempDir(), "outside.txt")
	mtime := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.WriteFile(outside, []byte("outside"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"pkg/sub", "skipme", "empty/x"} {
		if err := os.MkdirAll(filepath.Join(src, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	write := func(rel string, mode os.FileMode) {
		p := filepath.Join(src, rel)
		if err := os.WriteFile(p, []byte(rel), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	write("a.py", 0o600)
	write("pkg/tool", 0o4750)
	write("skipme/x", 0o644)
	write("empty/x/y", 0o644)
	for link, target := range map[string]string{
		"pkg/rel":       "../a.py",      // inside: kept as a link
		"abs":           outside,        // absolute: copied
		"escape":        "../../etc",    // directory outside: dropped
		"dangling":      "nothing-here", // dropped
		"pkg/sub/updir": "..",           // inside: kept
	} {
		if err := os.Symlink(target, filepath.Join(src, link)); err != nil {
			t.Fatal(err)
		}
	}
	dst := filepath.Join(t.TempDir(), "dst")
	_, err := copyTree(context.Background(), src, dst, func(rel string, isDir bool) treeAction {
		switch rel {
		case "skipme":
			return skipEntry
		case "empty":
			return emptyDir
		}
		return copyEntry
	})
	if err != nil {
		t.Fatal(err)
	}
	check := func(rel string, mode os.FileMode, content string) {
		t.Helper()
		p := filepath.Join(dst, rel)
		fi, err := os.Lstat(p)
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			return
		}
		if fi.Mode() != mode {
			t.Errorf("%s mode %v, want %v", rel, fi.Mode(), mode)
		}
		if mode.IsRegular() {
			if b, _ := os.ReadFile(p); string(b) != content {
				t.Errorf("%s content %q, want %q", rel, b, content)
			}
			if !fi.ModTime().Equal(mtime) && content != "outside" {
				t.Errorf("%s mtime %v, want %v", rel, fi.ModTime(), mtime)
			}
		}
	}
	check("a.py", fileMode, "a.py")
	check("pkg/tool", execMode, "pkg/tool") // setuid dropped
	check("abs", fileMode, "outside")
	check("pkg/rel", fs.ModeSymlink|0o777, "")
	check("pkg/sub/updir", fs.ModeSymlink|0o777, "")
	for _, gone := range []string{"skipme", "escape", "dangling", "empty/x"} {
		if _, err := os.Lstat(filepath.Join(dst, gone)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s was copied", gone)
		}
	}
	if err := Seal(dst); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(dst, "pkg")); fi.Mode().Perm() != dirMode {
		t.Errorf("directory mode %v after makeReadOnly", fi.Mode())
	}
	if err := RemoveTree(dst); err != nil {
		t.Errorf("removeTree of a read-only tree: %v", err)
	}
}

func TestPycValid(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "m.py")
	if err := os.WriteFile(src, []byte("x = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mtime := time.Unix(1700000000, 0)
	os.Chtimes(src, mtime, mtime)
	magic := []byte{0xa7, 0x0d, 0x0d, 0x0a}
	pyc := func(m []byte, flags, mt, size uint32) string {
		h := make([]byte, 16)
		copy(h, m)
		binary.LittleEndian.PutUint32(h[4:], flags)
		binary.LittleEndian.PutUint32(h[8:], mt)
		binary.LittleEndian.PutUint32(h[12:], size)
		p := filepath.Join(dir, "m.pyc")
		if err := os.WriteFile(p, append(h, 0xe3), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name            string
		magic           []byte
		flags, mt, size uint32
		want            bool
	}{
		{"valid", magic, 0, 1700000000, 6, true},
		{"hash-based", magic, 3, 0, 0, true},
		{"wrong mtime", magic, 0, 1700000001, 6, false},
		{"wrong size", magic, 0, 1700000000, 7, false},
		{"wrong magic", []byte{0x55, 0x0d, 0x0d, 0x0a}, 0, 1700000000, 6, false},
	} {
		if got := pycValid(src, pyc(tc.magic, tc.flags, tc.mt, tc.size), magic); got != tc.want {
			t.Errorf("%s: pycValid = %v", tc.name, got)
		}
	}
	if pycValid(src, filepath.Join(dir, "none.pyc"), magic) {
		t.Errorf("missing pyc is valid")
	}
}

func TestSafeInRoot(t *testing.T) {
	for p, want := range map[string]bool{
		"/usr/lib/ssl/cert.pem": true,
		"/etc/pki/tls/cert.pem": true,
		"/":                     false,
		"relative/x":            false,
		"/tmp/x":                false,
		"/work":                 false,
		"/proc/../tmp/x":        false,
		"/.cellblock/init":      false,
		"/tmpfoo":               true,
	} {
		if got := safeInRoot(p); got != want {
			t.Errorf("safeInRoot(%q) = %v, want %v", p, got, want)
		}
	}
}

// TestStoreConcurrentUse runs the store's methods from many goroutines;
// run with -race.
func TestStoreConcurrentUse(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "rootfs"))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"3.11.7", "3.12.1", "3.13.0"} {
		addFakeEntry(t, s, "cpython-"+v, v, formatVersion)
	}
	if err := s.SetDefault("cpython-3.11.7"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 20 {
				if _, err := s.List(); err != nil {
					errs <- err
				}
				if _, err := s.Pick("3.12"); err != nil {
					errs <- err
				}
				if _, err := s.PickSpecifier(">=3.11"); err != nil {
					errs <- err
				}
				if (i+j)%5 == 0 {
					if err := s.SetDefault([]string{"cpython-3.11.7", "cpython-3.13.0"}[j%2]); err != nil {
						errs <- err
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if p, err := s.Pick(""); err != nil || !p.Default {
		t.Errorf("default after concurrent SetDefault: %+v, %v", p, err)
	}
}

// List reads the store again after every change of its directory, even
// one in the same clock tick as the listing before, and not otherwise.
func TestListFollowsTheStore(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "rootfs"))
	if err != nil {
		t.Fatal(err)
	}
	list := func() string {
		t.Helper()
		ps, err := s.List()
		if err != nil {
			t.Fatal(err)
		}
		return ids(ps)
	}
	addFakeEntry(t, s, "cpython-3.11.7", "3.11.7", formatVersion)
	if got := list(); got != "cpython-3.11.7" {
		t.Fatalf("List = %s", got)
	}
	addFakeEntry(t, s, "cpython-3.12.1", "3.12.1", formatVersion) // most likely the same tick
	if got := list(); got != "cpython-3.11.7 cpython-3.12.1" {
		t.Fatalf("List right after a change = %s", got)
	}
	// Once the directory's stamp is old enough to be trusted, a listing
	// is kept: a rootfs's metadata changed in place (which the store never
	// does) is not seen ...
	time.Sleep(racyStamp + 20*time.Millisecond) // ages the stamp; nothing to wait for
	if got := list(); got != "cpython-3.11.7 cpython-3.12.1" {
		t.Fatalf("List = %s", got)
	}
	rewriteMetaFile(t, filepath.Join(s.Dir(), "cpython-3.12.1", metaFileName), "3.12.9")
	if ps, err := s.List(); err != nil || ps[1].Version != "3.12.1" {
		t.Fatalf("a kept listing read the store again: %+v %v", ps, err)
	}
	// ... until the directory changes.
	addFakeEntry(t, s, "cpython-3.13.0", "3.13.0", formatVersion)
	ps, err := s.List()
	if err != nil || ids(ps) != "cpython-3.11.7 cpython-3.12.1 cpython-3.13.0" || ps[1].Version != "3.12.9" {
		t.Fatalf("List after a change = %s %+v %v", ids(ps), ps, err)
	}
}

// rewriteMetaFile gives the metadata at path another version, in place.
func rewriteMetaFile(t *testing.T, path, version string) {
	t.Helper()
	m, err := readMeta(path)
	if err != nil {
		t.Fatal(err)
	}
	m.Version = version
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := writeMeta(path, m); err != nil {
		t.Fatal(err)
	}
}
