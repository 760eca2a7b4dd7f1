package audit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/peercred"
	"github.com/cellblock/cellblock/internal/record"
)

const secretCode = "# /// script\n# dependencies = [\"rich\"]\n# ///\nprint('the secret is 42')\n"

func sampleRun() record.Run {
	limits := api.Limits{TimeoutMs: 1000, MemoryBytes: 64 << 20, Pids: 16, CPUs: 1, OutputBytes: 1024, TmpBytes: 1 << 20}
	return record.Run{
		Peer: peercred.Peer{UID: 1000, GID: 1001, PID: 4242},
		Request: &api.RunRequest{Code: secretCode, Dependencies: []string{"requests<3", "rich"}, Python: "3.11",
			Network: &api.Network{Allow: []string{"api.example.org:443"}}},
		Result: &api.Result{
			RunID: "r0123", Python: "3.11.2", ExitCode: 0, DurationMs: 12, CPUMs: 9, MemoryPeakBytes: 5 << 20,
			Stdout: "the secret is 42\n", Limits: &limits,
			Environment: &api.Environment{ID: "env1", CacheHit: true, Packages: []api.Package{{Name: "rich", Version: "13.7.1"}}},
			Denials: []api.Denial{{Kind: api.DenialNetwork, Detail: "CONNECT evil.example:443: not allowed", Host: "evil.example",
				Port: 443, Reason: api.DenyNotAllowed, Count: 2}},
		},
		Started:  time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Duration: 150 * time.Millisecond,
	}
}

func readLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

func TestEntryFieldsAndNoCode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := Open(Config{Path: path, MaxBytes: 1 << 20, Keep: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Observe(sampleRun())
	l.Observe(record.Run{Peer: peercred.Peer{UID: 7}, Result: &api.Result{Error: api.Errorf(api.ErrBadRequest, "", "malformed JSON")}})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(path)
	if strings.Contains(string(raw), "secret") {
		t.Fatalf("the code leaked into the audit log:\n%s", raw)
	}
	lines := readLines(t, path)
	if len(lines) != 2 {
		t.Fatalf("%d lines:\n%s", len(lines), raw)
	}
	e := lines[0]
	want := map[string]any{
		"time": "2026-01-02T03:04:05Z", "run_id": "r0123", "uid": 1000.0, "gid": 1001.0, "pid": 4242.0,
		"outcome": "ok", "code_bytes": float64(len(secretCode)), "python": "3.11.2", "exit_code": 0.0,
		"timed_out": false, "oom_killed": false, "duration_ms": 12.0, "total_ms": 150.0, "cpu_ms": 9.0,
		"memory_peak_bytes": float64(5 << 20), "stdout_bytes": 17.0,
	}
	for k, v := range want {
		if e[k] != v {
			t.Errorf("%s = %v, want %v", k, e[k], v)
		}
	}
	if s, _ := e["code_sha256"].(string); len(s) != 64 {
		t.Errorf("code_sha256 %v", e["code_sha256"])
	}
	if fmt.Sprint(e["requirements"]) != "[requests<3 rich]" { // normalized and sorted, as installed
		t.Errorf("requirements %v", e["requirements"])
	}
	if env, _ := e["environment"].(map[string]any); env["id"] != "env1" || fmt.Sprint(env["packages"]) != "[rich==13.7.1]" {
		t.Errorf("environment %v", e["environment"])
	}
	if lim, _ := e["limits"].(map[string]any); lim["memory_bytes"] != float64(64<<20) {
		t.Errorf("limits %v", e["limits"])
	}
	if _, ok := e["code"]; ok {
		t.Error("code present without IncludeCode")
	}
	if fmt.Sprint(e["network"]) != "[api.example.org:443]" {
		t.Errorf("network %v", e["network"])
	}
	if d, _ := e["denials"].([]any); len(d) != 1 || fmt.Sprint(d[0]) != "map[count:2 detail:CONNECT evil.example:443: not allowed host:evil.example kind:network port:443 reason:not_allowed]" {
		t.Errorf("denials %v", e["denials"])
	}
	if r := lines[1]; r["outcome"] != "refused" || r["uid"] != 7.0 || r["code_sha256"] != nil {
		t.Errorf("refused request: %v", r)
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != FileMode {
		t.Errorf("mode %v", st.Mode())
	}
}

func TestIncludeCode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := Open(Config{Path: path, MaxBytes: 1 << 20, IncludeCode: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Observe(sampleRun())
	if lines := readLines(t, path); len(lines) != 1 || lines[0]["code"] != secretCode {
		t.Fatalf("%v", lines)
	}
}

func TestRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	// An existing file with a looser mode is tightened.
	if err := os.WriteFile(path, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	line, _ := json.Marshal(NewEntry(sampleRun(), false))
	max := int64(len(line)+1) * 3 // three lines per file
	l, err := Open(Config{Path: path, MaxBytes: max, Keep: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); l.Observe(sampleRun()) }()
	}
	wg.Wait()
	l.Close()
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
		st, _ := os.Stat(filepath.Join(dir, e.Name()))
		if st.Size() > max {
			t.Errorf("%s is %d bytes, over %d", e.Name(), st.Size(), max)
		}
		if st.Mode().Perm() != FileMode {
			t.Errorf("%s mode %v", e.Name(), st.Mode())
		}
	}
	if strings.Join(names, " ") != "audit.log audit.log.1 audit.log.2" {
		t.Fatalf("files %v", names)
	}
	// 20 lines, 3 a file: the current holds 2, the two kept 3 each.
	if n := len(readLines(t, path)); n != 2 {
		t.Errorf("current file has %d lines", n)
	}
	if n := len(readLines(t, path+".1")); n != 3 {
		t.Errorf(".1 has %d lines", n)
	}
}

func TestRotationKeepNone(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	l, err := Open(Config{Path: path, MaxBytes: 10, Keep: 0}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		l.Observe(sampleRun())
	}
	l.Close()
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("%v", entries)
	}
	if n := len(readLines(t, path)); n != 1 {
		t.Errorf("%d lines", n)
	}
}

func TestRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "audit.log")
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Config{Path: path, MaxBytes: 1 << 20}, nil); err == nil {
		t.Fatal("opened the audit log through a symbolic link")
	}
}

// The log names the requirements as the environment was built from them:
// merged, normalized and sorted, as the executor installs them, not as the
// caller spelled them.
func TestEntryRequirementsAreWhatWasInstalled(t *testing.T) {
	rec := sampleRun()
	rec.Request.Code = "# /// script\n# dependencies = [\"Rich>=13\", \"CB_Gamma<2\"]\n# ///\n"
	rec.Request.Dependencies = []string{"rich >= 13", "cbalpha"}
	want := []string{"cb-gamma<2", "cbalpha", "rich>=13"}
	if got := NewEntry(rec, false).Requirements; !slices.Equal(got, want) {
		t.Errorf("requirements %q, want %q", got, want)
	}
	// A list that does not normalize was refused before anything was
	// installed: the log keeps what the caller asked for.
	rec.Request.Dependencies = []string{"--index-url=http://evil"}
	if got := NewEntry(rec, false).Requirements; !slices.Contains(got, "--index-url=http://evil") {
		t.Errorf("refused requirements %q", got)
	}
}
