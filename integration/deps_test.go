package integration

import (
	"archive/zip"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
)

// wheel is one pure-Python wheel of a test wheelhouse.
type wheel struct {
	name, version string
	requires      []string          // Requires-Dist
	files         map[string]string // path in the wheel -> content
}

// testWheels is the wheelhouse the dependency tests install from (PyPI is
// not reachable): a package with a transitive dependency (cbalpha needs
// cbbeta), two versions of one package (cbgamma) and, by its absence, a
// package that does not exist (cbmissing); for the preload tests, a
// package that says when and under which environment it was imported
// (cbmod) and one that cannot be imported (cbbroken).
var testWheels = []wheel{
	{name: "cbalpha", version: "1.0", requires: []string{"cbbeta>=1"},
		files: map[string]string{"cbalpha/__init__.py": "from cbbeta import VALUE\nNAME = 'alpha'\n"}},
	{name: "cbbeta", version: "1.0",
		files: map[string]string{"cbbeta/__init__.py": "VALUE = 42\n"}},
	{name: "cbgamma", version: "1.0",
		files: map[string]string{"cbgamma/__init__.py": "VERSION = '1.0'\n"}},
	{name: "cbgamma", version: "2.0",
		files: map[string]string{"cbgamma/__init__.py": "VERSION = '2.0'\n"}},
	{name: "cbmod", version: "1.0",
		files: map[string]string{"cbmod/__init__.py": "import os, time\nIMPORTED_AT = time.time()\n" +
			"SEEN = os.environ.get('CB_PRELOAD_PROBE')\nprint('cbmod is being imported')\n"}},
	{name: "cbbroken", version: "1.0",
		files: map[string]string{"cbbroken/__init__.py": "raise RuntimeError('cbbroken cannot be imported')\n"}},
}

// wheelhouse writes testWheels into a new directory readable by the build
// jail's user, and returns it with the SHA-256 of each wheel file by
// "name-version".
func wheelhouse(t *testing.T) (string, map[string]string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "wheels")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	hashes := map[string]string{}
	for _, w := range testWheels {
		p := filepath.Join(dir, w.name+"-"+w.version+"-py3-none-any.whl")
		if err := writeWheel(p, w); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		hashes[w.name+"-"+w.version] = "sha256:" + hex.EncodeToString(sum[:])
	}
	return dir, hashes
}

// writeWheel writes a minimal wheel: the package's files and a dist-info
// with METADATA, WHEEL and a RECORD that hashes them.
func writeWheel(path string, w wheel) error {
	di := w.name + "-" + w.version + ".dist-info"
	files := map[string]string{}
	for k, v := range w.files {
		files[k] = v
	}
	meta := "Metadata-Version: 2.1\nName: " + w.name + "\nVersion: " + w.version + "\n"
	for _, r := range w.requires {
		meta += "Requires-Dist: " + r + "\n"
	}
	files[di+"/METADATA"] = meta
	files[di+"/WHEEL"] = "Wheel-Version: 1.0\nGenerator: cellblock-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
	var record strings.Builder
	for name, content := range files {
		sum := sha256.Sum256([]byte(content))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", name, base64.RawURLEncoding.EncodeToString(sum[:]), len(content))
	}
	record.WriteString(di + "/RECORD,,\n")
	files[di+"/RECORD"] = record.String()

	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	zw := zip.NewWriter(f)
	for name, content := range files {
		fw, err := zw.Create(name)
		if err != nil {
			f.Close()
			return err
		}
		if _, err := fw.Write([]byte(content)); err != nil {
			f.Close()
			return err
		}
	}
	if err := zw.Close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// depsDaemon starts a daemon that installs from a fresh test wheelhouse
// only (--no-index --find-links), with pip: uv is hidden from it unless
// withUV.
func depsDaemon(t *testing.T, withUV bool, args ...string) (*Daemon, map[string]string) {
	t.Helper()
	requireRoot(t)
	dir, hashes := wheelhouse(t)
	if !withUV {
		// The daemon looks for uv on its PATH; keep one without it.
		t.Setenv("PATH", pathWithout(t, "uv"))
	}
	d := startDaemon(t, append([]string{"--no-index", "--find-links", dir}, args...)...)
	return d, hashes
}

// pathWithout is $PATH without the directories that hold name.
func pathWithout(t *testing.T, name string) string {
	var keep []string
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			continue
		}
		keep = append(keep, dir)
	}
	return strings.Join(keep, string(filepath.ListSeparator))
}

// depsInfo reads the daemon's dependency section.
func depsInfo(t *testing.T, d *Daemon) *api.DependencyInfo {
	t.Helper()
	info, err := d.Client.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.Dependencies == nil {
		t.Fatalf("info has no dependencies section: %+v", info)
	}
	return info.Dependencies
}

const pep723Script = `# /// script
# requires-python = ">=3.8"
# dependencies = [
#   "CBAlpha",  # pulls in cbbeta
# ]
# [tool.uv]
# index-url = "http://127.0.0.1:9/never-used"
# ///
import cbalpha, cbbeta
print(cbalpha.NAME, cbbeta.VALUE)
`

// TestDepsPEP723Script runs a script whose inline metadata asks for a
// package with a transitive dependency: the first run builds the
// environment, the second reuses it; the result records the resolved set
// with the hashes of the wheels used.
func TestDepsPEP723Script(t *testing.T) {
	d, hashes := depsDaemon(t, false)
	first := runOK(t, d, &api.RunRequest{Code: pep723Script})
	if first.Stdout != "alpha 42\n" {
		t.Fatalf("stdout %q", first.Stdout)
	}
	env := first.Environment
	if env == nil || env.ID == "" || env.CacheHit || env.Policy != "wheels-only" {
		t.Fatalf("first run's environment: %+v", env)
	}
	got := map[string]string{}
	for _, p := range env.Packages {
		got[p.Name+"-"+p.Version] = p.Hash
	}
	want := map[string]string{"cbalpha-1.0": hashes["cbalpha-1.0"], "cbbeta-1.0": hashes["cbbeta-1.0"]}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("resolved set %v, want %v (name-version: wheel hash)", got, want)
	}

	second := runOK(t, d, &api.RunRequest{Code: pep723Script})
	if second.Environment == nil || !second.Environment.CacheHit || second.Environment.ID != env.ID {
		t.Fatalf("second run's environment: %+v (first %s)", second.Environment, env.ID)
	}
	if us := second.Phases.EnvUs; us > 100_000 {
		t.Errorf("attaching a cached environment took %d µs", us)
	}
	t.Logf("first run: env %d ms; cached run: env %d µs", first.Phases.EnvUs/1000, second.Phases.EnvUs)

	// Python's site module sees the environment as installed packages:
	// after the standard library, not ahead of it as PYTHONPATH would be.
	// (PYTHONPATH holds only the cellblock package's directory.)
	res := runOK(t, d, &api.RunRequest{Code: pep723Script + `
import sys, os, cbalpha
site = os.path.dirname(os.path.dirname(cbalpha.__file__))
assert os.environ["PYTHONPATH"] == "/usr/lib/cellblock", os.environ["PYTHONPATH"]
assert sys.path.index(site) > sys.path.index(os.path.dirname(os.__file__)), sys.path
print("site ok")
`})
	if !strings.HasSuffix(res.Stdout, "site ok\n") {
		t.Errorf("stdout %q", res.Stdout)
	}
}

// TestDepsWithCLI uses cellblock run --with, and a script file with PEP 723
// metadata through the CLI.
func TestDepsWithCLI(t *testing.T) {
	d, _ := depsDaemon(t, false)
	out, errs, code := cli(t, d, "", "run", "--with", "cbgamma==1.0", "--with", "cbalpha", "-c", "import cbgamma, cbalpha; print(cbgamma.VERSION, cbalpha.NAME)")
	if code != 0 || out != "1.0 alpha\n" {
		t.Fatalf("--with: exit %d stdout %q stderr %q", code, out, errs)
	}
	script := filepath.Join(t.TempDir(), "s.py")
	if err := os.WriteFile(script, []byte(pep723Script), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errs, code = cli(t, d, "", "run", "--json", script)
	var res api.Result
	mustJSON(t, out, &res)
	if code != 0 || res.Stdout != "alpha 42\n" || res.Environment == nil || len(res.Environment.Packages) != 2 {
		t.Fatalf("PEP 723 file: exit %d stderr %q result %+v", code, errs, res)
	}
}

// TestDepsVersionConstraints picks between two versions of one package.
func TestDepsVersionConstraints(t *testing.T) {
	d, _ := depsDaemon(t, false)
	for req, want := range map[string]string{
		"cbgamma":            "2.0",
		"cbgamma<2":          "1.0",
		"cbgamma==1.*":       "1.0",
		"cbgamma >=1, !=2.0": "1.0",
		"cbgamma>1.0":        "2.0",
	} {
		res := runOK(t, d, &api.RunRequest{Code: "import cbgamma; print(cbgamma.VERSION)", Dependencies: []string{req}})
		if got := strings.TrimSpace(res.Stdout); got != want {
			t.Errorf("%q installed cbgamma %s, want %s", req, got, want)
		}
		if p := res.Environment.Packages; len(p) != 1 || p[0].Version != want {
			t.Errorf("%q: recorded %+v", req, p)
		}
	}
	// The same requirements written differently share an environment.
	a := runOK(t, d, &api.RunRequest{Code: "pass", Dependencies: []string{"CBGamma < 2"}})
	b := runOK(t, d, &api.RunRequest{Code: "pass", Dependencies: []string{"cbgamma<2"}})
	if a.Environment.ID != b.Environment.ID || !a.Environment.CacheHit {
		t.Errorf("normalized requirements got environments %+v and %+v", a.Environment, b.Environment)
	}
}

// TestDepsErrors covers requirements that cannot be met and requests that
// are malformed.
func TestDepsErrors(t *testing.T) {
	d, _ := depsDaemon(t, false)
	for _, c := range []struct {
		name    string
		req     api.RunRequest
		errType api.ErrorType
		field   string
		has     []string
	}{
		{"missing package", api.RunRequest{Code: "pass", Dependencies: []string{"cbmissing"}},
			api.ErrDependency, "dependencies", []string{"cbmissing", "pip"}},
		{"unsatisfiable version", api.RunRequest{Code: "# /// script\n# dependencies = ['cbgamma>=3']\n# ///\n"},
			api.ErrDependency, "dependencies", []string{"cbgamma>=3", "from versions: 1.0, 2.0"}},
		{"option as requirement", api.RunRequest{Code: "pass", Dependencies: []string{"--index-url=http://evil.example/"}},
			api.ErrBadRequest, "dependencies[0]", []string{"package name"}},
		{"direct reference", api.RunRequest{Code: "pass", Dependencies: []string{"cbgamma", "cbgamma @ file:///etc/passwd"}},
			api.ErrBadRequest, "dependencies[1]", []string{"direct references"}},
		{"metadata type", api.RunRequest{Code: "# /// script\n# dependencies = 'cbgamma'\n# ///\n"},
			api.ErrBadRequest, "code", []string{"'dependencies' must be an array"}},
		{"metadata toml", api.RunRequest{Code: "# /// script\n# dependencies = [\n# ///\n"},
			api.ErrBadRequest, "code", []string{"PEP 723"}},
		{"requires-python", api.RunRequest{Code: "# /// script\n# requires-python = '>=3.99'\n# ///\n"},
			api.ErrUnknownPython, "code", []string{">=3.99", "available:"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := run(t, d, &c.req)
			e := res.Error
			if e == nil || e.Type != c.errType || e.Field != c.field {
				t.Fatalf("error %+v; want type %s field %s", e, c.errType, c.field)
			}
			for _, h := range c.has {
				if !strings.Contains(e.Message, h) {
					t.Errorf("message %q lacks %q", e.Message, h)
				}
			}
		})
	}
	_, errs, code := cli(t, d, "", "run", "--with", "cbmissing", "-c", "pass")
	if code != 125 || !strings.Contains(errs, "dependency_error") || !strings.Contains(errs, "cbmissing") {
		t.Errorf("CLI with a missing package: exit %d stderr %q", code, errs)
	}
	// Nothing is left of the failed builds.
	entries, _ := filepath.Glob(filepath.Join(d.StateDir, "envs", "*"))
	if len(entries) != 0 {
		t.Errorf("failed builds left %v", entries)
	}
}

// TestDepsIsolation: a run without dependencies cannot import what another
// run's environment holds, and a run cannot change its environment.
func TestDepsIsolation(t *testing.T) {
	d, _ := depsDaemon(t, false)
	res := runOK(t, d, &api.RunRequest{Code: "import cbalpha; print(cbalpha.__file__)", Dependencies: []string{"cbalpha"}})
	envDir := filepath.Join(d.StateDir, "envs", res.Environment.ID)

	res = run(t, d, &api.RunRequest{Code: "import cbalpha"})
	if res.Error != nil || res.ExitCode != 1 || !strings.Contains(res.Stderr, "No module named 'cbalpha'") {
		t.Errorf("a run without dependencies: exit %d stderr %q error %+v", res.ExitCode, res.Stderr, res.Error)
	}

	res = runOK(t, d, &api.RunRequest{Dependencies: []string{"cbalpha"}, Code: `
import errno, os, shutil, cbalpha
pkg = os.path.dirname(cbalpha.__file__)
site = os.path.dirname(pkg)
tries = {
    "create": lambda: open(os.path.join(pkg, "evil.py"), "w"),
    "overwrite": lambda: open(cbalpha.__file__, "w"),
    "append": lambda: open(cbalpha.__file__, "a"),
    "chmod": lambda: os.chmod(cbalpha.__file__, 0o777),
    "unlink": lambda: os.unlink(cbalpha.__file__),
    "rename": lambda: os.rename(pkg, os.path.join(site, "moved")),
    "mkdir": lambda: os.mkdir(os.path.join(site, "new")),
    "pth": lambda: open(os.path.join(site, "evil.pth"), "w"),
    "rmtree": lambda: shutil.rmtree(pkg),
}
for name, f in tries.items():
    try:
        f()
        print("WROTE", name)
    except OSError as e:
        print(name, errno.errorcode[e.errno])
`})
	// EROFS from the read-only mount, or EACCES where the permission
	// check (a 0444 file not the jail's) comes first.
	for _, line := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
		if !strings.HasSuffix(line, " EROFS") && !strings.HasSuffix(line, " EACCES") {
			t.Errorf("a run changed its environment: %s\n%s", line, res.Stdout)
		}
	}
	// On the host it is root's and read-only.
	for _, p := range []string{envDir, filepath.Join(envDir, "site-packages", "cbalpha", "__init__.py")} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o222 != 0 {
			t.Errorf("%s is writable: %v", p, fi.Mode())
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Uid != 0 || st.Gid != 0 {
			t.Errorf("%s is not root's", p)
		}
	}
	out, err := exec.Command("find", envDir, "-not", "-user", "root").CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) != 0 {
		t.Errorf("files in the environment not owned by root: %s %v", out, err)
	}
}

// TestDepsConcurrentFirstRunsBuildOnce starts two identical first runs at
// once: one build serves both.
func TestDepsConcurrentFirstRunsBuildOnce(t *testing.T) {
	d, _ := depsDaemon(t, false)
	before := depsInfo(t, d).Builds
	const n = 3
	results := make([]*api.Result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = run(t, d, &api.RunRequest{Code: "import cbalpha; print(cbalpha.NAME)", Dependencies: []string{"cbalpha", "cbgamma<2"}})
		}()
	}
	wg.Wait()
	for i, res := range results {
		if res.Error != nil || res.Stdout != "alpha\n" || res.Environment == nil || res.Environment.ID != results[0].Environment.ID {
			t.Fatalf("run %d: %+v", i, res)
		}
	}
	if got := depsInfo(t, d).Builds - before; got != 1 {
		t.Errorf("%d builds for %d identical concurrent first runs", got, n)
	}
	if got := strings.Count(d.Log(), `"msg":"environment built"`); got != 1 {
		t.Errorf("the daemon logged %d builds:\n%s", got, d.Log())
	}
}

// envIDs lists the environments' ids and whether each is in use.
func envIDs(t *testing.T, d *Daemon) map[string]int {
	t.Helper()
	list, err := d.Client.Envs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]int{}
	for _, e := range list.Envs {
		ids[e.ID] = e.InUse
	}
	return ids
}

// TestDepsEviction: with a budget smaller than any environment, an
// environment lives only while a run holds it, and a held one is never
// evicted to make room for another.
func TestDepsEviction(t *testing.T) {
	// Without jails kept for other shapes, which would hold environments.
	d, _ := depsDaemon(t, false, "--env-cache-size", "1", "--prestart-shapes", "0")
	// A long run holds cbgamma 1.0's environment until it is cancelled.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	long := make(chan error, 1)
	go func() {
		_, err := d.Client.Run(ctx, &api.RunRequest{Code: "import cbgamma, time; time.sleep(120)", Dependencies: []string{"cbgamma==1.0"}})
		long <- err
	}()
	var held string
	if !waitFor(60*time.Second, func() bool {
		for id, inUse := range envIDs(t, d) {
			if inUse > 0 {
				held = id
				return true
			}
		}
		return false
	}) {
		t.Fatalf("the long run's environment never showed up in use: %v", envIDs(t, d))
	}
	// Another environment is built, used and, over budget, evicted once
	// its run is over; the held one stays.
	res := runOK(t, d, &api.RunRequest{Code: "import cbgamma; print(cbgamma.VERSION)", Dependencies: []string{"cbgamma==2.0"}})
	if res.Stdout != "2.0\n" {
		t.Fatalf("stdout %q", res.Stdout)
	}
	if ids := envIDs(t, d); len(ids) != 1 || ids[held] != 1 {
		t.Errorf("while the long run holds %s: %v", held, ids)
	}
	if _, err := os.Stat(filepath.Join(d.StateDir, "envs", res.Environment.ID)); !os.IsNotExist(err) {
		t.Errorf("the evicted environment's directory remains: %v", err)
	}
	if _, err := os.Stat(filepath.Join(d.StateDir, "envs", held)); err != nil {
		t.Errorf("the held environment's directory: %v", err)
	}
	cancel()
	<-long
	if !waitFor(10*time.Second, func() bool { return len(envIDs(t, d)) == 0 }) {
		t.Errorf("after every run ended, over budget: %v", envIDs(t, d))
	}
	// Evicted means rebuilt next time.
	again := runOK(t, d, &api.RunRequest{Code: "pass", Dependencies: []string{"cbgamma==2.0"}})
	if again.Environment.CacheHit {
		t.Errorf("an evicted environment was a cache hit")
	}
	if !strings.Contains(d.Log(), `"msg":"evicted environment"`) {
		t.Errorf("no eviction logged")
	}
}

// TestEnvCommands drives cellblock env build, ls, rm and prune.
func TestEnvCommands(t *testing.T) {
	d, _ := depsDaemon(t, false)
	out, errs, code := cli(t, d, "", "env", "build", "--with", "cbalpha")
	id := strings.TrimSpace(out)
	if code != 0 || !regexp.MustCompile(`^[0-9a-f]{24}$`).MatchString(id) || !strings.Contains(errs, "built") {
		t.Fatalf("env build: exit %d stdout %q stderr %q", code, out, errs)
	}
	out, errs, code = cli(t, d, "", "env", "build", "--json", "--with", "CBAlpha")
	var built api.EnvBuildResult
	mustJSON(t, out, &built)
	if code != 0 || built.Environment.ID != id || !built.Environment.CacheHit {
		t.Fatalf("env build again: exit %d %+v %s", code, built, errs)
	}
	// A run with the same requirements uses the prebuilt environment.
	res := runOK(t, d, &api.RunRequest{Code: "import cbalpha", Dependencies: []string{"cbalpha"}})
	if res.Environment.ID != id || !res.Environment.CacheHit {
		t.Errorf("run after env build: %+v", res.Environment)
	}
	if _, _, code := cli(t, d, "", "env", "build", "--with", "cbgamma<2"); code != 0 {
		t.Fatalf("env build cbgamma: exit %d", code)
	}

	out, _, code = cli(t, d, "", "env", "ls")
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "cbalpha==1.0, cbbeta==1.0") || !strings.Contains(out, "2 environment(s)") {
		t.Errorf("env ls: exit %d\n%s", code, out)
	}
	out, _, _ = cli(t, d, "", "env", "ls", "--json")
	var list api.EnvList
	mustJSON(t, out, &list)
	if len(list.Envs) != 2 || list.TotalBytes <= 0 || list.BudgetBytes != 2<<30 {
		t.Errorf("env ls --json: %+v", list)
	}

	out, errs, code = cli(t, d, "", "env", "rm", id)
	if code != 0 || strings.TrimSpace(out) != id {
		t.Errorf("env rm: exit %d stdout %q stderr %q", code, out, errs)
	}
	if _, err := os.Stat(filepath.Join(d.StateDir, "envs", id)); !os.IsNotExist(err) {
		t.Errorf("removed environment's directory remains: %v", err)
	}
	_, errs, code = cli(t, d, "", "env", "rm", id)
	if code != 125 || !strings.Contains(errs, "not_found") {
		t.Errorf("env rm of a removed id: exit %d stderr %q", code, errs)
	}
	if _, errs, code = cli(t, d, "", "env", "rm", "../../rootfs"); code != 125 || !strings.Contains(errs, "not_found") {
		t.Errorf("env rm of a path: exit %d stderr %q", code, errs)
	}

	out, errs, code = cli(t, d, "", "env", "prune")
	if code != 0 || len(strings.Fields(out)) != 1 || !strings.Contains(errs, "removed 1") {
		t.Errorf("env prune: exit %d stdout %q stderr %q", code, out, errs)
	}
	if ids := envIDs(t, d); len(ids) != 0 {
		t.Errorf("after prune: %v", ids)
	}
	_, errs, code = cli(t, d, "", "env", "build", "--with", "cbmissing")
	if code != 125 || !strings.Contains(errs, "dependency_error") || !strings.Contains(errs, "cbmissing") {
		t.Errorf("env build of a missing package: exit %d stderr %q", code, errs)
	}
}

// TestDepsRequiresPython: requires-python picks among imported Pythons,
// and each gets its own environment in its own layout.
func TestDepsRequiresPython(t *testing.T) {
	d, _ := depsDaemon(t, false)
	info, err := d.Client.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	def := ""
	for _, p := range info.Pythons {
		if p.Default {
			def = p.Version
		}
	}
	other, version := "", ""
	candidates, _ := filepath.Glob("/root/.pyenv/versions/3.*/bin/python3")
	for _, c := range append([]string{"/usr/bin/python3"}, candidates...) {
		out, err := exec.Command(c, "-c", "import platform, sys; print(platform.python_version()); sys.exit(sys.version_info < (3, 8))").Output()
		v := strings.TrimSpace(string(out))
		if err == nil && v != "" && v != def {
			other, version = c, v
			break
		}
	}
	if other == "" {
		t.Skipf("needs a second host Python (3.8 or later) of another version than the default %s", def)
	}
	// The daemon reads its store on every run, so an import shows at once.
	if out, err := exec.Command(bin(t, "cellblockd"), "rootfs", "import", "--python", other, "--state-dir", d.StateDir).CombinedOutput(); err != nil {
		t.Fatalf("import %s: %v\n%s", other, err, out)
	}
	code := fmt.Sprintf("# /// script\n# requires-python = \"==%s\"\n# dependencies = [\"cbgamma<2\"]\n# ///\n"+
		"import platform, cbgamma\nprint(platform.python_version(), cbgamma.VERSION)\n", version)
	res := runOK(t, d, &api.RunRequest{Code: code})
	if want := version + " 1.0\n"; res.Stdout != want || res.Python != version {
		t.Errorf("requires-python ==%s: python %s stdout %q", version, res.Python, res.Stdout)
	}
	res2 := runOK(t, d, &api.RunRequest{Code: "import cbgamma", Dependencies: []string{"cbgamma<2"}})
	if res2.Python != def || res2.Environment.ID == res.Environment.ID {
		t.Errorf("Pythons %s and %s: environments %s and %s", res.Python, res2.Python, res.Environment.ID, res2.Environment.ID)
	}
}

// TestDepsUV builds with uv when it is on the daemon's PATH.
func TestDepsUV(t *testing.T) {
	requireRoot(t)
	if _, err := exec.LookPath("uv"); err != nil {
		t.Skip("uv is not on PATH; the pip path is covered by the other dependency tests")
	}
	d, hashes := depsDaemon(t, true)
	if inst := depsInfo(t, d).Installer; !strings.HasPrefix(inst, "uv") {
		t.Fatalf("installer %q with uv on PATH", inst)
	}
	res := runOK(t, d, &api.RunRequest{Code: pep723Script})
	if res.Stdout != "alpha 42\n" || len(res.Environment.Packages) != 2 {
		t.Fatalf("uv build: %+v", res)
	}
	// uv reports no wheel hashes: the RECORD's hash stands in.
	for _, p := range res.Environment.Packages {
		if !strings.HasPrefix(p.Hash, "record-sha256:") && p.Hash != hashes[p.Name+"-"+p.Version] {
			t.Errorf("package %+v", p)
		}
	}
	res = run(t, d, &api.RunRequest{Code: "pass", Dependencies: []string{"cbmissing"}})
	if res.Error == nil || res.Error.Type != api.ErrDependency || !strings.Contains(res.Error.Message, "cbmissing") {
		t.Errorf("uv with a missing package: %+v", res.Error)
	}
}

// fakeUV stands in for uv to exercise the daemon's uv path (uv found on
// PATH, bind-mounted into the build jail, executed there with uv's
// command line) where uv is not installed: it checks the command line and
// hands the installation to the rootfs's pip.
const fakeUV = `#!/usr/bin/python3
import glob, os, sys
args = sys.argv[1:]
if args == ["--version"]:
    print("uv 0.0.0 (cellblock test stand-in)")
    sys.exit(0)
assert args[:2] == ["pip", "install"], args
for want in ("--target", "--python", "--no-config", "--no-cache", "--compile-bytecode", "--only-binary", "--no-index", "--find-links"):
    assert want in args, (want, args)
assert os.environ.get("UV_PYTHON_DOWNLOADS") == "never", os.environ
out, i = [], 2
while i < len(args):
    if args[i] in ("--python", "--link-mode"):
        i += 2
        continue
    if args[i] not in ("--no-config", "--no-cache", "--compile-bytecode"):
        out.append(args[i])
    i += 1
wheels = glob.glob("/usr/lib/python3*/ensurepip/_bundled/pip-*.whl") + glob.glob("/usr/share/python-wheels/pip-*.whl")
os.environ["PYTHONPATH"] = sorted(wheels)[-1]
os.execv(sys.executable, [sys.executable, "-m", "pip", "install", "--isolated", "--no-cache-dir", "--disable-pip-version-check"] + out)
`

// TestDepsUVPath runs the uv path with a stand-in uv (see fakeUV); the real
// uv is TestDepsUV's.
func TestDepsUVPath(t *testing.T) {
	requireRoot(t)
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("the stand-in uv needs /usr/bin/python3 on the host")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "uv"), []byte(fakeUV), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(filepath.ListSeparator)+pathWithout(t, "uv"))
	d, _ := depsDaemon(t, true)
	if inst := depsInfo(t, d).Installer; inst != "uv 0.0.0 (cellblock test stand-in)" {
		t.Fatalf("installer %q", inst)
	}
	res := runOK(t, d, &api.RunRequest{Code: pep723Script})
	if res.Stdout != "alpha 42\n" || len(res.Environment.Packages) != 2 {
		t.Fatalf("build through the uv path: %+v", res)
	}
	for _, p := range res.Environment.Packages {
		if !strings.HasPrefix(p.Hash, "record-sha256:") {
			t.Errorf("without an installation report the hash is the RECORD's: %+v", p)
		}
	}
	res = run(t, d, &api.RunRequest{Code: "pass", Dependencies: []string{"cbmissing"}})
	if res.Error == nil || res.Error.Type != api.ErrDependency || !strings.Contains(res.Error.Message, "cbmissing") ||
		!strings.Contains(res.Error.Message, "uv 0.0.0") {
		t.Errorf("uv path with a missing package: %+v", res.Error)
	}
}
