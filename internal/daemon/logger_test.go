package daemon

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// openPTY returns the two ends of a new pseudo-terminal, or skips.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	master = os.NewFile(uintptr(fd), "/dev/ptmx")
	t.Cleanup(func() { master.Close() })
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Skipf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Skipf("pty number: %v", err)
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("open pty: %v", err)
	}
	t.Cleanup(func() { slave.Close() })
	return master, slave
}

// isJSON logs one line through a logger writing to w and reports whether
// the line was JSON; r reads it back from the other end.
func isJSON(t *testing.T, format string, w *os.File, r *bufio.Reader) bool {
	t.Helper()
	newLogger(format, w).Info("run", "run", "r1", "exit_code", 0)
	// The whole line: one read of a terminal or a pipe may return part
	// of it (a terminal's line discipline hands its input on in pieces
	// when the machine is busy), and the rest would then be taken for
	// the next line.
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("read the log line back: %v (got %q)", err, line)
	}
	var v map[string]any
	return json.Unmarshal([]byte(strings.TrimSpace(line)), &v) == nil
}

func TestLoggerFormat(t *testing.T) {
	master, slave := openPTY(t)
	readPTY := bufio.NewReader(master)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	readPipe := bufio.NewReader(pr)

	t.Setenv("JOURNAL_STREAM", "")
	os.Unsetenv("JOURNAL_STREAM")
	if isJSON(t, "auto", slave, readPTY) {
		t.Error("auto on a terminal logged JSON, want text")
	}
	if !isJSON(t, "auto", pw, readPipe) {
		t.Error("auto on a pipe logged text, want JSON")
	}
	if isJSON(t, "text", pw, readPipe) {
		t.Error("text logged JSON")
	}
	if !isJSON(t, "json", slave, readPTY) {
		t.Error("json on a terminal logged text")
	}
	// Under systemd, stderr is the journal's stream: JSON, even if it were
	// a terminal.
	t.Setenv("JOURNAL_STREAM", "8:12345")
	if !isJSON(t, "auto", slave, readPTY) {
		t.Error("auto with JOURNAL_STREAM set logged text, want JSON")
	}
}

// A logger that is not an *os.File (a buffer) gets JSON.
func TestLoggerFormatBuffer(t *testing.T) {
	var b bytes.Buffer
	newLogger("auto", &b).Info("x")
	var v map[string]any
	if err := json.Unmarshal(b.Bytes(), &v); err != nil {
		t.Errorf("%q is not JSON", b.String())
	}
}
