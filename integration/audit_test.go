package integration

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/audit"
)

// auditLines reads an audit log.
func auditLines(t *testing.T, path string) []audit.Entry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("audit log: %v", err)
	}
	defer f.Close()
	var out []audit.Entry
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var e audit.Entry
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func TestAuditLog(t *testing.T) {
	d := startDaemon(t, "--allow-uid", "65533")
	path := filepath.Join(d.StateDir, "audit.log")
	secret := "print('audit-secret-7d1f')\n"
	runOK(t, d, &api.RunRequest{Code: secret, Dependencies: nil})
	oom := "x = bytearray(1 << 30)\n"
	run(t, d, &api.RunRequest{Code: oom, MemoryBytes: 64 << 20})
	run(t, d, &api.RunRequest{Code: "print(1)", Pids: 1 << 30})

	// Another caller, through the CLI: its uid, gid and pid are recorded.
	if err := os.Chmod(filepath.Dir(d.Socket), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d.Socket, 0o666); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin(t, "cellblock"), "--socket", d.Socket, "run", "--timeout", "500ms", "-c", "import time; time.sleep(5)")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65533, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 124 {
		t.Fatalf("cellblock run as uid 65533: exit %d (%v)\n%s", code, err, out)
	}

	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o640 {
		t.Errorf("audit log mode %v, want 0640", st.Mode().Perm())
	}
	raw, _ := os.ReadFile(path)
	if strings.Contains(string(raw), "audit-secret-7d1f") {
		t.Fatalf("the code is in the audit log:\n%s", raw)
	}
	lines := auditLines(t, path)
	if len(lines) != 4 {
		t.Fatalf("%d audit lines, want 4:\n%s", len(lines), raw)
	}
	me := int32(os.Getpid())
	ok, oomLine, refused, other := lines[0], lines[1], lines[2], lines[3]
	if ok.Outcome != "ok" || ok.UID != 0 || ok.GID != 0 || ok.PID != me || ok.RunID == "" ||
		ok.CodeSHA256 != sha(secret) || ok.CodeBytes != len(secret) || ok.Code != "" ||
		ok.Python == "" || ok.Limits == nil || ok.Limits.TimeoutMs != 30000 || ok.StdoutBytes != len("audit-secret-7d1f\n") ||
		ok.MemoryPeakBytes <= 0 || ok.Time.IsZero() {
		t.Errorf("ok run: %+v", ok)
	}
	if oomLine.Outcome != "oom" || !oomLine.OOMKilled || oomLine.ExitCode == 0 || oomLine.Limits.MemoryBytes != 64<<20 ||
		oomLine.CodeSHA256 != sha(oom) || oomLine.MemoryPeakBytes < 32<<20 {
		t.Errorf("oom run: %+v", oomLine)
	}
	if refused.Outcome != "refused" || refused.Error == nil || refused.Error.Type != api.ErrOverLimit || refused.Error.Field != "pids" ||
		refused.RunID != "" || refused.CodeSHA256 != sha("print(1)") {
		t.Errorf("refused run: %+v", refused)
	}
	if other.Outcome != "timeout" || !other.TimedOut || other.UID != 65533 || other.GID != 65534 ||
		other.PID != int32(cmd.Process.Pid) || other.Limits.TimeoutMs != 500 {
		t.Errorf("run by uid 65533 (pid %d): %+v", cmd.Process.Pid, other)
	}
	// The daemon's log has one line per run, without the code.
	if strings.Contains(d.Log(), "audit-secret-7d1f") {
		t.Errorf("the code is in the daemon's log")
	}
	if n := strings.Count(d.Log(), `"msg":"run"`); n != 3 {
		t.Errorf("%d run lines in the daemon's log, want 3 (the refused one is not a run)", n)
	}
}

func TestAuditLogOptions(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "log", "audit.jsonl")
	d := startDaemon(t, "--audit-log", path, "--audit-code", "--audit-log-max-size", "4K", "--audit-log-keep", "1")
	code := "print('x' * 10)\n# " + strings.Repeat("padding ", 300) + "\n" // about 2.4 KiB a line
	for i := 0; i < 4; i++ {
		runOK(t, d, &api.RunRequest{Code: code})
	}
	if _, err := os.Stat(filepath.Join(d.StateDir, "audit.log")); err == nil {
		t.Errorf("the default audit log was written too")
	}
	// Four lines of ~2.4 KiB under a 4 KiB maximum, one old file kept: the
	// current file and .1 hold one line each, .2 does not exist.
	cur, old := auditLines(t, path), auditLines(t, path+".1")
	if len(cur) != 1 || len(old) != 1 {
		t.Errorf("%d lines in the current file, %d in .1; want 1 and 1", len(cur), len(old))
	}
	if _, err := os.Stat(path + ".2"); err == nil {
		t.Errorf("%s.2 exists with --audit-log-keep 1", path)
	}
	if len(cur) == 1 && cur[0].Code != code {
		t.Errorf("--audit-code: the line does not hold the code: %q", cur[0].Code)
	}
	for _, p := range []string{path, path + ".1"} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o640 {
			t.Errorf("%s: %v %v", p, st.Mode(), err)
		}
	}

	d2 := startDaemon(t, "--audit-log", "off")
	runOK(t, d2, &api.RunRequest{Code: "print(1)"})
	if _, err := os.Stat(filepath.Join(d2.StateDir, "audit.log")); err == nil {
		t.Errorf("--audit-log off wrote %s", filepath.Join(d2.StateDir, "audit.log"))
	}
}
