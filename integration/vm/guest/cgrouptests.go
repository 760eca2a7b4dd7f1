package guest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// testCgroup is the delegated cgroup the cgroup package's tests run in,
// alone, as their v2 branch requires.
const testCgroup = cgroupRoot + "/cgroup-tests"

// CgroupTestLog is the name of the tests' output in Config.OutDir.
const CgroupTestLog = "cgroup-test.log"

// mustPassOnV2 are root tests whose v2 branch must have run and passed; a
// skip of any of them fails the check.
var mustPassOnV2 = []string{
	"TestCreateSetsLimits", "TestCreateFailureLeavesNothing", "TestProcsAndKill",
	"TestOOMKill", "TestNoOOMWithoutPressure", "TestCPUTime", "TestPidsLimit",
	"TestKillDetached", "TestSweep", "TestClose", "TestKillForkLoop",
	"TestConcurrentCreateDelete", "TestLibcontainerJoinsOnlyOurDirs",
}

// runCgroupTests runs the cgroup package's test binary in testCgroup and
// checks that the root tests ran their v2 branch and passed, and that they
// left nothing behind.
func runCgroupTests(ctx context.Context, cfg Config) (string, error) {
	if err := os.Mkdir(testCgroup, 0o755); err != nil {
		return "", err
	}
	cg, err := os.Open(testCgroup)
	if err != nil {
		return "", err
	}
	defer cg.Close()
	logf, err := os.Create(filepath.Join(cfg.OutDir, CgroupTestLog))
	if err != nil {
		return "", err
	}
	defer logf.Close()
	var out bytes.Buffer
	tctx, cancel := context.WithTimeout(ctx, 6*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(tctx, cfg.CgroupTest, "-test.v", "-test.count=1", "-test.timeout=5m")
	cmd.Dir = "/tmp"
	// Only stdout is parsed: `-test.v` writes its result lines there,
	// and nothing written to stderr (a panic, a child's message) can
	// break one of them up.
	cmd.Stdout = io.MultiWriter(logf, &out)
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	t0 := time.Now()
	runErr := cmd.Run()
	took := time.Since(t0)

	passed, failed, skipped := scanGoTest(out.Bytes())
	var problems []string
	if runErr != nil {
		problems = append(problems, fmt.Sprintf("test binary: %v", runErr))
	}
	if len(failed) > 0 {
		problems = append(problems, fmt.Sprintf("failed: %v", failed))
	}
	for _, name := range mustPassOnV2 {
		if !slices.Contains(passed, name) {
			why := "did not pass (no \"--- PASS: " + name + "\" line)"
			if reason, ok := skipped[name]; ok {
				why = "skipped: " + reason
			}
			problems = append(problems, name+" "+why)
		}
	}
	if err := removeCgroupTree(testCgroup); err != nil {
		problems = append(problems, "left behind: "+err.Error())
	}
	if len(problems) > 0 {
		return "", fmt.Errorf("%s (see %s)", strings.Join(problems, "; "), CgroupTestLog)
	}
	return fmt.Sprintf("%d passed, %d skipped (v1/hybrid only: %s) in %.1fs, alone in %s; nothing left behind",
		len(passed), len(skipped), strings.Join(sortedKeys(skipped), ", "), took.Seconds(),
		strings.TrimPrefix(testCgroup, cgroupRoot)), nil
}

// scanGoTest reads `go test -v` output: the top-level tests that passed and
// failed, and the reason each skipped one gave (the last line it logged
// before its "--- SKIP" line).
func scanGoTest(out []byte) (passed, failed []string, skipped map[string]string) {
	skipped = make(map[string]string)
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	lastLog := ""
	for sc.Scan() {
		line := sc.Text()
		name := ""
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "---" {
			name = f[2]
		}
		switch {
		case strings.HasPrefix(line, "=== "):
			lastLog = ""
		case strings.HasPrefix(line, "--- PASS: "):
			passed = append(passed, name)
		case strings.HasPrefix(line, "--- FAIL: "):
			failed = append(failed, name)
		case strings.HasPrefix(line, "--- SKIP: "):
			skipped[name] = lastLog
		case strings.HasPrefix(line, "    ") && !strings.HasPrefix(line, "    ---"):
			// "    file_test.go:12: message"
			if _, msg, ok := strings.Cut(strings.TrimSpace(line), ": "); ok {
				lastLog = msg
			}
		}
	}
	return passed, failed, skipped
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
