package guest

import (
	"slices"
	"strings"
	"testing"
)

func TestResultsRoundTrip(t *testing.T) {
	console := strings.Join([]string{
		"[    0.5] some kernel line",
		formatResult(CheckBoot, true, "kernel 6.1"),
		"[   30.1] Memory cgroup out of memory: " + formatResult(CheckMemory, true, "oom\nkilled"),
		formatResult(CheckPids, false, "32 forks"),
		formatResult(CheckPids, true, "reported twice: the failure stays"),
		formatResult(CheckBoot, false, "a later failure wins"),
		"VMTEST PASS",
		"VMTEST MAYBE x: y",
		resultLinePrefix + resultDone,
	}, "\n")
	res, err := ParseResults(strings.NewReader(console))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Result{
		CheckBoot:   {Pass: false, Detail: "a later failure wins"},
		CheckMemory: {Pass: true, Detail: "oom | killed"},
		CheckPids:   {Pass: false, Detail: "32 forks"},
	}
	if len(res.Checks) != len(want) {
		t.Errorf("got %d checks %v, want %d", len(res.Checks), res.Checks, len(want))
	}
	for name, w := range want {
		if got := res.Checks[name]; got != w {
			t.Errorf("%s = %+v, want %+v", name, got, w)
		}
	}
	if !res.Done {
		t.Error("Done = false")
	}
}

func TestScanGoTest(t *testing.T) {
	out := `=== RUN   TestA
--- PASS: TestA (0.01s)
=== RUN   TestB
    b_test.go:10: some log
--- FAIL: TestB (0.00s)
=== RUN   TestC
    c_test.go:3: needs root
--- SKIP: TestC (0.00s)
=== RUN   TestD
    d_test.go:4: some log
    d_test.go:5: cgroup v2: the test process must be alone
--- SKIP: TestD (0.00s)
=== RUN   TestE
    --- PASS: TestE/sub (0.00s)
--- PASS: TestE (0.00s)
PASS
`
	passed, failed, skipped := scanGoTest([]byte(out))
	if want := []string{"TestA", "TestE"}; !slices.Equal(passed, want) {
		t.Errorf("passed = %v, want %v", passed, want)
	}
	if want := []string{"TestB"}; !slices.Equal(failed, want) {
		t.Errorf("failed = %v, want %v", failed, want)
	}
	if len(skipped) != 2 || skipped["TestC"] != "needs root" || skipped["TestD"] != "cgroup v2: the test process must be alone" {
		t.Errorf("skipped = %q", skipped)
	}
}

func TestStdoutLines(t *testing.T) {
	var lines []string
	fn := stdoutLines(func(l string) { lines = append(lines, l) })
	for _, c := range []struct{ stream, data string }{
		{"stdout", "orph"}, {"stderr", "noise\n"}, {"stdout", "an 14"}, {"stdout", " 13 1\nspin"},
		{"stdout", "ning\n"}, {"stdout", "partial"},
	} {
		fn(c.stream, c.data)
	}
	if want := []string{"orphan 14 13 1", "spinning"}; !slices.Equal(lines, want) {
		t.Errorf("lines = %q, want %q", lines, want)
	}
}
