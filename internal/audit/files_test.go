package audit

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/peercred"
	"github.com/cellblock/cellblock/internal/record"
)

// TestFilesInAndOut: each file in and out of a run is logged by name,
// size and hash, never its content; so is each file put into or read
// from a session, and each artifact fetched.
func TestFilesInAndOut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := Open(Config{Path: path, MaxBytes: 1 << 20, Keep: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rec := sampleRun()
	rec.Request.Files = []api.FileInput{
		{Path: "in.csv", Content: "secret,data\n"},
		{Path: "b.bin", Content: base64.StdEncoding.EncodeToString([]byte("abc")), Encoding: api.EncodingBase64},
	}
	rec.Result.Files = []api.File{{Path: "chart.png", Size: 7, SHA256: strings.Repeat("c", 64), MIME: "image/png"}}
	l.Observe(rec)
	l.ObserveFile(record.FileOp{Peer: peercred.Peer{UID: 1000, GID: 1000, PID: 9}, Op: record.FilePut, Session: "s1",
		Path: "d/x", Size: 3, SHA256: strings.Repeat("d", 64), Started: time.Unix(1e9, 0)})
	l.ObserveFile(record.FileOp{Peer: peercred.Peer{UID: 1001}, Op: record.ArtifactGet, SHA256: strings.Repeat("e", 64),
		Error: api.Errorf(api.ErrNotFound, "sha256", "no artifact"), Started: time.Unix(1e9, 0)})
	lines := readLines(t, path)
	if len(lines) != 3 {
		t.Fatalf("%d lines", len(lines))
	}
	in := lines[0]["files_in"].([]any)
	first := in[0].(map[string]any)
	second := in[1].(map[string]any)
	if first["path"] != "in.csv" || first["size"] != float64(12) || first["sha256"] != sha256Hex("secret,data\n") {
		t.Errorf("files_in[0] %v", first)
	}
	if second["size"] != float64(3) || second["sha256"] != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Errorf("files_in[1] %v (the decoded content's hash)", second)
	}
	out := lines[0]["files_out"].([]any)[0].(map[string]any)
	if out["path"] != "chart.png" || out["size"] != float64(7) {
		t.Errorf("files_out %v", out)
	}
	b, _ := os.ReadFile(path)
	if strings.Contains(string(b), "secret,data") {
		t.Error("a file's content is in the audit log")
	}
	if lines[1]["event"] != record.FilePut || lines[1]["session"] != "s1" || lines[1]["uid"] != float64(1000) || lines[1]["path"] != "d/x" {
		t.Errorf("put: %v", lines[1])
	}
	if lines[2]["event"] != record.ArtifactGet || lines[2]["error"] == nil {
		t.Errorf("artifact: %v", lines[2])
	}
}

func sha256Hex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}
