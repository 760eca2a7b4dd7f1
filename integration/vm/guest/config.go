package guest

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// ConfigPath is where the host puts the guest's Config (JSON) in the
// initramfs.
const ConfigPath = "/vmtest.json"

// ModuleDir is the initramfs directory holding the kernel modules named in
// Config.Modules.
const ModuleDir = "/modules"

// ResultsFile is the name of the results file in Config.OutDir.
const ResultsFile = "results"

// Config is what the host tells the guest.
type Config struct {
	// Modules are file names in ModuleDir, loaded in this order.
	Modules []string `json:"modules"`
	// Shares are the host directories exported over virtio-9p, mounted in
	// this order at their Path.
	Shares []Share `json:"shares"`
	// Daemon is the guest path of cellblockd (cellblock-init beside it).
	Daemon string `json:"daemon"`
	// Python is the interpreter the daemon builds its rootfs from.
	Python string `json:"python"`
	// CgroupTest is the guest path of the cgroup package's test binary.
	CgroupTest string `json:"cgroup_test"`
	// OutDir is a writable share for the results file and the logs.
	OutDir string `json:"out_dir"`
	// TimeoutSec bounds the whole guest run; then it reports what is left
	// as failed and powers off.
	TimeoutSec int `json:"timeout_sec"`
}

// Share is one virtio-9p export.
type Share struct {
	// Tag is the mount_tag qemu gives the export.
	Tag string `json:"tag"`
	// Path is where the guest mounts it.
	Path string `json:"path"`
	// Writable mounts it read-write; shares are read-only otherwise.
	Writable bool `json:"writable,omitempty"`
}

// The checks, in the order the guest runs them.
const (
	CheckBoot        = "boot-pure-v2"         // cgroup2 only, controllers enabled at the root
	CheckDaemon      = "daemon-on-v2"         // the daemon started, in v2 mode, in its own leaf
	CheckMemory      = "memory-limit-oom"     // 1 GiB under 128 MiB: OOM-killed and reported
	CheckPids        = "pids-limit"           // a fork bomb under 32 tasks stops before 32
	CheckCPU         = "cpu-quota"            // two spinning processes under 0.5 CPU are throttled
	CheckStats       = "stats-peak-cpu"       // memory peak and CPU time are read and sane
	CheckKill        = "kill-detached"        // a setsid'd grandchild dies with the run on timeout
	CheckOOMScore    = "oom-score-floor"      // with CAP_SYS_RESOURCE too, no jail process lowers its oom_score_adj
	CheckCleanup     = "cleanup"              // no run cgroup or process left; SIGTERM exits 0
	CheckCgroupTests = "cgroup-package-tests" // the cgroup package's root tests on v2
)

// The result line format: "VMTEST PASS name: detail", "VMTEST DONE".
const (
	resultLinePrefix  = "VMTEST "
	resultPass        = "PASS"
	resultFail        = "FAIL"
	resultDone        = "DONE"
	resultNameDivider = ": "
)

// Checks lists every check the guest reports.
var Checks = []string{
	CheckBoot, CheckDaemon, CheckMemory, CheckPids, CheckCPU, CheckStats, CheckOOMScore,
	CheckKill, CheckCleanup, CheckCgroupTests,
}

// Result is the outcome of one check.
type Result struct {
	Pass   bool
	Detail string // what was measured, or why it failed
}

// Results is what the guest reported.
type Results struct {
	// Checks maps a check name to its outcome.
	Checks map[string]Result
	// Done is set when the guest got to the end of its run.
	Done bool
}

// formatResult is one result line.
func formatResult(name string, pass bool, detail string) string {
	verdict := resultFail
	if pass {
		verdict = resultPass
	}
	detail = strings.ReplaceAll(detail, "\n", " | ")
	return resultLinePrefix + verdict + " " + name + resultNameDivider + detail
}

// ParseResults reads result lines; other lines are ignored. A check
// reported twice keeps the first outcome unless a later one is a failure.
func ParseResults(r io.Reader) (Results, error) {
	res := Results{Checks: make(map[string]Result)}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		i := strings.Index(line, resultLinePrefix)
		if i < 0 {
			continue
		}
		rest := line[i+len(resultLinePrefix):]
		if rest == resultDone {
			res.Done = true
			continue
		}
		verdict, rest, ok := strings.Cut(rest, " ")
		if !ok || (verdict != resultPass && verdict != resultFail) {
			continue
		}
		name, detail, _ := strings.Cut(rest, resultNameDivider)
		pass := verdict == resultPass
		if old, seen := res.Checks[name]; seen && (!old.Pass || pass) {
			continue
		}
		res.Checks[name] = Result{Pass: pass, Detail: detail}
	}
	if err := sc.Err(); err != nil {
		return res, fmt.Errorf("read results: %w", err)
	}
	return res, nil
}
