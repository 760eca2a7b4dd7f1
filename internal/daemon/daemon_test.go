package daemon

import (
	"strings"
	"testing"
)

func TestLockStateDir(t *testing.T) {
	dir := t.TempDir()
	unlock, err := lockStateDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockStateDir(dir); err == nil || !strings.Contains(err.Error(), "another cellblockd") {
		t.Fatalf("a second lock on one state dir: %v", err)
	}
	unlock()
	unlock2, err := lockStateDir(dir)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	unlock2()
}
