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
