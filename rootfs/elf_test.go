package rootfs

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// hostPythonForTest probes the host's python3, skipping when there is none.
func hostPythonForTest(t *testing.T) *hostPython {
	t.Helper()
	if _, err := exec.LookPath(DefaultInterpreter); err != nil {
		t.Skipf("no %s on PATH: %v", DefaultInterpreter, err)
	}
	h, err := probe(context.Background(), DefaultInterpreter)
	if err != nil {
		t.Fatalf("probe %s: %v", DefaultInterpreter, err)
	}
	return h
}

func hasLib(libs map[string]string, prefix string) bool {
	for name := range libs {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

func TestClosureHostPython(t *testing.T) {
	h := hostPythonForTest(t)
	r, err := newLibResolver(h.Executable)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := r.walk(h.Executable, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(exe.missing) > 0 {
		t.Errorf("unresolved: %v", exe.missing)
	}
	if exe.interp == "" {
		t.Errorf("%s has no PT_INTERP", h.Executable)
	}
	if !hasLib(r.libs, "libc.so.6") {
		t.Errorf("closure of %s lacks libc.so.6: %v", h.Executable, r.libs)
	}
	for mod, want := range map[string][]string{
		"_ssl":     {"libssl.so", "libcrypto.so", "libc.so.6"},
		"_sqlite3": {"libsqlite3.so"},
	} {
		t.Run(mod, func(t *testing.T) {
			matches, _ := filepath.Glob(filepath.Join(h.Dynload, mod+".*.so"))
			if len(matches) == 0 {
				t.Skipf("%s has no %s extension module in %s", h.Executable, mod, h.Dynload)
			}
			r, err := newLibResolver(h.Executable)
			if err != nil {
				t.Fatal(err)
			}
			o, err := r.walk(matches[0], nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(o.missing) > 0 {
				t.Errorf("unresolved: %v", o.missing)
			}
			for _, w := range want {
				if !hasLib(r.libs, w) {
					t.Errorf("closure of %s lacks %s: %v", matches[0], w, r.libs)
				}
			}
		})
	}
}

// TestClosureSearchOrder builds small ELF files with gcc to check that
// DT_RUNPATH and DT_RPATH are honoured with $ORIGIN, that DT_RPATH is
// inherited by what an object loads while DT_RUNPATH is not, and that a
// file that is not a compatible ELF object is skipped.
func TestClosureSearchOrder(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("needs gcc to build test ELF files: not on PATH")
	}
	dir := t.TempDir()
	for _, d := range []string{"lib/sub", "lib/sub2", "junk", "bin", "src"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, src := range map[string]string{
		"bar.c":  "int bar(void) { return 1; }\n",
		"foo.c":  "int bar(void); int foo(void) { return bar(); }\n",
		"main.c": "int foo(void); int main(void) { return foo(); }\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, "src", name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Not an ELF file, first in main_rpath's DT_RPATH: must be skipped.
	if err := os.WriteFile(filepath.Join(dir, "junk/libfoo2.so"), []byte("not ELF"), 0o644); err != nil {
		t.Fatal(err)
	}
	cc := func(args ...string) {
		t.Helper()
		cmd := exec.Command(gcc, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", args, err, out)
		}
	}
	cc("-shared", "-fPIC", "-o", "lib/libbar.so", "src/bar.c")
	// libfoo finds libbar through its own RUNPATH, relative to itself.
	cc("-shared", "-fPIC", "-o", "lib/sub/libfoo.so", "src/foo.c", "-Llib", "-lbar",
		"-Wl,--enable-new-dtags,-rpath,$ORIGIN/..")
	// libfoo2 has no search path of its own.
	cc("-shared", "-fPIC", "-o", "lib/sub2/libfoo2.so", "src/foo.c", "-Llib", "-lbar")
	cc("-o", "bin/main_runpath", "src/main.c", "-Llib/sub", "-lfoo", "-Wl,-rpath-link,lib",
		"-Wl,--enable-new-dtags,-rpath,$ORIGIN/../lib/sub")
	// DT_RPATH of the executable is inherited: libfoo2 finds libbar in lib/.
	cc("-o", "bin/main_rpath", "src/main.c", "-Llib/sub2", "-lfoo2", "-Wl,-rpath-link,lib",
		"-Wl,--disable-new-dtags,-rpath,$ORIGIN/../junk:$ORIGIN/../lib/sub2:$ORIGIN/../lib")
	// DT_RUNPATH of the executable is not: libfoo2 cannot find libbar.
	cc("-o", "bin/main_runpath2", "src/main.c", "-Llib/sub2", "-lfoo2", "-Wl,-rpath-link,lib",
		"-Wl,--enable-new-dtags,-rpath,$ORIGIN/../lib/sub2:$ORIGIN/../lib")

	walk := func(exe string) (*libResolver, *elfObject) {
		t.Helper()
		r, err := newLibResolver(filepath.Join(dir, exe))
		if err != nil {
			t.Fatal(err)
		}
		o, err := r.walk(filepath.Join(dir, exe), nil)
		if err != nil {
			t.Fatal(err)
		}
		return r, o
	}

	r, o := walk("bin/main_runpath")
	if len(o.missing) > 0 {
		t.Errorf("main_runpath: unresolved %v", o.missing)
	}
	if got, want := r.libs["libfoo.so"], filepath.Join(dir, "lib/sub/libfoo.so"); got != want {
		t.Errorf("main_runpath: libfoo.so -> %q, want %q", got, want)
	}
	if got, want := r.libs["libbar.so"], filepath.Join(dir, "lib/libbar.so"); got != want {
		t.Errorf("main_runpath: libbar.so -> %q, want %q", got, want)
	}
	if !hasLib(r.libs, "libc.so.6") {
		t.Errorf("main_runpath: no libc.so.6 in %v", r.libs)
	}

	r, o = walk("bin/main_rpath")
	if len(o.missing) > 0 {
		t.Errorf("main_rpath: unresolved %v", o.missing)
	}
	if got, want := r.libs["libfoo2.so"], filepath.Join(dir, "lib/sub2/libfoo2.so"); got != want {
		t.Errorf("main_rpath: libfoo2.so -> %q, want %q (the non-ELF file must be skipped)", got, want)
	}
	if got, want := r.libs["libbar.so"], filepath.Join(dir, "lib/libbar.so"); got != want {
		t.Errorf("main_rpath: libbar.so -> %q, want %q via the inherited DT_RPATH", got, want)
	}

	_, o = walk("bin/main_runpath2")
	if len(o.missing) != 1 || !strings.HasPrefix(o.missing[0], "libbar.so (needed by "+filepath.Join(dir, "lib/sub2/libfoo2.so")) {
		t.Errorf("main_runpath2: missing = %v, want libbar.so needed by libfoo2.so (DT_RUNPATH is not inherited)", o.missing)
	}
}

func TestExpandSearchPath(t *testing.T) {
	got := expandSearchPath([]string{"$ORIGIN/../lib:/opt/x", "${ORIGIN}", "relative:$LIB/y:"}, "/a/b")
	want := []string{"/a/lib", "/opt/x", "/a/b"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestLdSoConfDirs(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "conf.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"ld.so.conf":       "# comment\ninclude conf.d/*.conf\n/opt/top # trailing comment\n",
		"conf.d/a.conf":    "/usr/local/lib\n\nhwcap 0 nosegneg\n/opt/a,/opt/b\n",
		"conf.d/b.conf":    "include " + filepath.Join(dir, "ld.so.conf") + "\n/usr/local/lib\n",
		"conf.d/ignore.no": "/never\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ldSoConfDirs(filepath.Join(dir, "ld.so.conf"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/usr/local/lib", "/opt/a", "/opt/b", "/opt/top"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if got, err := ldSoConfDirs(filepath.Join(dir, "missing.conf")); err != nil || len(got) != 0 {
		t.Errorf("missing file: %v, %v", got, err)
	}
}

func TestLoaderLibDir(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ content, want string }{
		{"x\x00/lib/x86_64-linux-gnu/\x00/usr/lib/x86_64-linux-gnu/\x00/lib/\x00/usr/lib/\x00", "/usr/lib/x86_64-linux-gnu"},
		{"x\x00/lib64/\x00/usr/lib64/\x00", "/usr/lib64"},
		{"/lib:/usr/local/lib:/usr/lib", "/usr/lib"},
	} {
		p := filepath.Join(dir, "ld.so")
		if err := os.WriteFile(p, []byte(tc.content), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := loaderLibDir(p, "x86_64-linux-gnu"); got != tc.want {
			t.Errorf("loader with %q: got %s, want %s", tc.content, got, tc.want)
		}
	}
}
