package runner

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"
)

func readFile(path string) ([]byte, error) { return os.ReadFile(path) }

// chmodTree makes a tree WriteFiles made writable again, for its removal.
func chmodTree(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.Chmod(path, 0o755)
		}
		return nil
	})
}

func TestFiles(t *testing.T) {
	want := []string{"_cellblock_runner.py", "cellblock/__init__.py", "cellblock/_channel.py", "cellblock/_mpl_backend.py"}
	if err := fstest.TestFS(Files(), want...); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir() + "/lib"
	if err := WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = chmodTree(dir) })
	for _, f := range want {
		if _, err := readFile(dir + "/" + f); err != nil {
			t.Error(err)
		}
	}
}

// Install names the directory by the files' hash, reuses it, and removes
// what other versions left under the same parent.
func TestInstall(t *testing.T) {
	parent := t.TempDir()
	stale := filepath.Join(parent, "0123456789abcdef")
	if err := os.MkdirAll(filepath.Join(stale, "cellblock"), 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := Install(parent, nil)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(dir) != parent || len(filepath.Base(dir)) != 16 {
		t.Errorf("Install = %s, want a 16-hex-digit directory under %s", dir, parent)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("another version's directory is still there: %v", err)
	}
	st, err := os.Stat(filepath.Join(dir, "_cellblock_runner.py"))
	if err != nil || st.Mode().Perm() != 0o444 {
		t.Errorf("runner program: %v, mode %v; want 0444", err, st)
	}
	again, err := Install(parent, nil)
	if err != nil || again != dir {
		t.Errorf("second Install = %s, %v; want %s", again, err, dir)
	}
	entries, _ := os.ReadDir(parent)
	if len(entries) != 1 {
		t.Errorf("%d entries under the parent, want 1", len(entries))
	}
}
