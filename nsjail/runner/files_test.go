package runner

import (
	"io/fs"
	"testing"
	"testing/fstest"
)

func TestFiles(t *testing.T) {
	want := []string{"_cellblock_runner.py", "cellblock/__init__.py", "cellblock/_channel.py", "cellblock/_mpl_backend.py"}
	if err := fstest.TestFS(Files(), want...); err != nil {
		t.Fatal(err)
	}
}

// FilesWith adds plain-named files at the top and refuses the rest.
func TestFilesWith(t *testing.T) {
	files, err := FilesWith(map[string][]byte{"bundle.pem": []byte("pem")})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := fs.ReadFile(files, "bundle.pem"); err != nil || string(b) != "pem" {
		t.Errorf("bundle.pem = %q, %v", b, err)
	}
	if _, err := fs.Stat(files, "cellblock/__init__.py"); err != nil {
		t.Errorf("the runner's own files: %v", err)
	}
	for _, bad := range []string{"", "a/b", ".hidden", "_cellblock_runner.py"} {
		if _, err := FilesWith(map[string][]byte{bad: nil}); err == nil {
			t.Errorf("FilesWith(%q) took it", bad)
		}
	}
}
