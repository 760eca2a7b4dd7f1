package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/artifacts"
)

// Files in and out of runs, against the real daemon: a CSV goes in, a PNG
// and a CSV come out (the API, the CLI, the MCP server); what a program
// leaves under /work/out that is not a regular file never makes the daemon
// read or block on anything; artifacts are their producer's.

// salesCSV is the data set the tests hand the sandbox.
const salesCSV = "region,amount\nnorth,3\nsouth,5\nnorth,4\neast,1\n"

// chartCode reads data/sales.csv, writes the totals per region to
// out/totals.csv and a bar chart of them to out/chart.png, with a PNG
// writer of the standard library's zlib and struct (no matplotlib).
const chartCode = `
import csv, os, struct, zlib
totals = {}
with open("data/sales.csv") as f:
    for row in csv.DictReader(f):
        totals[row["region"]] = totals.get(row["region"], 0) + int(row["amount"])
os.makedirs("out", exist_ok=True)
with open("out/totals.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["region", "total"])
    for region in sorted(totals):
        w.writerow([region, totals[region]])

def png(width, height, pixel):
    rows = b"".join(b"\x00" + b"".join(pixel(x, y) for x in range(width)) for y in range(height))
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))

regions = sorted(totals)
top = max(totals.values())
def pixel(x, y):
    bar = x // 20
    if bar < len(regions) and x % 20 < 16 and 60 - y <= totals[regions[bar]] * 60 // top:
        return b"\x30\x60\xc0"
    return b"\xff\xff\xff"
with open("out/chart.png", "wb") as f:
    f.write(png(20 * len(regions), 60, pixel))
print("regions:", len(regions))
`

// wantTotals is totals.csv for salesCSV.
const wantTotals = "region,total\r\neast,1\r\nnorth,7\r\nsouth,5\r\n"

// checkChart fails the test unless b is a PNG of the chart's size.
func checkChart(t *testing.T, b []byte) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("out/chart.png is not a PNG: %v", err)
	}
	if r := img.Bounds(); r.Dx() != 60 || r.Dy() != 60 {
		t.Errorf("out/chart.png is %v", r)
	}
}

func sha256Of(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// filesByPath indexes a result's files.
func filesByPath(res *api.Result) map[string]api.File {
	m := map[string]api.File{}
	for _, f := range res.Files {
		m[f.Path] = f
	}
	return m
}

// skippedByPath indexes a result's skipped files by path: their reasons.
func skippedByPath(res *api.Result) map[string]string {
	m := map[string]string{}
	for _, s := range res.FilesSkipped {
		m[s.Path] = s.Reason
	}
	return m
}

// artifact fetches an artifact as the test (root) and checks its hash.
func artifact(t *testing.T, d *Daemon, f api.File) []byte {
	t.Helper()
	b, err := d.Client.Artifact(context.Background(), f.SHA256, 64<<20)
	if err != nil {
		t.Fatalf("artifact %s (%s): %v", f.Path, f.SHA256, err)
	}
	if int64(len(b)) != f.Size || sha256Of(b) != f.SHA256 {
		t.Fatalf("artifact %s: %d bytes, sha256 %s; the result said %d, %s", f.Path, len(b), sha256Of(b), f.Size, f.SHA256)
	}
	return b
}

// TestFilesThroughTheAPI: a CSV goes in, a PNG and a CSV come out, kept
// by the artifact store and fetched by their hash; the audit log names
// each file in and out.
func TestFilesThroughTheAPI(t *testing.T) {
	d := daemon(t)
	res := runOK(t, d, &api.RunRequest{Code: chartCode, ReturnFiles: api.ReturnFilesInline,
		Files: []api.FileInput{{Path: "data/sales.csv", Content: salesCSV}}})
	if res.Stdout != "regions: 3\n" {
		t.Fatalf("stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	files := filesByPath(res)
	if len(res.Files) != 2 || len(res.FilesSkipped) != 0 {
		t.Fatalf("files %+v skipped %+v", res.Files, res.FilesSkipped)
	}
	chart, totals := files["chart.png"], files["totals.csv"]
	if chart.MIME != "image/png" || chart.Content != nil || totals.MIME != "text/csv" || totals.Content == nil || *totals.Content != wantTotals {
		t.Fatalf("files %+v", res.Files)
	}
	checkChart(t, artifact(t, d, chart))
	if got := string(artifact(t, d, totals)); got != wantTotals {
		t.Errorf("totals.csv: %q", got)
	}
	// Binary content in, by base64.
	blob := []byte{0, 1, 2, 0xff, 0xfe, '\n'}
	res = runOK(t, d, &api.RunRequest{Mode: api.ModeCell, Code: "open('b/blob', 'rb').read()",
		Files: []api.FileInput{{Path: "b/blob", Content: base64.StdEncoding.EncodeToString(blob), Encoding: api.EncodingBase64}}})
	if res.Value == nil || res.Value.Repr != `b'\x00\x01\x02\xff\xfe\n'` {
		t.Errorf("a binary file: %+v", res.Value)
	}

	// The audit log: names, sizes and hashes, in and out.
	waitFor(5*time.Second, func() bool { return auditLine(t, d, res.RunID) != nil })
	var first map[string]any
	for _, l := range auditMaps(t, d) {
		if l["files_out"] != nil {
			first = l
		}
	}
	if first == nil {
		t.Fatal("no audit line with files_out")
	}
	in := first["files_in"].([]any)[0].(map[string]any)
	if in["path"] != "data/sales.csv" || in["sha256"] != sha256Of([]byte(salesCSV)) || in["size"] != float64(len(salesCSV)) {
		t.Errorf("audit files_in: %v", in)
	}
	if out := first["files_out"].([]any); len(out) != 2 {
		t.Errorf("audit files_out: %v", out)
	}
}

// auditMaps reads the shared daemon's audit log.
func auditMaps(t *testing.T, d *Daemon) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.StateDir, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

func auditLine(t *testing.T, d *Daemon, runID string) map[string]any {
	for _, l := range auditMaps(t, d) {
		if l["run_id"] == runID {
			return l
		}
	}
	return nil
}

// TestFilesThroughTheCLI: cellblock run --file ... --out DIR, and
// cellblock session cp both ways.
func TestFilesThroughTheCLI(t *testing.T) {
	d := daemon(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "sales.csv"), []byte(salesCSV), 0o644)
	os.WriteFile(filepath.Join(dir, "chart.py"), []byte(chartCode), 0o644)
	out := filepath.Join(dir, "results")
	cmd := exec.Command(bin(t, "cellblock"), "--socket", d.Socket, "run", "--file", filepath.Join(dir, "sales.csv")+":data/", "--out", out, filepath.Join(dir, "chart.py"))
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cellblock run: %v\n%s", err, b)
	}
	if !strings.Contains(string(b), "regions: 3") || !strings.Contains(string(b), "saved") {
		t.Errorf("output: %s", b)
	}
	chart, err := os.ReadFile(filepath.Join(out, "chart.png"))
	if err != nil {
		t.Fatal(err)
	}
	checkChart(t, chart)
	if totals, err := os.ReadFile(filepath.Join(out, "totals.csv")); err != nil || string(totals) != wantTotals {
		t.Errorf("totals.csv: %q %v", totals, err)
	}

	// session cp: in, run, out.
	s := newSession(t, d, &api.SessionRequest{})
	cli := func(args ...string) string {
		t.Helper()
		b, err := exec.Command(bin(t, "cellblock"), append([]string{"--socket", d.Socket}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("cellblock %v: %v\n%s", args, err, b)
		}
		return string(b)
	}
	cli("session", "cp", filepath.Join(dir, "sales.csv"), s.ID+":data/sales.csv")
	res := run(t, d, &api.RunRequest{Session: s.ID, Code: chartCode})
	if res.Error != nil || len(res.Files) != 2 {
		t.Fatalf("in the session: %+v %+v %s", res.Error, res.Files, res.Stderr)
	}
	back := filepath.Join(dir, "back")
	os.Mkdir(back, 0o755)
	cli("session", "cp", s.ID+":out/chart.png", back)
	got, err := os.ReadFile(filepath.Join(back, "chart.png"))
	if err != nil || !bytes.Equal(got, chart) {
		t.Errorf("session cp out: %d bytes, %v", len(got), err)
	}
}

// TestFilesThroughMCP: run_python with a CSV in "files"; the PNG and the
// CSV come back as resource links, the CSV embedded, the PNG as image
// content; resources/read returns them.
func TestFilesThroughMCP(t *testing.T) {
	d := daemon(t)
	c := mcpTransports[0].connect(t, d.Socket) // stdio: a connection of its own
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var req mcp.CallToolRequest
	req.Params.Name = "run_python"
	req.Params.Arguments = map[string]any{"code": chartCode, "files": []map[string]any{{"path": "data/sales.csv", "content": salesCSV}}}
	res, err := c.CallTool(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var text string
	links := map[string]mcp.ResourceLink{}
	var embedded, images int
	for _, ct := range res.Content {
		switch v := ct.(type) {
		case mcp.TextContent:
			text += v.Text
		case mcp.ResourceLink:
			links[v.Name] = v
		case mcp.EmbeddedResource:
			if r, ok := v.Resource.(mcp.TextResourceContents); ok && r.Text == wantTotals {
				embedded++
			}
		case mcp.ImageContent:
			b, err := base64.StdEncoding.DecodeString(v.Data)
			if err != nil {
				t.Fatal(err)
			}
			checkChart(t, b)
			images++
		}
	}
	if res.IsError || len(links) != 2 || embedded != 1 || images != 1 {
		t.Fatalf("isError %v, links %v, embedded %d, images %d:\n%s", res.IsError, links, embedded, images, text)
	}
	var rr mcp.ReadResourceRequest
	rr.Params.URI = links["chart.png"].URI
	got, err := c.ReadResource(ctx, rr)
	if err != nil {
		t.Fatalf("resources/read %s: %v", rr.Params.URI, err)
	}
	blob, ok := got.Contents[0].(mcp.BlobResourceContents)
	if !ok {
		t.Fatalf("chart.png read as %T", got.Contents[0])
	}
	b, _ := base64.StdEncoding.DecodeString(blob.Blob)
	checkChart(t, b)
	rr.Params.URI = links["totals.csv"].URI
	if got, err := c.ReadResource(ctx, rr); err != nil || got.Contents[0].(mcp.TextResourceContents).Text != wantTotals {
		t.Errorf("totals.csv: %+v %v", got, err)
	}
	// Another MCP connection cannot read them.
	other := mcpTransports[0].connect(t, d.Socket)
	if _, err := other.ReadResource(ctx, rr); err == nil {
		t.Error("another MCP connection read this one's file")
	}
}

// hostileOut makes, under /work/out, everything the daemon must not
// follow, open, block on or take whole.
const hostileOut = `
import os, socket
os.makedirs("out/deep/" + "/".join("d%d" % i for i in range(20)), exist_ok=True)
open("out/deep/" + "/".join("d%d" % i for i in range(20)) + "/bottom.txt", "w").write("deep")
open("secret.txt", "w").write("the run's own file")
os.symlink("/etc/shadow", "out/shadow")
os.symlink("/proc/1/root", "out/proc1root")
os.symlink("/proc/1/root/etc/passwd", "out/proc1passwd")
os.symlink(".", "out/loop")
os.symlink("..", "out/up")
os.mkfifo("out/fifo")
s = socket.socket(socket.AF_UNIX)
s.bind("out/sock")
os.link("secret.txt", "out/hardlink.txt")
open("out/big.bin", "wb").write(b"x" * (3 << 20))
fd = os.open(b"out/bad\xffname", os.O_CREAT | os.O_WRONLY)
os.write(fd, b"z")
os.close(fd)
os.makedirs("out/many", exist_ok=True)
for i in range(40):
    open("out/many/%02d" % i, "w").write(str(i))
open("out/ok.txt", "w").write("ok")
print("made")
`

// TestFilesHostileOut: symbolic links (to /etc/shadow, to /proc/1/root,
// loops), a FIFO that would block a reader, a socket, a name that is not
// UTF-8, too deep, too big and too many: only regular files come back,
// each of the rest is listed with its reason, nothing blocks, and the
// daemon holds no descriptor afterwards.
func TestFilesHostileOut(t *testing.T) {
	d := startDaemon(t, "--files-out-max-count", "20", "--files-out-max-file-bytes", "1M", "--files-out-max-bytes", "2M")
	res := runOK(t, d, &api.RunRequest{Code: hostileOut, TimeoutMs: 60000})
	files, skipped := filesByPath(res), skippedByPath(res)
	for p, want := range map[string]string{
		"shadow": "symbolic link", "proc1root": "symbolic link", "proc1passwd": "symbolic link", "loop": "symbolic link", "up": "symbolic link",
		"fifo": "FIFO", "sock": "socket", "big.bin": "over the cap", "bad\ufffdname": "not UTF-8", "deep/d0/d1/d2/d3/d4/d5/d6/d7/d8/d9/d10/d11/d12/d13/d14": "deeper than 16",
	} {
		if !strings.Contains(skipped[p], want) {
			t.Errorf("%s: skipped as %q, want a reason saying %q", p, skipped[p], want)
		}
	}
	if f, ok := files["hardlink.txt"]; !ok || string(artifact(t, d, f)) != "the run's own file" {
		t.Errorf("a hard link to the run's own file: %+v", f)
	}
	if len(res.Files) != 20 {
		t.Errorf("%d files returned, the cap is 20", len(res.Files))
	}
	past := 0
	for _, s := range res.FilesSkipped {
		if strings.Contains(s.Reason, "past the cap of 20 files") {
			past++
		}
	}
	if past == 0 {
		t.Errorf("nothing listed past the count: %+v", res.FilesSkipped)
	}
	// Nothing of the host's came back.
	shadow, _ := os.ReadFile("/etc/shadow")
	passwd, _ := os.ReadFile("/etc/passwd")
	for _, f := range res.Files {
		if f.SHA256 == sha256Of(shadow) || f.SHA256 == sha256Of(passwd) {
			t.Errorf("%s is the host's /etc/shadow or /etc/passwd", f.Path)
		}
	}
	// The daemon keeps no descriptor of the run's /work; a session's it
	// holds while the session lives.
	pid := d.Cmd.Process.Pid
	s, err := d.Client.CreateSession(context.Background(), &api.SessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !holdsTmpfs(pid) {
		t.Errorf("with a session open, no descriptor of its /work is seen: %v", fdTargets(pid))
	}
	if err := d.Client.DeleteSession(context.Background(), s.ID); err != nil {
		t.Fatal(err)
	}
	if !waitFor(10*time.Second, func() bool { return !holdsTmpfs(pid) }) {
		t.Errorf("the daemon still holds a descriptor into a jail's tmpfs: %v", fdTargets(pid))
	}
}

// fdTargets lists what pid's descriptors point at.
func fdTargets(pid int) []string {
	entries, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	var out []string
	for _, e := range entries {
		l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name()))
		out = append(out, e.Name()+"->"+l)
	}
	return out
}

// holdsTmpfs reports whether pid holds a descriptor of a directory on a
// tmpfs that is not in the host's mount table: a jail's /work.
func holdsTmpfs(pid int) bool {
	entries, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, e := range entries {
		p := fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name())
		var st syscall.Statfs_t
		if syscall.Statfs(p, &st) == nil && st.Type == 0x01021994 {
			if l, _ := os.Readlink(p); l == "/" || strings.HasPrefix(l, "/out") || l == "/work" {
				return true
			}
		}
	}
	return false
}

// TestFilesGrowWhileRead: a file a session's thread keeps writing is
// never returned as whole: it is listed as changed while it was read, and
// a GET of it fails rather than send part of it.
func TestFilesGrowWhileRead(t *testing.T) {
	d := daemon(t)
	s := newSession(t, d, &api.SessionRequest{})
	start := inSession(t, d, s.ID, `
import os, threading, time
os.makedirs("out", exist_ok=True)
stop = threading.Event()
def grow():
    # It grows to 4 MiB, then is rewritten in place, over and over, a
    # piece every few hundred microseconds: often, without spending the
    # session's CPU quota (a throttled thread would leave it still).
    i = 0
    with open("out/grow.log", "wb") as f:
        while not stop.is_set():
            i += 1
            f.write(b"%015d\n" % i * 4096)
            f.flush()
            if f.tell() >= 4 << 20:
                f.seek(0)
            time.sleep(0.0003)
t = threading.Thread(target=grow, daemon=True)
t.start()
while not os.path.exists("out/grow.log") or os.path.getsize("out/grow.log") < 4 << 20:
    time.sleep(0.01)
open("out/steady.txt", "w").write("steady")
`)
	if start.Error != nil || start.ExitCode != 0 {
		t.Fatalf("%+v %s", start.Error, start.Stderr)
	}
	results := []*api.Result{start}
	for i := 0; i < 3; i++ {
		results = append(results, inSession(t, d, s.ID, "pass"))
	}
	changed := 0
	for i, res := range results {
		if f, ok := filesByPath(res)["grow.log"]; ok {
			artifact(t, d, f) // whole as the result says, if it came
		}
		if strings.Contains(skippedByPath(res)["grow.log"], "changed while it was read") {
			changed++
		}
		if i == 0 {
			if _, ok := filesByPath(res)["steady.txt"]; !ok {
				t.Errorf("the first run's steady.txt: %+v", res.Files)
			}
		} else if _, ok := filesByPath(res)["steady.txt"]; ok {
			t.Errorf("run %d returned steady.txt, which it did not change", i)
		}
	}
	if changed == 0 {
		for i, res := range results {
			t.Logf("run %d: files %+v skipped %+v stderr %q", i, res.Files, res.FilesSkipped, res.Stderr)
		}
		t.Errorf("a file written all along was never seen changing")
	}
	// GET: never the file in part.
	rc, size, err := d.Client.OpenSessionFile(context.Background(), s.ID, "out/grow.log")
	if err == nil {
		b, rerr := io.ReadAll(rc)
		rc.Close()
		if rerr == nil && int64(len(b)) == size {
			t.Errorf("a growing file read whole by GET (%d bytes)", size)
		}
	} else {
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Type != api.ErrInUse {
			t.Errorf("GET of a growing file: %v", err)
		}
	}
	inSession(t, d, s.ID, "stop.set(); t.join()")
	rc, size, err = d.Client.OpenSessionFile(context.Background(), s.ID, "out/grow.log")
	if err != nil {
		t.Fatalf("GET once still: %v", err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || int64(len(b)) != size {
		t.Errorf("GET once still: %d of %d bytes, %v", len(b), size, err)
	}
}

// asUID sends a request to the daemon as uid 65533 (allowed on the
// shared daemon's socket), with curl, and returns the status and body.
func asUID(t *testing.T, d *Daemon, method, path, body string) (int, []byte) {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skipf("curl not installed: %v", err)
	}
	args := []string{"-s", "-o", "-", "-w", "\n%{http_code}", "--unix-socket", d.Socket, "-X", method, "http://cellblockd" + path}
	if body != "" {
		args = append(args, "-H", "Content-Type: application/json", "--data-binary", body)
	}
	cmd := exec.Command("curl", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65533, Gid: 65534}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("curl as uid 65533: %v", err)
	}
	i := bytes.LastIndexByte(out, '\n')
	var code int
	fmt.Sscan(string(out[i+1:]), &code)
	return code, out[:i]
}

// filesInfoAs is GET /v1/info's files as uid 65533 sees them.
func filesInfoAs(t *testing.T, d *Daemon) api.FileCaps {
	t.Helper()
	code, body := asUID(t, d, "GET", api.PathInfo, "")
	var info api.Info
	if err := json.Unmarshal(body, &info); err != nil || code != 200 || info.Files == nil {
		t.Fatalf("info as uid 65533: %d %s", code, body)
	}
	return *info.Files
}

// socketOpen lets other uids reach the shared daemon's socket for the test.
var socketOpen sync.Mutex

func openSocket(t *testing.T, d *Daemon) {
	t.Helper()
	socketOpen.Lock()
	if err := os.Chmod(d.Socket, 0o666); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.Chmod(d.Socket, 0o660)
		socketOpen.Unlock()
	})
}

// TestFilesOfAnotherUID: an artifact is its producer's: any other uid
// gets exactly the answer of a hash that never existed; its own it gets;
// root gets all. Another uid's session files are as absent as its
// session.
func TestFilesOfAnotherUID(t *testing.T) {
	d := daemon(t)
	openSocket(t, d)
	res := runOK(t, d, &api.RunRequest{Code: "import os\nos.makedirs('out')\nopen('out/root.txt', 'w').write('root secret %d' % os.getpid())"})
	mine := res.Files[0].SHA256
	never := sha256Of([]byte("never produced by anyone"))
	codeMine, bodyMine := asUID(t, d, "GET", api.PathArtifacts+"/"+mine, "")
	codeNever, bodyNever := asUID(t, d, "GET", api.PathArtifacts+"/"+never, "")
	if codeMine != 404 || codeNever != 404 || string(bytes.ReplaceAll(bodyMine, []byte(mine), []byte(never))) != string(bodyNever) {
		t.Errorf("uid 65533 fetching root's artifact: %d %s; an unknown one: %d %s", codeMine, bodyMine, codeNever, bodyNever)
	}
	// uid 65533's own run and artifact.
	code, body := asUID(t, d, "POST", api.PathRuns, `{"code":"import os\nos.makedirs('out')\nopen('out/theirs.txt','w').write('theirs')"}`)
	var theirs api.Result
	if err := json.Unmarshal(body, &theirs); err != nil || code != 200 || len(theirs.Files) != 1 {
		t.Fatalf("uid 65533's run: %d %s", code, body)
	}
	code, body = asUID(t, d, "GET", api.PathArtifacts+"/"+theirs.Files[0].SHA256, "")
	if code != 200 || string(body) != "theirs" {
		t.Errorf("uid 65533's own artifact: %d %q", code, body)
	}
	if b := artifact(t, d, theirs.Files[0]); string(b) != "theirs" {
		t.Errorf("root reading uid 65533's: %q", b)
	}
	// The store's figures: uid 65533 is told its own, and producing the
	// content root holds costs it what any new content would, so that
	// nothing tells it that root had it.
	rootContent := artifact(t, d, res.Files[0])
	before := filesInfoAs(t, d)
	req, _ := json.Marshal(&api.RunRequest{Code: fmt.Sprintf("import os\nos.makedirs('out')\nopen('out/copy.txt','w').write(%q)", rootContent)})
	code, body = asUID(t, d, "POST", api.PathRuns, string(req))
	if err := json.Unmarshal(body, &theirs); err != nil || code != 200 || len(theirs.Files) != 1 || theirs.Files[0].SHA256 != mine {
		t.Fatalf("uid 65533's run producing root's content: %d %s", code, body)
	}
	after := filesInfoAs(t, d)
	if after.StoreFiles != before.StoreFiles+1 || after.StoreUsedBytes != before.StoreUsedBytes+int64(len(rootContent))+artifacts.Overhead {
		t.Errorf("uid 65533's store figures went from %d files, %d bytes to %d, %d for content of %d bytes",
			before.StoreFiles, before.StoreUsedBytes, after.StoreFiles, after.StoreUsedBytes, len(rootContent))
	}
	if info, err := d.Client.Info(context.Background()); err != nil || info.Files.StoreFiles < after.StoreFiles+1 {
		t.Errorf("root's figures are not everyone's: %+v %v", info.Files, err)
	}
	// Sessions: another uid's files are not there.
	s := newSession(t, d, &api.SessionRequest{Files: []api.FileInput{{Path: "secret.txt", Content: "root's"}}})
	for _, c := range []struct{ method, path string }{
		{"GET", api.PathSessions + "/" + s.ID + "/files/secret.txt"},
		{"PUT", api.PathSessions + "/" + s.ID + "/files/planted.txt"},
	} {
		code, body := asUID(t, d, c.method, c.path, "")
		if code != 404 || !strings.Contains(string(body), "session_not_found") {
			t.Errorf("uid 65533 %s %s: %d %s", c.method, c.path, code, body)
		}
	}
}

// TestFilesRefused: input paths that leave /work, NULs, names over the
// limit, duplicates, too many and too much are refused naming the field,
// before anything is built (no run id: the request never reached a
// jail).
func TestFilesRefused(t *testing.T) {
	d := startDaemon(t, "--files-in-max-count", "3", "--files-in-max-bytes", "64K")
	for _, c := range []struct {
		name  string
		req   api.RunRequest
		class api.ErrorType
		field string
	}{
		{"dotdot", api.RunRequest{Files: []api.FileInput{{Path: "../escape"}}}, api.ErrBadRequest, "files[0].path"},
		{"absolute", api.RunRequest{Files: []api.FileInput{{Path: "/etc/cron.d/x"}}}, api.ErrBadRequest, "files[0].path"},
		{"nul", api.RunRequest{Files: []api.FileInput{{Path: "a\x00b"}}}, api.ErrBadRequest, "files[0].path"},
		{"long", api.RunRequest{Files: []api.FileInput{{Path: strings.Repeat("n", 256)}}}, api.ErrBadRequest, "files[0].path"},
		{"duplicate", api.RunRequest{Files: []api.FileInput{{Path: "a"}, {Path: "a"}}}, api.ErrBadRequest, "files[1].path"},
		{"too many", api.RunRequest{Files: []api.FileInput{{Path: "a"}, {Path: "b"}, {Path: "c"}, {Path: "d"}}}, api.ErrOverLimit, "files"},
		{"too big", api.RunRequest{Files: []api.FileInput{{Path: "a", Content: strings.Repeat("x", 65<<10)}}}, api.ErrOverLimit, "files"},
	} {
		c.req.Code = "print(1)"
		res := run(t, d, &c.req)
		if res.Error == nil || res.Error.Type != c.class || res.Error.Field != c.field || res.RunID != "" {
			t.Errorf("%s: %+v (run %q), want %s naming %s", c.name, res.Error, res.RunID, c.class, c.field)
		}
	}
	m := scrapeMetrics(t, d.Socket)
	if n := m[`cellblock_runs_total{outcome="refused"}`]; n != 7 {
		t.Errorf("%v runs refused, want 7", n)
	}
}

// TestFilesDoNotFit: files that /work or the memory limit cannot hold
// are refused as over_limit, and a session is told what is in the way.
func TestFilesDoNotFit(t *testing.T) {
	d := startDaemon(t, "--files-in-max-bytes", "64M")
	// 48 MiB of tmpfs pages under a 32 MiB memory limit.
	big := base64.StdEncoding.EncodeToString(make([]byte, 48<<20))
	res := run(t, d, &api.RunRequest{Code: "print(1)", MemoryBytes: 32 << 20, TmpBytes: 64 << 20,
		Files: []api.FileInput{{Path: "big.bin", Content: big, Encoding: api.EncodingBase64}}})
	if res.Error == nil || res.Error.Type != api.ErrOverLimit || res.Error.Field != "files[0]" || !strings.Contains(res.Error.Message, "memory") {
		t.Errorf("48 MiB under 32 MiB of memory: %+v", res.Error)
	}
	// A session's /work full: the PUT does not fit, and leaves nothing.
	s := newSession(t, d, &api.SessionRequest{TmpBytes: 4 << 20})
	if r := inSession(t, d, s.ID, "open('fill.bin', 'wb').write(b'f' * (3 << 20))"); r.Error != nil || r.ExitCode != 0 {
		t.Fatalf("%+v %s", r.Error, r.Stderr)
	}
	_, err := d.Client.PutSessionFile(context.Background(), s.ID, "more.bin", bytes.NewReader(make([]byte, 2<<20)), 2<<20)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Type != api.ErrOverLimit || ae.Field != "path" {
		t.Errorf("a PUT past /work: %v", err)
	}
	if _, _, err := d.Client.OpenSessionFile(context.Background(), s.ID, "more.bin"); !errors.As(err, &ae) || ae.Type != api.ErrNotFound {
		t.Errorf("the PUT that did not fit left a file: %v", err)
	}
	if r := inSession(t, d, s.ID, "len(open('fill.bin', 'rb').read())"); r.Value == nil || r.Value.Repr != fmt.Sprint(3<<20) {
		t.Errorf("the session after: %+v %+v", r.Error, r.Value)
	}
}

// TestSessionFiles: files at a session's creation and by PUT, read by
// GET; the program's links and FIFOs neither redirect a PUT nor block it,
// nor lead a GET anywhere; a busy session takes no file; a run returns
// only what it changed under out/.
func TestSessionFiles(t *testing.T) {
	d := daemon(t)
	ctx := context.Background()
	s := newSession(t, d, &api.SessionRequest{Files: []api.FileInput{{Path: "data/sales.csv", Content: salesCSV}}})
	get := func(p string) (string, error) {
		rc, n, err := d.Client.OpenSessionFile(ctx, s.ID, p)
		if err != nil {
			return "", err
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		if err == nil && int64(len(b)) != n {
			err = fmt.Errorf("%d of %d bytes", len(b), n)
		}
		return string(b), err
	}
	if got, err := get("data/sales.csv"); err != nil || got != salesCSV {
		t.Fatalf("the session's file: %q %v", got, err)
	}
	if _, err := d.Client.PutSessionFile(ctx, s.ID, "in/x.txt", strings.NewReader("put"), 3); err != nil {
		t.Fatal(err)
	}
	if r := inSession(t, d, s.ID, "open('in/x.txt').read()"); r.Value == nil || r.Value.Repr != "'put'" {
		t.Errorf("the run saw %+v", r.Value)
	}
	// What the program plants.
	passwd, _ := os.ReadFile("/etc/passwd")
	passwdBefore := sha256Of(passwd)
	r := inSession(t, d, s.ID, "import os\nos.symlink('/etc', 'etc')\nos.symlink('/proc/1/root', 'root1')\nos.mkfifo('fifo')\nos.symlink('/etc/passwd', 'passwd')")
	if r.ExitCode != 0 {
		t.Fatalf("%s", r.Stderr)
	}
	for _, p := range []string{"etc/shadow", "etc/new", "root1/etc/x", "fifo", "passwd"} {
		done := make(chan error, 1)
		go func() {
			_, err := d.Client.PutSessionFile(ctx, s.ID, p, strings.NewReader("x"), 1)
			done <- err
		}()
		select {
		case err := <-done:
			var ae *api.Error
			if !errors.As(err, &ae) || ae.Type != api.ErrBadRequest {
				t.Errorf("PUT %s: %v", p, err)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("PUT %s blocked", p)
		}
		if _, err := get(p); err == nil {
			t.Errorf("GET %s went through", p)
		}
	}
	if b, _ := os.ReadFile("/etc/passwd"); sha256Of(b) != passwdBefore {
		t.Error("/etc/passwd was written")
	}
	// Busy.
	slow := make(chan *api.Result, 1)
	go func() { slow <- inSession(t, d, s.ID, "import time\ntime.sleep(3)") }()
	if !waitFor(10*time.Second, func() bool {
		sess, err := d.Client.Session(ctx, s.ID)
		return err == nil && sess.Busy
	}) {
		t.Fatal("the session never got busy")
	}
	_, err := d.Client.PutSessionFile(ctx, s.ID, "late.txt", strings.NewReader("x"), 1)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Type != api.ErrSessionBusy {
		t.Errorf("PUT during a run: %v", err)
	}
	<-slow
	// Only what changed.
	r1 := inSession(t, d, s.ID, "import os\nos.makedirs('out', exist_ok=True)\nopen('out/a.txt', 'w').write('a')")
	r2 := inSession(t, d, s.ID, "open('out/b.txt', 'w').write('b')")
	r3 := inSession(t, d, s.ID, "open('out/a.txt', 'w').write('a')")
	r4 := inSession(t, d, s.ID, "1")
	names := func(r *api.Result) string {
		var n []string
		for _, f := range r.Files {
			n = append(n, f.Path)
		}
		return strings.Join(n, ",")
	}
	if names(r1) != "a.txt" || names(r2) != "b.txt" || names(r3) != "a.txt" || names(r4) != "" {
		t.Errorf("runs returned %q %q %q %q, want a.txt, b.txt, a.txt (rewritten), nothing", names(r1), names(r2), names(r3), names(r4))
	}
}

// TestFilesWithoutPtrace: a daemon without CAP_SYS_PTRACE cannot open a
// jail's /work through /proc/PID/root (the jail's init is not dumpable):
// its runs go on, and say that nothing under /work/out could come back.
func TestFilesWithoutPtrace(t *testing.T) {
	requireRoot(t)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skipf("setpriv (util-linux) not installed: %v", err)
	}
	dir := searchableDir(t, "cellblock-it-noptrace-")
	cfg, state := daemonConfig(t, filepath.Join(dir, "cellblockd.sock"))
	cfg.Prefix = []string{setpriv, "--bounding-set", "-sys_ptrace", "--"}
	d := launch(t, cfg, state)
	d.waitReady(t)
	const capSysPtrace = 19
	if has, err := hasCapability(d.Cmd.Process.Pid, capSysPtrace); err != nil || has {
		t.Fatalf("the daemon has CAP_SYS_PTRACE (%v, %v): this test is for a daemon without it", has, err)
	}
	res := runOK(t, d, &api.RunRequest{Code: "import os\nos.makedirs('out')\nopen('out/x.txt', 'w').write('x')\nprint('ran')"})
	if res.Stdout != "ran\n" || len(res.Files) != 0 || len(res.FilesSkipped) != 1 || !strings.Contains(res.FilesSkipped[0].Reason, "could not open this run's /work") {
		t.Errorf("without CAP_SYS_PTRACE: stdout %q files %+v skipped %+v", res.Stdout, res.Files, res.FilesSkipped)
	}
}

// TestSessionFilesSlowRunner: a session whose code replaced its runner's
// file handler, to answer at once and then take one frame every 25 s,
// holds a PUT no longer than the send's one deadline (30 s for 8 MiB),
// not 25 s a frame; the session is then killed, and the PUT says it was
// lost.
func TestSessionFilesSlowRunner(t *testing.T) {
	d := daemon(t)
	s := newSession(t, d, &api.SessionRequest{})
	const size = 8 << 20
	r := inSession(t, d, s.ID, fmt.Sprintf(`import time
from cellblock import _files
def slow(ch, msg, root=_files.WORK):
    if msg.get("offset") == 0:
        ch.send({"type": "file_written", "path": msg["path"], "bytes": %d})
    time.sleep(25)
_files.on_frame = slow`, size))
	if r.ExitCode != 0 {
		t.Fatalf("%s", r.Stderr)
	}
	// Far past the deadline with a frame every 25 s: 8 frames, 200 s.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Second)
	defer cancel()
	_, err := d.Client.PutSessionFile(ctx, s.ID, "big.bin", bytes.NewReader(make([]byte, size)), size)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Type != api.ErrSessionLost {
		t.Fatalf("the PUT: %v", err)
	}
	if sess, err := d.Client.Session(context.Background(), s.ID); err != nil || sess.State != api.SessionLost {
		t.Errorf("the session after: %+v %v", sess, err)
	}
}
