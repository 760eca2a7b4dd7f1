package rootfs

import (
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"
)

var installed = fstest.MapFS{
	"main.py":         {Data: []byte("print(1)\n")},
	"pkg/__init__.py": {Data: []byte("")},
	"pkg/mod.py":      {Data: []byte("x = 1\n")},
}

// InstallFiles names the directory by the files' hash, writes them
// read-only, reuses the directory, and removes what other versions left
// under the same parent.
func TestInstallFiles(t *testing.T) {
	parent := t.TempDir()
	t.Cleanup(func() { _ = RemoveTree(parent) })
	stale := filepath.Join(parent, "0123456789abcdef")
	if err := os.MkdirAll(filepath.Join(stale, "pkg"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(stale, 0o555); err != nil {
		t.Fatal(err)
	}
	dir, err := InstallFiles(parent, installed)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(dir) != parent || len(filepath.Base(dir)) != 16 {
		t.Errorf("InstallFiles = %s, want a 16-hex-digit directory under %s", dir, parent)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("another version's directory is still there: %v", err)
	}
	for name := range installed {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || st.Mode().Perm() != 0o444 {
			t.Errorf("%s: %v, mode %v; want 0444", name, err, st)
		}
	}
	if st, err := os.Stat(filepath.Join(dir, "pkg")); err != nil || st.Mode().Perm() != 0o555 {
		t.Errorf("pkg: %v, mode %v; want 0555", err, st)
	}
	again, err := InstallFiles(parent, installed)
	if err != nil || again != dir {
		t.Errorf("second InstallFiles = %s, %v; want %s", again, err, dir)
	}
	entries, _ := os.ReadDir(parent)
	if len(entries) != 1 {
		t.Errorf("%d entries under the parent, want 1", len(entries))
	}
	other, err := InstallFiles(parent, fstest.MapFS{"main.py": {Data: []byte("print(2)\n")}})
	if err != nil || other == dir {
		t.Errorf("InstallFiles of other files = %s, %v; want a directory other than %s", other, err, dir)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the first version's directory is still there: %v", err)
	}
}
