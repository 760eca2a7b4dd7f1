package runner

import (
	"testing"
	"testing/fstest"
)

func TestFiles(t *testing.T) {
	want := []string{"_cellblock_runner.py", "cellblock/__init__.py", "cellblock/_channel.py", "cellblock/_mpl_backend.py"}
	if err := fstest.TestFS(Files(), want...); err != nil {
		t.Fatal(err)
	}
}
