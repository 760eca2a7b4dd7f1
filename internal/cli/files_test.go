package cli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/server/servertest"
)

// filesInfo is testInfo with files allowed.
var filesInfo = func() api.Info {
	i := testInfo
	i.Files = &api.FileCaps{InCount: 8, InBytes: 1 << 20, OutCount: 8, OutFileBytes: 1 << 20, OutBytes: 1 << 20}
	return i
}()

func newFilesDaemon(t *testing.T, run servertest.RunFunc) *fakeDaemon {
	t.Helper()
	d := servertest.Start(t, filesInfo, run)
	return &fakeDaemon{Daemon: d, socket: d.Socket}
}

func TestFileFlag(t *testing.T) {
	dir := t.TempDir()
	colon := filepath.Join(dir, "a:b.csv")
	os.WriteFile(colon, []byte("x"), 0o644)
	for _, c := range []struct {
		arg  string
		want fileSpec
	}{
		{"data.csv", fileSpec{"data.csv", "data.csv"}},
		{"/tmp/x/data.csv", fileSpec{"/tmp/x/data.csv", "data.csv"}},
		{"data.csv:in/d.csv", fileSpec{"data.csv", "in/d.csv"}},
		{"img.png:imgs/", fileSpec{"img.png", "imgs/img.png"}},
		{"x.csv:/work/in/x.csv", fileSpec{"x.csv", "in/x.csv"}},
		{colon, fileSpec{colon, "a:b.csv"}},
	} {
		var specs []fileSpec
		if err := (fileValue{&specs}).Set(c.arg); err != nil || len(specs) != 1 || specs[0] != c.want {
			t.Errorf("--file %s: %+v %v, want %+v", c.arg, specs, err, c.want)
		}
	}
	for _, bad := range []string{"x:../up", "x:/etc/passwd", "x:a//b", "x:out/../../y"} {
		var specs []fileSpec
		if err := (fileValue{&specs}).Set(bad); err == nil {
			t.Errorf("--file %s accepted: %+v", bad, specs)
		}
	}
	if !plainText([]byte("a,b\n\t1\r\n")) || plainText([]byte("\x00")) || plainText([]byte("\xff")) || plainText([]byte("a\x1b[0m")) {
		t.Error("plainText")
	}
}

// TestRunFileAndOut: --file sends local files (text as text, binary as
// base64) and --out saves what the run produced, checked against its
// hash; what was not returned is said on stderr.
func TestRunFileAndOut(t *testing.T) {
	me := uint32(os.Getuid())
	var d *fakeDaemon
	png := "\x89PNG\r\n\x1a\nfake image"
	d = newFilesDaemon(t, func(_ context.Context, req *api.RunRequest, _ func(string, string)) (*api.Result, error) {
		var got []string
		for i := range req.Files {
			data, _ := req.Files[i].Data()
			got = append(got, req.Files[i].Path+"|"+req.Files[i].Encoding+"|"+string(data))
		}
		if !reflect.DeepEqual(got, []string{"sales.csv||a,b\n1,2\n", "imgs/logo.bin|base64|\x00\x01\xff"}) {
			return nil, errors.New("files: " + strings.Join(got, "; "))
		}
		return &api.Result{
			Files: []api.File{
				{Path: "chart.png", Size: int64(len(png)), SHA256: d.AddArtifact(me, []byte(png)), MIME: "image/png"},
				{Path: "clean/out.csv", Size: 4, SHA256: d.AddArtifact(me, []byte("a,b\n")), MIME: "text/csv"},
			},
			FilesSkipped: []api.FileSkipped{{Path: "link", Reason: "a symbolic link (never followed)"}},
		}, nil
	})
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "sales.csv"), []byte("a,b\n1,2\n"), 0o644)
	os.WriteFile(filepath.Join(src, "logo.bin"), []byte("\x00\x01\xff"), 0o644)
	out := filepath.Join(t.TempDir(), "results")
	got := runCLI(context.Background(), "", nil, "run", "--socket", d.socket,
		"--file", filepath.Join(src, "sales.csv"), "--file", filepath.Join(src, "logo.bin")+":imgs/", "--out", out, "-c", "x")
	if got.code != 0 || !strings.Contains(got.stderr, "out/link not returned: a symbolic link") || !strings.Contains(got.stderr, "saved") {
		t.Fatalf("%+v", got)
	}
	for p, want := range map[string]string{"chart.png": png, "clean/out.csv": "a,b\n"} {
		if b, err := os.ReadFile(filepath.Join(out, p)); err != nil || string(b) != want {
			t.Errorf("%s: %q %v", p, b, err)
		}
	}
	if ents, _ := os.ReadDir(out); len(ents) != 2 {
		t.Errorf("in --out: %v", ents)
	}

	// Without --out the files are listed, not saved; --json keeps
	// stdout for the result.
	got = runCLI(context.Background(), "", nil, "run", "--socket", d.socket,
		"--file", filepath.Join(src, "sales.csv"), "--file", filepath.Join(src, "logo.bin")+":imgs/", "-c", "x")
	if got.code != 0 || !strings.Contains(got.stderr, "out/chart.png (18 B, image/png) not saved: --out DIR") {
		t.Errorf("without --out: %+v", got)
	}
	out2 := t.TempDir()
	got = runCLI(context.Background(), "", nil, "run", "--socket", d.socket, "--json", "--out", out2,
		"--file", filepath.Join(src, "sales.csv"), "--file", filepath.Join(src, "logo.bin")+":imgs/", "-c", "x")
	if got.code != 0 || !strings.HasPrefix(got.stdout, "{") || strings.Count(got.stdout, "\n") != 1 {
		t.Errorf("--json --out: %+v", got)
	}
	if _, err := os.Stat(filepath.Join(out2, "clean", "out.csv")); err != nil {
		t.Errorf("--json --out saved nothing: %v", err)
	}
}

// TestOutRefuses: --out fails (125) for an artifact the daemon will not
// give, one whose content does not match, and a path that would leave
// DIR; nothing is written outside DIR, nor left half written.
func TestOutRefuses(t *testing.T) {
	me := uint32(os.Getuid())
	var files []api.File
	d := newFilesDaemon(t, func(context.Context, *api.RunRequest, func(string, string)) (*api.Result, error) {
		return &api.Result{Files: files}, nil
	})
	good := d.AddArtifact(me, []byte("good"))
	others := d.AddArtifact(me+1, []byte("another's"))
	base := t.TempDir()
	for name, f := range map[string]api.File{
		"another's":   {Path: "x", Size: 9, SHA256: others},
		"wrong size":  {Path: "x", Size: 5, SHA256: good},
		"leaves DIR":  {Path: "../escaped", Size: 4, SHA256: good},
		"absolute":    {Path: "/tmp/escaped", Size: 4, SHA256: good},
		"wrong sum":   {Path: "x", Size: 4, SHA256: strings.Repeat("0", 64)},
		"not regular": {Path: "adir", Size: 4, SHA256: good},
	} {
		if name == "another's" && me == 0 {
			continue // root reads every artifact
		}
		files = []api.File{f}
		out := filepath.Join(base, strings.ReplaceAll(name, " ", "-"), "out")
		os.MkdirAll(filepath.Join(out, "adir"), 0o755)
		got := runCLI(context.Background(), "", nil, "run", "--socket", d.socket, "--out", out, "-c", "x")
		if got.code != exitFailed || !strings.Contains(got.stderr, "--out") {
			t.Errorf("%s: %+v", name, got)
		}
		if ents, _ := os.ReadDir(out); len(ents) != 1 {
			t.Errorf("%s: left %v in DIR", name, ents)
		}
	}
	if _, err := os.Stat(filepath.Join(base, "escaped")); err == nil {
		t.Error("a file escaped DIR")
	}
}

// TestSessionCp copies into and out of a session's /work, - being
// standard input or output, a directory getting the file's name.
func TestSessionCp(t *testing.T) {
	d := newFilesDaemon(t, nil)
	id := newSession(t, d)
	dir := t.TempDir()
	local := filepath.Join(dir, "sales.csv")
	os.WriteFile(local, []byte("a,b\n"), 0o644)

	got := runCLI(context.Background(), "", nil, "session", "cp", "--socket", d.socket, local, id+":data/sales.csv")
	if got.code != 0 {
		t.Fatalf("cp in: %+v", got)
	}
	if b, ok := d.SessionFile(id, "data/sales.csv"); !ok || string(b) != "a,b\n" {
		t.Errorf("in the session: %q %v", b, ok)
	}
	runCLI(context.Background(), "from stdin", nil, "session", "cp", "--socket", d.socket, "-", id+":/work/in.txt").check(t, "", "cellblock: "+id+":/work/in.txt written (10 B)\n", 0)
	if b, _ := d.SessionFile(id, "in.txt"); string(b) != "from stdin" {
		t.Errorf("from stdin: %q", b)
	}

	d.SetSessionFile(id, "out/chart.png", []byte("PNG"))
	runCLI(context.Background(), "", nil, "session", "cp", "--socket", d.socket, id+":out/chart.png", "-").check(t, "PNG", "", 0)
	got = runCLI(context.Background(), "", nil, "session", "cp", "--socket", d.socket, id+":out/chart.png", dir)
	if b, err := os.ReadFile(filepath.Join(dir, "chart.png")); got.code != 0 || err != nil || string(b) != "PNG" {
		t.Errorf("into a directory: %+v %q %v", got, b, err)
	}
	got = runCLI(context.Background(), "", nil, "session", "cp", "--socket", d.socket, id+":out/chart.png", filepath.Join(dir, "renamed.png"))
	if b, _ := os.ReadFile(filepath.Join(dir, "renamed.png")); got.code != 0 || string(b) != "PNG" {
		t.Errorf("to a name: %+v", got)
	}

	for _, args := range [][]string{
		{local, filepath.Join(dir, "x")},
		{id + ":a", id + ":b"},
		{local, id + ":../x"},
		{id + ":/etc/passwd", dir},
		{local},
	} {
		if got := runCLI(context.Background(), "", nil, append([]string{"session", "cp", "--socket", d.socket}, args...)...); got.code != exitUsage {
			t.Errorf("cp %v: %+v", args, got)
		}
	}
	got = runCLI(context.Background(), "", nil, "session", "cp", "--socket", d.socket, id+":missing", dir)
	if got.code != exitFailed || !strings.Contains(got.stderr, "not_found") {
		t.Errorf("a missing file: %+v", got)
	}
	got = runCLI(context.Background(), "", nil, "session", "cp", "--socket", d.socket, local, "s-nope:x")
	if got.code != exitFailed || !strings.Contains(got.stderr, "session_not_found") {
		t.Errorf("an unknown session: %+v", got)
	}
}

func TestInfoFiles(t *testing.T) {
	d := newFilesDaemon(t, nil)
	got := runCLI(context.Background(), "", nil, "info", "--socket", d.socket)
	if got.code != 0 || !strings.Contains(got.stdout, "files in") || !strings.Contains(got.stdout, "up to 8 files from /work/out") {
		t.Errorf("%+v", got)
	}
}
