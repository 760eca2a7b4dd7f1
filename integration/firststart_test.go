package integration

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSIGTERMDuringFirstRootfsBuild stops a daemon while it builds its
// default rootfs on an empty state directory (its first start): it must
// give the build up, exit 0 at once rather than once the build is done,
// and leave nothing half-built in the store.
func TestSIGTERMDuringFirstRootfsBuild(t *testing.T) {
	requireRoot(t)
	state := t.TempDir()
	name := cgroupName(t)
	ourCgroupNames.Store(name, true)
	cmd := exec.Command(bin(t, "cellblockd"), "--socket", filepath.Join(t.TempDir(), "cellblockd.sock"),
		"--state-dir", state, "--cgroup-name", name, "--log-format", "json")
	logs, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start cellblockd: %v", err)
	}
	var (
		log     strings.Builder
		waitErr error
		exited  = make(chan struct{}) // closed once waitErr is set
	)
	wait := func() { waitErr = cmd.Wait(); close(exited) }
	defer func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	}()

	// Wait for the build to begin: the daemon says so just before it.
	rd := bufio.NewReader(logs)
	for !strings.Contains(log.String(), "building the default Python rootfs") {
		line, err := rd.ReadString('\n')
		log.WriteString(line)
		if err != nil {
			go wait()
			t.Fatalf("cellblockd never said it builds its default rootfs (%v):\n%s", err, log.String())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	go func() {
		// All of stderr first: Wait closes the pipe.
		rest, _ := io.ReadAll(rd)
		log.Write(rest)
		wait()
	}()
	select {
	case <-exited:
	case <-time.After(2 * time.Minute):
		t.Fatalf("cellblockd did not exit within 2 minutes of SIGTERM")
	}
	took := time.Since(sent)
	t.Logf("cellblockd exited %v after SIGTERM", took)
	if waitErr != nil {
		t.Errorf("cellblockd did not exit cleanly on SIGTERM during its rootfs build: %v\n%s", waitErr, log.String())
	}
	// A build that ran to its end would have put its rootfs in the store:
	// only the store's lock may be there.
	entries, err := os.ReadDir(filepath.Join(state, "rootfs"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != ".lock" {
			t.Errorf("the store holds %s after the interrupted build", e.Name())
		}
	}
	if took > 30*time.Second {
		t.Errorf("cellblockd took %v to exit after SIGTERM", took)
	}
}
