package secrets

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellblock/cellblock/internal/api"
)

const value = "ghp_0123456789abcdefghijklmnopqrstuvwxyz"

func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func hosts(t *testing.T, list ...string) []api.NetPattern {
	t.Helper()
	ps, err := api.ParseNetPatterns("test", list)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// A value is the file's one line; what is no value is refused, and no
// error quotes what the file holds.
func TestReadValue(t *testing.T) {
	dir := t.TempDir()
	for content, want := range map[string]string{
		value + "\n":   value,
		value + "\r\n": value,
		value:          value,
		"  spaced  ":   "  spaced  ",
	} {
		got, err := ReadValue(write(t, dir, "v", content))
		if err != nil || got != value && got != want {
			t.Errorf("%q: %q %v", content, got, err)
		}
	}
	for content, want := range map[string]string{
		"short12":                     "at least 8",
		"":                            "at least 8",
		value + "\n\n":                "control character",
		"abc\x00defghij":              "control character",
		"two\nlines-here":             "control character",
		strings.Repeat("x", 9<<10):    "more than 8192",
		"tab\there-and-there-and-xxx": "control character",
	} {
		_, err := ReadValue(write(t, dir, "v", content))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%.20q: %v, want %q", content, err, want)
		}
		if err != nil && len(content) >= 7 && strings.Contains(err.Error(), content[:7]) {
			t.Errorf("the error quotes the content: %v", err)
		}
	}
	if _, err := ReadValue(dir); err == nil {
		t.Error("a directory was read")
	}
	if _, err := ReadValue(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing: %v", err)
	}
}

// Open reads every value and refuses a secret with no host; Reload takes
// new values, keeps the old one of a file that went bad, and says which
// changed; Info never shows a value.
func TestStore(t *testing.T) {
	dir := t.TempDir()
	a, b := write(t, dir, "a", value), write(t, dir, "b", "second-value-xyz")
	if _, err := Open([]Decl{{Name: "A", File: a}}); err == nil || !strings.Contains(err.Error(), "no host") {
		t.Errorf("no host: %v", err)
	}
	if _, err := Open([]Decl{{Name: "A", File: filepath.Join(dir, "none"), Hosts: hosts(t, "h.example:443")}}); err == nil || !strings.Contains(err.Error(), "secret A") {
		t.Errorf("missing file: %v", err)
	}
	s, err := Open([]Decl{
		{Name: "B", File: b, Hosts: hosts(t, "b.example:443")},
		{Name: "A", File: a, Hosts: hosts(t, "a.example:443", "*.a.example:443"), UIDs: []uint32{1000}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.Len() != 2 || s.Value("A") != value || s.Value("B") != "second-value-xyz" || s.Value("C") != "" {
		t.Errorf("values %q %q", s.Value("A"), s.Value("B"))
	}
	d, ok := s.Decl("A")
	if !ok || !d.Granted(0) || !d.Granted(1000) || d.Granted(1001) {
		t.Errorf("grants %+v", d)
	}
	if _, ok := s.Decl("C"); ok {
		t.Error("C is declared")
	}
	info := s.Info()
	if len(info) != 2 || info[0].Name != "A" || strings.Join(info[0].Hosts, " ") != "a.example:443 *.a.example:443" ||
		len(info[0].AllowUIDs) != 1 || info[1].AllowUIDs == nil {
		t.Errorf("info %+v", info)
	}
	write(t, dir, "a", "rotated-value-123")
	write(t, dir, "b", "bad")
	changed, err := s.Reload()
	if err == nil || !strings.Contains(err.Error(), "secret B keeps its value") || strings.Join(changed, ",") != "A" {
		t.Errorf("Reload: %v %v", changed, err)
	}
	if s.Value("A") != "rotated-value-123" || s.Value("B") != "second-value-xyz" {
		t.Errorf("after Reload: %q %q", s.Value("A"), s.Value("B"))
	}
	// The values a secret had are remembered, newest first, at most
	// MaxPast of them besides the current one.
	if got := s.Values("A"); strings.Join(got, " ") != "rotated-value-123 "+value {
		t.Errorf("Values %q", got)
	}
	for i := range MaxPast + 3 {
		write(t, dir, "a", "value-number-"+string(rune('a'+i)))
		s.Reload()
	}
	if got := s.Values("A"); len(got) != MaxPast+1 || got[0] != "value-number-"+string(rune('a'+MaxPast+2)) {
		t.Errorf("Values after many rotations %q", got)
	}
	var none *Store
	if none.Len() != 0 || none.Value("A") != "" || none.Info() != nil {
		t.Error("a nil store has something")
	}
}

// A file that is no regular file is refused without waiting on it: a
// FIFO in a secret's place would otherwise hold the daemon's start, or
// every reload after the first, until someone writes to it.
func TestReadValueOfAFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "token")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Skip(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := ReadValue(fifo)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("a FIFO: %v", err)
		}
	case <-time.After(30 * time.Second):
		// Unblock the open, so that the test ends.
		if f, err := os.OpenFile(fifo, os.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
		t.Fatal("ReadValue waits on a FIFO")
	}
}
