package rootfs

import (
	"os"
	"testing"
)

func TestZZDebugBuild(t *testing.T) {
	dir := os.Getenv("RF_DEBUG_DIR")
	if dir == "" {
		t.Skip("RF_DEBUG_DIR")
	}
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	s.SetLogger(testLogger(t))
	py := os.Getenv("RF_DEBUG_PY")
	if py == "" {
		py = "python3"
	}
	p, err := s.Import(py)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", p)
}
