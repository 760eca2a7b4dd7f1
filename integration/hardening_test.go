package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/cellblock/cellblock/internal/api"
)

// peakRSS is the most memory the process has held (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb int64
			if _, err := fmt.Sscan(rest, &kb); err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// A script whose PEP 723 block nests arrays 500,000 deep is refused as a
// bad request naming the code, and the daemon's memory does not follow it.
// (Before the bound, six such requests left the daemon at 1.4 GB.)
func TestDeepPEP723BlockIsRefusedCheaply(t *testing.T) {
	d := startDaemon(t, "--prestart", "0")
	code := "# /// script\n# dependencies = " + strings.Repeat("[", 500_000) + "\n# ///\nprint(1)\n"
	before := peakRSS(t, d.Cmd.Process.Pid)
	for range 6 {
		res, err := d.Client.Run(context.Background(), &api.RunRequest{Code: code})
		var aerr *api.Error
		switch {
		case err == nil && res.Error != nil:
			aerr = res.Error
		case err != nil && errors.As(err, &aerr):
		default:
			t.Fatalf("deep metadata: %+v, %v", res, err)
		}
		if aerr.Type != api.ErrBadRequest || aerr.Field != "code" || !strings.Contains(aerr.Message, "script block") {
			t.Fatalf("deep metadata: %+v", aerr)
		}
	}
	if after := peakRSS(t, d.Cmd.Process.Pid); after-before > 64<<20 {
		t.Errorf("the daemon's peak memory grew from %d MiB to %d MiB", before>>20, after>>20)
	}
}

// --allow-sdist lets package build code run in build jails that share the
// host's network namespace: the daemon says so at every start.
func TestAllowSdistWarnsAtStart(t *testing.T) {
	d := startDaemon(t, "--prestart", "0", "--allow-sdist")
	if log := d.Log(); !strings.Contains(log, `"level":"WARN","msg":"--allow-sdist: dependency builds run package build code`) ||
		!strings.Contains(log, "loopback and its abstract Unix sockets") {
		t.Errorf("no warning about --allow-sdist in the log:\n%s", log)
	}
}
