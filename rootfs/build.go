package rootfs

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cellblock/cellblock/nsjail/layout"
)

// Executable is the interpreter's path inside every rootfs.
const Executable = "/usr/bin/python3"

// caBundle is where the CA bundle lives inside the rootfs (Debian's path;
// the path the interpreter's OpenSSL looks at is linked to it).
const caBundle = "/etc/ssl/certs/ca-certificates.crt"

// hostCABundle is the host's bundle, preferred over whatever OpenSSL's
// compiled-in default is.
const hostCABundle = "/etc/ssl/certs/ca-certificates.crt"

// hostZoneinfo is copied (without right/) so zoneinfo.ZoneInfo works
// without the tzdata package; the jail has no /etc/localtime, so local
// time is UTC.
const hostZoneinfo = "/usr/share/zoneinfo"

// dlopenedLibs are loaded by glibc with dlopen, so DT_NEEDED never names
// them; they are copied when the host has them. libgcc_s is needed by
// pthread_exit and pthread_cancel, which CPython uses when threads end at
// interpreter shutdown.
var dlopenedLibs = []string{"libgcc_s.so.1"}

// buildTimeout bounds each helper process a build runs (bytecode
// compilation, smoke test).
const buildTimeout = 2 * time.Minute

// hostEtcCopies are public, host-independent tables copied when present.
var hostEtcCopies = []string{"/etc/services", "/etc/protocols"}

// builder builds one rootfs tree at root from the host interpreter h.
type builder struct {
	h    *hostPython
	root string // host path of the tree being built
	log  *slog.Logger

	binDir  string   // "/usr/bin"
	pyBin   string   // "/usr/bin/python3.11"
	stdlib  string   // in-root stdlib, e.g. "/usr/lib/python3.11"
	trees   []pyTree // the stdlib trees to copy (stdlib, and platstdlib/lib-dynload when separate)
	libDir  string   // where shared libraries go, e.g. "/usr/lib/x86_64-linux-gnu"
	modules []fileJob

	libraries []string // DT_NEEDED names copied to libDir
	dropped   []string // extension modules dropped for a missing library
	pipWheel  string
}

// pyTree is one host directory of the standard library and its place in the rootfs.
type pyTree struct {
	src, dst string
}

// newBuilder plans the layout. CPython finds its prefix by searching up
// from the executable's directory for the landmark lib/pythonX.Y/os.py, so
// relocating the host's prefix to /usr, keeping each directory's path
// relative to its prefix, lets an unmodified interpreter at /usr/bin find
// everything.
func newBuilder(h *hostPython, root string, log *slog.Logger) (*builder, error) {
	b := &builder{
		h:      h,
		root:   root,
		log:    log,
		binDir: "/usr/bin",
		pyBin:  fmt.Sprintf("/usr/bin/python%d.%d", h.Version[0], h.Version[1]),
	}
	stdlib, err := relocate(h.BasePrefix, h.Stdlib)
	if err != nil {
		return nil, err
	}
	b.stdlib = stdlib
	b.trees = []pyTree{{src: h.Stdlib, dst: stdlib}}
	for _, t := range []struct{ prefix, dir string }{
		{h.BaseExecPrefix, h.PlatStdlib},
		{h.BaseExecPrefix, h.Dynload},
	} {
		covered := false
		for _, have := range b.trees {
			if within(t.dir, have.src) {
				covered = true
			}
		}
		if covered {
			continue
		}
		dst, err := relocate(t.prefix, t.dir)
		if err != nil {
			return nil, err
		}
		b.trees = append(b.trees, pyTree{src: t.dir, dst: dst})
	}
	return b, nil
}

// relocate maps a directory below prefix on the host to the same place
// below /usr in the rootfs.
func relocate(prefix, dir string) (string, error) {
	rel, err := filepath.Rel(prefix, dir)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("unsupported python layout: %s is not below its prefix %s", dir, prefix)
	}
	return "/usr/" + filepath.ToSlash(rel), nil
}

// within reports whether path is dir or below it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// inRoot maps a host path inside one of the copied stdlib trees to its
// in-root path.
func (b *builder) inRoot(hostPath string) (string, bool) {
	for _, t := range b.trees {
		if within(hostPath, t.src) {
			rel, _ := filepath.Rel(t.src, hostPath)
			return path.Join(t.dst, filepath.ToSlash(rel)), true
		}
	}
	return "", false
}

// at returns the host path of an in-root path.
func (b *builder) at(inRoot string) string {
	return filepath.Join(b.root, filepath.FromSlash(inRoot))
}

// run performs the build steps in order. Cancelling ctx stops it between
// steps and within the long ones (copies, the interpreter runs); the
// caller removes the partial tree.
func (b *builder) run(ctx context.Context) error {
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"make skeleton", b.skeleton},
		{"copy standard library", b.copyStdlib},
		{"copy interpreter", b.copyInterpreter},
		{"copy shared libraries", b.copyLibraries},
		{"copy ensurepip wheels", b.copyWheels},
		{"write /etc", b.writeEtc},
		{"install CA bundle", b.installCABundle},
		{"copy time zone data", b.copyZoneinfo},
		{"compile bytecode", b.compileBytecode},
		{"make read-only", func(context.Context) error { return Seal(b.root) }},
		{"smoke test", b.smokeTest},
	}
	for _, s := range steps {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		start := time.Now()
		if err := s.fn(ctx); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		b.log.Debug("rootfs build step", "step", s.name, "duration", time.Since(start))
	}
	return nil
}

// skeleton makes the top-level layout: usrmerge symlinks, the mountpoints
// and the directories the other steps fill.
func (b *builder) skeleton(context.Context) error {
	if err := os.Mkdir(b.root, 0o755); err != nil {
		return err
	}
	for _, d := range append([]string{"/usr/bin", "/usr/lib", "/etc"}, layout.MountPoints...) {
		if err := os.MkdirAll(b.at(d), 0o755); err != nil {
			return err
		}
	}
	for name, target := range map[string]string{"bin": "usr/bin", "lib": "usr/lib"} {
		if err := os.Symlink(target, b.at("/"+name)); err != nil {
			return err
		}
	}
	// The jail bind-mounts its init over this empty file.
	return writeFile(b.at(layout.Init), "", execMode)
}

// stdlibFilter keeps what a sandboxed program can use of the standard
// library: no installed packages (site-packages is created empty), no test
// suites, no Tk (its libraries are not copied), no static libraries or
// test extension modules, and only the .pyc files of this interpreter's
// cache tag at optimization level 0.
func stdlibFilter(cacheTag string) treeFilter {
	pycSuffix := "." + cacheTag + ".pyc"
	return func(rel string, isDir bool) treeAction {
		parts := strings.Split(rel, "/")
		name := parts[len(parts)-1]
		top := len(parts) == 1
		if isDir {
			switch {
			case top && name == "site-packages":
				return emptyDir
			case top && (name == "dist-packages" || name == "idlelib" || name == "tkinter" || name == "turtledemo"):
				return skipEntry
			case name == "test" || name == "tests" || name == "idle_test":
				return skipEntry
			}
			return copyEntry
		}
		switch {
		case len(parts) >= 2 && parts[len(parts)-2] == "__pycache__":
			if !strings.HasSuffix(name, pycSuffix) {
				return skipEntry
			}
		case top && name == "EXTERNALLY-MANAGED":
			// PEP 668 marker of the host's package manager, which does not
			// manage this tree.
			return skipEntry
		case strings.HasPrefix(parts[0], "config-") && !top:
			// Static libpython, object files and the libpython symlink are
			// only for building embedding programs.
			if strings.HasSuffix(name, ".a") || strings.HasSuffix(name, ".o") || strings.Contains(name, ".so") {
				return skipEntry
			}
		case strings.HasSuffix(name, ".so") && excludedExtension(name):
			return skipEntry
		}
		return copyEntry
	}
}

// excludedExtension reports extension modules that exist only for
// CPython's own test suite, or need Tk.
func excludedExtension(file string) bool {
	mod, _, _ := strings.Cut(file, ".")
	switch {
	case strings.HasPrefix(mod, "_test"), strings.HasPrefix(mod, "xxlimited"):
		return true
	}
	switch mod {
	case "_ctypes_test", "_xxtestfuzz", "xxsubtype", "_tkinter":
		return true
	}
	return false
}

func (b *builder) copyStdlib(ctx context.Context) error {
	for _, t := range b.trees {
		if err := os.MkdirAll(filepath.Dir(b.at(t.dst)), 0o755); err != nil {
			return err
		}
		copied, err := copyTree(ctx, t.src, b.at(t.dst), stdlibFilter(b.h.CacheTag))
		if err != nil {
			return err
		}
		for _, f := range copied.files {
			if strings.HasSuffix(f.dst, ".so") {
				b.modules = append(b.modules, f)
			}
		}
	}
	// Empty site-packages directories where the interpreter's sysconfig
	// puts them, and the conventional one in the stdlib directory.
	dirs := []string{b.stdlib + "/site-packages"}
	for _, p := range []struct{ prefix, dir string }{
		{b.h.BasePrefix, b.h.PureLib},
		{b.h.BaseExecPrefix, b.h.PlatLib},
	} {
		if d, err := relocate(p.prefix, p.dir); err == nil && filepath.IsAbs(p.dir) && safeInRoot(d) {
			dirs = append(dirs, d)
		}
	}
	for _, d := range dirs {
		if err := os.MkdirAll(b.at(d), 0o755); err != nil {
			return err
		}
	}
	return nil
}

func (b *builder) copyInterpreter(context.Context) error {
	fi, err := os.Stat(b.h.Executable)
	if err != nil {
		return err
	}
	if err := copyFile(b.h.Executable, b.at(b.pyBin), execMode, fi.ModTime()); err != nil {
		return err
	}
	for _, name := range []string{"python3", "python"} {
		if err := os.Symlink(path.Base(b.pyBin), b.at(b.binDir+"/"+name)); err != nil {
			return err
		}
	}
	return nil
}

// copyLibraries copies the shared-library closure of the interpreter and
// of every extension module, resolved as the host's dynamic loader would,
// into one directory the copied loader searches by default, and puts the
// loader at the executable's PT_INTERP path. Extension modules whose
// libraries the host lacks are dropped: they cannot load on the host
// either.
func (b *builder) copyLibraries(ctx context.Context) error {
	r, err := newLibResolver(b.h.Executable)
	if err != nil {
		return err
	}
	exe, err := r.walk(b.h.Executable, nil)
	if err != nil {
		return err
	}
	if len(exe.missing) > 0 {
		return fmt.Errorf("python's libraries are not all on this host: %s", strings.Join(uniq(exe.missing), ", "))
	}
	// glibc also searches the executable's DT_RPATH for dlopened objects.
	var exeChain []string
	if len(exe.runpath) == 0 {
		exeChain = exe.rpath
	}
	for _, name := range dlopenedLibs {
		if _, ok := r.libs[name]; ok {
			continue
		}
		if p := r.find(name, exe, exeChain); p != "" {
			r.libs[name] = p
			if _, err := r.walk(p, exeChain); err != nil {
				return err
			}
		}
	}
	for _, m := range b.modules {
		o, err := r.walk(m.src, exeChain)
		var reason string
		switch {
		case err != nil:
			reason = err.Error()
		case len(o.missing) > 0:
			reason = "missing " + strings.Join(uniq(o.missing), ", ")
		default:
			continue
		}
		b.log.Warn("rootfs: dropping extension module", "module", m.src, "reason", reason)
		b.dropped = append(b.dropped, path.Base(filepath.ToSlash(m.dst)))
		if err := os.Remove(m.dst); err != nil {
			return err
		}
	}

	b.libDir = loaderLibDir(exe.interp, multiarchTriplet(exe.machine))
	if err := os.MkdirAll(b.at(b.libDir), 0o755); err != nil {
		return err
	}
	var jobs []fileJob
	for name, p := range r.libs {
		if strings.Contains(name, "/") {
			return fmt.Errorf("DT_NEEDED %q is a path; not supported", name)
		}
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		jobs = append(jobs, fileJob{src: p, dst: b.at(b.libDir + "/" + name), mode: modeFor(fi.Mode()), mtime: fi.ModTime()})
		b.libraries = append(b.libraries, name)
	}
	sort.Strings(b.libraries)
	if exe.interp == "" {
		return copyFiles(ctx, jobs) // a static interpreter
	}
	ldName := path.Base(exe.interp)
	if _, ok := r.libs[ldName]; !ok {
		fi, err := os.Stat(exe.interp)
		if err != nil {
			return fmt.Errorf("python's ELF interpreter: %w", err)
		}
		jobs = append(jobs, fileJob{src: exe.interp, dst: b.at(b.libDir + "/" + ldName), mode: execMode, mtime: fi.ModTime()})
		b.libraries = append(b.libraries, ldName)
	}
	if err := copyFiles(ctx, jobs); err != nil {
		return err
	}
	return b.linkInterp(exe.interp, b.libDir+"/"+ldName)
}

// loaderLibDir picks the directory for shared libraries: the first of the
// multiarch directory, /usr/lib64 and /usr/lib that the loader searches
// without an ld.so.cache. glibc keeps its default search path as plain
// strings in the loader, so their presence is checked there.
func loaderLibDir(interp, triplet string) string {
	var candidates []string
	if triplet != "" {
		candidates = append(candidates, "/usr/lib/"+triplet)
	}
	candidates = append(candidates, "/usr/lib64")
	if data, err := os.ReadFile(interp); err == nil {
		for _, d := range candidates {
			if bytes.Contains(data, []byte(d+"/")) {
				return d
			}
		}
	}
	return "/usr/lib"
}

// linkInterp makes the PT_INTERP path (e.g. /lib64/ld-linux-x86-64.so.2)
// lead to the copied loader, usrmerge style: /lib64 -> usr/lib64 and
// /usr/lib64/ld-linux-x86-64.so.2 -> ../lib/x86_64-linux-gnu/....
func (b *builder) linkInterp(interp, loader string) error {
	interp = path.Clean(interp)
	inUsr := interp
	if !strings.HasPrefix(interp, "/usr/") {
		top := strings.Split(interp, "/")[1]
		inUsr = "/usr" + interp
		if _, err := os.Lstat(b.at("/" + top)); errors.Is(err, fs.ErrNotExist) {
			if err := os.Symlink("usr/"+top, b.at("/"+top)); err != nil {
				return err
			}
		}
	}
	if inUsr == loader {
		return nil
	}
	if err := os.MkdirAll(b.at(path.Dir(inUsr)), 0o755); err != nil {
		return err
	}
	rel, err := filepath.Rel(path.Dir(inUsr), loader)
	if err != nil {
		return err
	}
	return os.Symlink(rel, b.at(inUsr))
}

// copyWheels copies the wheels of a distribution's WHEEL_PKG_DIR (Debian
// keeps ensurepip's pip there instead of in ensurepip/_bundled) and finds
// the pip wheel.
func (b *builder) copyWheels(ctx context.Context) error {
	dirs := []string{b.stdlib + "/ensurepip/_bundled"}
	if w := b.h.WheelPkgDir; filepath.IsAbs(w) && safeInRoot(w) {
		if fi, err := os.Stat(w); err == nil && fi.IsDir() {
			if err := os.MkdirAll(b.at(w), 0o755); err != nil {
				return err
			}
			wheels, err := filepath.Glob(filepath.Join(w, "*.whl"))
			if err != nil {
				return err
			}
			var jobs []fileJob
			for _, p := range wheels {
				if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
					jobs = append(jobs, fileJob{src: p, dst: b.at(path.Join(w, filepath.Base(p))), mode: fileMode, mtime: fi.ModTime()})
				}
			}
			if err := copyFiles(ctx, jobs); err != nil {
				return err
			}
			dirs = append(dirs, filepath.Clean(w))
		}
	}
	b.pipWheel = findPipWheel(b.root, dirs)
	return nil
}

// findPipWheel returns the in-root path of the newest pip wheel in dirs.
func findPipWheel(root string, dirs []string) string {
	best, bestV := "", pyVersion{}
	for _, d := range dirs {
		matches, _ := filepath.Glob(filepath.Join(root, d, "pip-*.whl"))
		for _, m := range matches {
			ver, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(m), "pip-"), "-")
			v, err := parseVersion(ver)
			if err != nil {
				continue
			}
			if best == "" || compareVersions(v, bestV) > 0 {
				best, bestV = path.Join(d, filepath.Base(m)), v
			}
		}
	}
	return best
}

// safeInRoot reports whether an in-root path is somewhere the build may
// create files: not on a mountpoint the jail covers.
func safeInRoot(p string) bool {
	p = path.Clean(p)
	if !path.IsAbs(p) || p == "/" {
		return false
	}
	for _, m := range layout.MountPoints {
		if p == m || strings.HasPrefix(p, m+"/") {
			return false
		}
	}
	return true
}

// writeEtc writes the jail's own /etc files and copies the host's public
// tables. Nothing else comes from the host's /etc but the CA bundle.
func (b *builder) writeEtc(ctx context.Context) error {
	for _, f := range layout.Etc() {
		if err := writeFile(b.at("/etc/"+f.Name), f.Content, fileMode); err != nil {
			return err
		}
	}
	var jobs []fileJob
	for _, p := range hostEtcCopies {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			jobs = append(jobs, fileJob{src: p, dst: b.at(p), mode: fileMode, mtime: fi.ModTime()})
		}
	}
	return copyFiles(ctx, jobs)
}

// installCABundle copies the host's CA bundle to Debian's path and links
// the interpreter's OpenSSL default file and directory to it, so
// ssl.create_default_context() verifies servers.
func (b *builder) installCABundle(context.Context) error {
	src := ""
	for _, p := range []string{hostCABundle, b.h.OpenSSLCAFile} {
		if p == "" {
			continue
		}
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			src = p
			break
		}
	}
	if src == "" {
		b.log.Warn("rootfs: no CA bundle on the host; TLS verification will fail in jails")
		return nil
	}
	if err := os.MkdirAll(b.at(path.Dir(caBundle)), 0o755); err != nil {
		return err
	}
	if err := copyFile(src, b.at(caBundle), fileMode, time.Time{}); err != nil {
		return err
	}
	for _, l := range []struct{ link, target string }{
		{b.h.OpenSSLCAFile, caBundle},
		{b.h.OpenSSLCAPath, path.Dir(caBundle)},
	} {
		link := path.Clean(l.link)
		if l.link == "" || link == l.target || !safeInRoot(link) {
			continue
		}
		if _, err := os.Lstat(b.at(link)); err == nil {
			continue // something is there already
		}
		if err := os.MkdirAll(b.at(path.Dir(link)), 0o755); err != nil {
			return err
		}
		rel, err := filepath.Rel(path.Dir(link), l.target)
		if err != nil {
			return err
		}
		if err := os.Symlink(rel, b.at(link)); err != nil {
			return err
		}
	}
	return nil
}

func (b *builder) copyZoneinfo(ctx context.Context) error {
	fi, err := os.Stat(hostZoneinfo)
	if err != nil || !fi.IsDir() {
		return nil
	}
	if err := os.MkdirAll(b.at(path.Dir(hostZoneinfo)), 0o755); err != nil {
		return err
	}
	_, err = copyTree(ctx, hostZoneinfo, b.at(hostZoneinfo), func(rel string, isDir bool) treeAction {
		if rel == "right" { // leap-second variants: half the files, rarely wanted
			return skipEntry
		}
		return copyEntry
	})
	return err
}

// compileScript (compile.py) compiles the sources listed on stdin as JSON
// [[path, path-in-rootfs], ...] to their __pycache__ files,
// timestamp-validated, and prints the failures.
//
//go:embed compile.py
var compileScript string

// compileBatch is how many stale sources make it worth another compiler
// process.
const compileBatch = 200

// compileBytecode makes sure every standard library module has a valid
// .pyc, so imports on the read-only root never compile. The host's .pyc
// files were copied with their sources' modification times and normally
// all still match; only the missing or stale ones are compiled, by the
// host interpreter itself (same magic number, same cache tag). Failures
// only cost start-up time, so they are logged, not fatal.
func (b *builder) compileBytecode(ctx context.Context) error {
	magic, err := hex.DecodeString(b.h.PycMagic)
	if err != nil {
		return fmt.Errorf("pyc magic %q: %w", b.h.PycMagic, err)
	}
	var stale [][2]string
	for _, t := range b.trees {
		err := filepath.WalkDir(b.at(t.dst), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "__pycache__" {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(d.Name(), ".py") {
				return nil
			}
			pyc := filepath.Join(filepath.Dir(p), "__pycache__", strings.TrimSuffix(d.Name(), ".py")+"."+b.h.CacheTag+".pyc")
			if !pycValid(p, pyc, magic) {
				stale = append(stale, [2]string{p, filepath.ToSlash(strings.TrimPrefix(p, b.root))})
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if len(stale) == 0 {
		return nil
	}
	b.log.Debug("rootfs: compiling stale or missing bytecode", "files", len(stale))
	n := min(runtime.NumCPU(), (len(stale)+compileBatch-1)/compileBatch)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = b.compile(ctx, stale[i*len(stale)/n:(i+1)*len(stale)/n])
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err // the compilers were killed: no failure of theirs
	}
	if err := errors.Join(errs...); err != nil {
		b.log.Warn("rootfs: some modules have no bytecode and compile at each import", "err", err)
	}
	return nil
}

// compile runs compileScript with the host interpreter over files.
func (b *builder) compile(ctx context.Context, files [][2]string) error {
	in, err := json.Marshal(files)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.h.Executable, "-I", "-S", "-c", compileScript)
	// No SOURCE_DATE_EPOCH: it would make py_compile write hash-based .pyc.
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C.UTF-8"}
	cmd.Stdin = bytes.NewReader(in)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("compile bytecode: %w: %s", err, lastLines(stderr.String(), 5))
	}
	var failed map[string]string
	if err := json.Unmarshal(stdout.Bytes(), &failed); err != nil {
		return fmt.Errorf("compile bytecode: parse output: %w", err)
	}
	if len(failed) > 0 {
		return fmt.Errorf("compile bytecode: %d files failed: %v", len(failed), failed)
	}
	return nil
}

// pycValid reports whether pyc is bytecode for src that CPython accepts
// without recompiling: the interpreter's magic number and, for
// timestamp-based files (flags 0), the source's mtime and size. Hash-based
// files are checked by the interpreter itself.
func pycValid(src, pyc string, magic []byte) bool {
	st, err := os.Stat(src)
	if err != nil {
		return false
	}
	f, err := os.Open(pyc)
	if err != nil {
		return false
	}
	defer f.Close()
	var h [16]byte
	if _, err := io.ReadFull(f, h[:]); err != nil || !bytes.Equal(h[:4], magic) {
		return false
	}
	if binary.LittleEndian.Uint32(h[4:8]) != 0 {
		return true
	}
	return binary.LittleEndian.Uint32(h[8:12]) == uint32(st.ModTime().Unix()) &&
		binary.LittleEndian.Uint32(h[12:16]) == uint32(st.Size())
}

// smokeScript (smoke.py) runs inside the new rootfs: it imports every extension
// module (which catches a missing shared library), a few packages wrapping
// them, and makes an SSL context with the CA bundle, and reports.
//
//go:embed smoke.py
var smokeScript string

// smokeTest runs the new interpreter chrooted into the tree as nobody,
// when we are root (it is skipped otherwise), and fails the build if the
// interpreter does not find its prefix or cannot import a module.
func (b *builder) smokeTest(ctx context.Context) error {
	if os.Geteuid() != 0 {
		b.log.Debug("rootfs: smoke test skipped, needs root for chroot")
		return nil
	}
	dynload, ok := b.inRoot(b.h.Dynload)
	if !ok {
		return fmt.Errorf("lib-dynload %s was not copied", b.h.Dynload)
	}
	out, err := runInRoot(ctx, b.root, []string{Executable, "-W", "ignore", "-c", smokeScript, dynload})
	if err != nil {
		return err
	}
	var res struct {
		Prefix     string            `json:"prefix"`
		ExecPrefix string            `json:"exec_prefix"`
		Version    [3]int            `json:"version"`
		Path       []string          `json:"path"`
		Failed     map[string]string `json:"failed"`
		CACerts    int               `json:"ca_certs"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return fmt.Errorf("parse output %q: %w", lastLines(string(out), 3), err)
	}
	switch {
	case res.Prefix != "/usr" || res.ExecPrefix != "/usr":
		return fmt.Errorf("sys.prefix %q, sys.exec_prefix %q in the rootfs, want /usr", res.Prefix, res.ExecPrefix)
	case res.Version != b.h.Version:
		return fmt.Errorf("rootfs python is %v, built from %v", res.Version, b.h.Version)
	case len(res.Failed) > 0:
		return fmt.Errorf("imports failed in the rootfs: %v", res.Failed)
	}
	return nil
}

// runInRoot runs argv chrooted into root as nobody with the environment a
// jail gives, and returns its stdout. Cancelling ctx kills it.
func runInRoot(ctx context.Context, root string, argv []string) ([]byte, error) {
	cmdCtx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	cmd := exec.CommandContext(cmdCtx, argv[0], argv[1:]...)
	cmd.Path = argv[0] // resolved inside the chroot, not on the host's PATH
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin", "LANG=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1", "HOME=" + layout.Work}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Chroot:     root,
		Credential: &syscall.Credential{Uid: layout.Nobody, Gid: layout.Nobody, NoSetGroups: false},
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("run %s in %s: %w", argv[0], root, ctx.Err())
		}
		return nil, fmt.Errorf("run %s in %s: %w: %s", argv[0], root, err, lastLines(stderr.String(), 10))
	}
	return stdout.Bytes(), nil
}

func uniq(list []string) []string {
	var out []string
	for _, s := range list {
		out = appendUnique(out, s)
	}
	return out
}
