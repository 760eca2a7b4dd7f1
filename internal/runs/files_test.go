package runs

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/artifacts"
	"github.com/cellblock/cellblock/nsjail"
	"github.com/cellblock/cellblock/nsjail/layout"
	"github.com/cellblock/cellblock/nsjail/workdir"
)

func TestMIMEOf(t *testing.T) {
	png := "\x89PNG\r\n\x1a\n\x00\x00"
	for _, c := range []struct{ name, head, want string }{
		{"chart.png", png, "image/png"},
		{"chart.PNG", png, "image/png"},
		{"fake.png", "<html>hi", "text/html"},
		{"data.csv", "a,b\n1,2\n", "text/csv"},
		{"data.csv", "\x00\x01\x02\x03", "application/octet-stream"},
		{"r.json", `{"a": 1}`, "application/json"},
		{"noext", png, "image/png"},
		{"noext", "plain words", "text/plain"},
		{"empty.bin", "", "application/octet-stream"},
		{"x.npy", "\x93NUMPY", "application/octet-stream"},
		{"doc.pdf", "%PDF-1.7", "application/pdf"},
		{"cut.txt", "caf\xc3", "text/plain"},
	} {
		if got := MIMEOf(c.name, []byte(c.head)); got != c.want {
			t.Errorf("MIMEOf(%q, %q) = %q, want %q", c.name, c.head, got, c.want)
		}
	}
}

// TestFileError: the jail's refusals name the file; over_limit when
// /work or the memory could not hold it.
func TestFileError(t *testing.T) {
	for _, c := range []struct {
		fe    nsjail.FileError
		class api.ErrorType
	}{
		{nsjail.FileError{Index: 2, Path: "a", Errno: "ENOSPC", NoSpace: true}, api.ErrOverLimit},
		{nsjail.FileError{Index: 2, Path: "a", OOM: true}, api.ErrOverLimit},
		{nsjail.FileError{Index: 2, Path: "a", Errno: "ELOOP", Message: "too many levels"}, api.ErrBadRequest},
	} {
		var ae *api.Error
		err := FileError(&c.fe)
		if !errors.As(err, &ae) || ae.Type != c.class || ae.Field != "files[2]" {
			t.Errorf("%+v: %v", c.fe, err)
		}
	}
	// The jail gone: the daemon's failure, not the caller's.
	if err := FileError(&nsjail.FileError{Path: "a", Message: "went away"}); api.ErrorOf(err).Type != api.ErrInternal {
		t.Errorf("a lost runner: %v", err)
	}
	var ae *api.Error
	e := &Executor{}
	if err := e.InputError(&nsjail.FileError{Path: "a", Errno: "ENOSPC", NoSpace: true}, "path"); !errors.As(err, &ae) || ae.Field != "path" {
		t.Errorf("for a PUT: %v", err)
	}
}

// TestReadWorkFileLeased: a session's file held by a lease is in_use, the
// caller's to retry, not the daemon's failure.
func TestReadWorkFileLeased(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "held.csv")
	if err := os.WriteFile(p, []byte("a,b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	holder, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if _, err := unix.FcntlInt(holder.Fd(), unix.F_SETLEASE, unix.F_WRLCK); err != nil {
		t.Skipf("cannot take a lease here: %v", err)
	}
	w, err := workdir.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	e := &Executor{cfg: Config{Files: api.FileCaps{OutFileBytes: 1000}}}
	err = e.ReadWorkFile(w, "held.csv", func(int64) (io.Writer, error) { return io.Discard, nil })
	if !errors.Is(err, api.ErrInUse) {
		t.Errorf("a leased file: %v", err)
	}
}

// TestCollectOut: the files of out/ go into the store, owned by the
// caller, with their media type, and small text with its content.
func TestCollectOut(t *testing.T) {
	store, err := artifacts.Open(artifacts.Config{Dir: t.TempDir(), MaxBytes: 1 << 20, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	e := &Executor{cfg: Config{Artifacts: store, Files: api.FileCaps{OutCount: 10, OutFileBytes: 1000, OutBytes: 2000, InlineBytes: 100, InlineTotalBytes: 100}}}
	root := t.TempDir()
	out := filepath.Join(root, "out")
	os.MkdirAll(out, 0o755)
	os.WriteFile(filepath.Join(out, "clean.csv"), []byte("a,b\n1,2\n"), 0o644)
	os.WriteFile(filepath.Join(out, "chart.png"), []byte("\x89PNG\r\n\x1a\nrest"), 0o644)
	os.WriteFile(filepath.Join(out, "big.txt"), []byte(strings.Repeat("b", 1001)), 0o644)
	os.Symlink("/etc/shadow", filepath.Join(out, "shadow"))
	w, err := workdir.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	files, skipped := e.CollectOut(w, 1000, true, nil)
	if len(files) != 2 || files[0].Path != "chart.png" || files[0].MIME != "image/png" || files[0].Content != nil ||
		files[1].Path != "clean.csv" || files[1].MIME != "text/csv" || files[1].Content == nil || *files[1].Content != "a,b\n1,2\n" {
		t.Fatalf("files %+v", files)
	}
	if len(skipped) != 2 {
		t.Errorf("skipped %+v", skipped)
	}
	f, n, err := e.OpenArtifact(1000, files[1].SHA256)
	if err != nil || n != 8 {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != "a,b\n1,2\n" {
		t.Errorf("stored %q", b)
	}
	_, _, errOther := e.OpenArtifact(1001, files[1].SHA256)
	_, _, errNone := e.OpenArtifact(1001, strings.Repeat("0", 64))
	if errOther == nil || errNone == nil || strings.Replace(errOther.Error(), files[1].SHA256, "", 1) != strings.Replace(errNone.Error(), strings.Repeat("0", 64), "", 1) {
		t.Errorf("another uid: %v; an unknown artifact: %v", errOther, errNone)
	}
	// Without inline, no content.
	files, _ = e.CollectOut(w, 1000, false, nil)
	if files[1].Content != nil {
		t.Errorf("content without inline")
	}
	if info := e.filesInfo(); info.StoreFiles != 2 || info.StoreBytes != 1<<20 || info.OutCount != 10 {
		t.Errorf("info %+v", info)
	}
}

// The jail reads api.OutDir under its /work by the layout's name for it.
func TestOutDirIsTheLayouts(t *testing.T) {
	if api.OutDir != layout.OutDir {
		t.Errorf("api.OutDir %q, layout.OutDir %q", api.OutDir, layout.OutDir)
	}
}
