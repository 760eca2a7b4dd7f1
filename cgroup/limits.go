package cgroup

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Limits are the resource limits of one run. A zero field means no limit.
type Limits struct {
	// MemoryBytes is the hard memory limit; swap is always off for runs.
	MemoryBytes int64
	// Pids is the maximum number of processes and threads.
	Pids int64
	// CPUs is the CPU quota in cores (1.0 = 100ms per 100ms period).
	CPUs float64
	// Background gives the cgroup the smallest CPU weight, so that its
	// processes get only the CPU time that others leave: for jails built
	// ahead of their run. Otherwise the weight is the kernel's default.
	Background bool
}

// Stats are a run's resource statistics. All of them are counters kept by
// the kernel in the run's cgroup, not events to subscribe to: no eventfd,
// inotify watch or goroutine is needed, and they stay readable after every
// process of the run has exited, until Delete (which keeps a final
// snapshot). So the way to learn whether a run was OOM-killed is to read
// Stats after it ended.
type Stats struct {
	// MemoryPeakBytes is the highest memory usage of the run.
	MemoryPeakBytes int64
	// CPUTime is user plus system CPU time of all processes of the run.
	CPUTime time.Duration
	// OOMKilled reports that the kernel's OOM killer killed something in the run.
	OOMKilled bool
	// PidsLimitHit reports that a fork or clone failed on the pids limit.
	PidsLimitHit bool
}

const (
	// cpuPeriodUs is the CFS bandwidth period used for every run.
	cpuPeriodUs = 100000
	// minCPUQuotaUs is the kernel's smallest accepted quota (1 ms).
	minCPUQuotaUs = 1000
	// maxIDLen is the longest run id or root name.
	maxIDLen = 64
	// CPU weights: v1 cpu.shares and v2 cpu.weight, the default and the
	// smallest the kernel accepts.
	defaultShares, backgroundShares = 1024, 2
	defaultWeight, backgroundWeight = 100, 1
)

// MinCPUs and MaxCPUs bound Limits.CPUs when it is set.
const (
	MinCPUs = float64(minCPUQuotaUs) / cpuPeriodUs
	MaxCPUs = 1024.0
)

// ValidateID reports whether id can name a run (or a root): [a-zA-Z0-9_-]{1,64}.
// It is a loop rather than a regular expression because the daemon's
// binary is re-executed as every jail's init, which pays for each package's
// initialisation.
func ValidateID(id string) error {
	ok := id != "" && len(id) <= maxIDLen
	for i := 0; ok && i < len(id); i++ {
		c := id[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
	}
	if !ok {
		return fmt.Errorf("%w: %q must match [a-zA-Z0-9_-]{1,%d}", ErrInvalidID, id, maxIDLen)
	}
	return nil
}

// Validate checks the limits without touching the system.
func (l Limits) Validate() error {
	if l.MemoryBytes < 0 {
		return fmt.Errorf("%w: memory %d < 0", ErrInvalidLimits, l.MemoryBytes)
	}
	if l.Pids < 0 {
		return fmt.Errorf("%w: pids %d < 0", ErrInvalidLimits, l.Pids)
	}
	if math.IsNaN(l.CPUs) || math.IsInf(l.CPUs, 0) || l.CPUs < 0 {
		return fmt.Errorf("%w: cpus %v", ErrInvalidLimits, l.CPUs)
	}
	if l.CPUs != 0 && (l.CPUs < MinCPUs || l.CPUs > MaxCPUs) {
		return fmt.Errorf("%w: cpus %v outside [%v, %v]", ErrInvalidLimits, l.CPUs, MinCPUs, MaxCPUs)
	}
	return nil
}

// shares is the v1 cpu.shares of l: the smallest for Background, else the
// default.
func (l Limits) shares() uint64 {
	if l.Background {
		return backgroundShares
	}
	return defaultShares
}

// weight is the v2 cpu.weight of l, as shares is for v1.
func (l Limits) weight() uint64 {
	if l.Background {
		return backgroundWeight
	}
	return defaultWeight
}

// cpuQuotaUs converts a quota in cores to microseconds per cpuPeriodUs.
func cpuQuotaUs(cpus float64) int64 {
	q := int64(math.Round(cpus * cpuPeriodUs))
	if q < minCPUQuotaUs {
		q = minCPUQuotaUs
	}
	return q
}

// cpuMax formats cgroup v2's cpu.max: "<quota> <period>", quota "max" for none.
func cpuMax(cpus float64) string {
	if cpus <= 0 {
		return "max " + strconv.Itoa(cpuPeriodUs)
	}
	return strconv.FormatInt(cpuQuotaUs(cpus), 10) + " " + strconv.Itoa(cpuPeriodUs)
}

// formatMax formats a cgroup v2 limit: "max" for none (<= 0), else the number.
func formatMax(v int64) string {
	if v <= 0 {
		return "max"
	}
	return strconv.FormatInt(v, 10)
}

// v1Resources converts limits for containerd's cgroup1 package. memsw says
// whether memory.memsw.limit_in_bytes exists (swap accounting is on).
// Swappiness is written separately because some kernels refuse it.
func v1Resources(l Limits, memsw bool) *specs.LinuxResources {
	r := &specs.LinuxResources{}
	if l.MemoryBytes > 0 {
		mem := l.MemoryBytes
		r.Memory = &specs.LinuxMemory{Limit: &mem}
		if memsw {
			swap := l.MemoryBytes // memory+swap == memory: no swap
			r.Memory.Swap = &swap
		}
	}
	if l.Pids > 0 {
		pids := l.Pids
		r.Pids = &specs.LinuxPids{Limit: &pids}
	}
	shares := l.shares()
	r.CPU = &specs.LinuxCPU{Shares: &shares}
	if l.CPUs > 0 {
		quota := cpuQuotaUs(l.CPUs)
		period := uint64(cpuPeriodUs)
		r.CPU.Quota, r.CPU.Period = &quota, &period
	}
	return r
}

// v2Controls is what a cgroup v2 run directory offers.
type v2Controls struct {
	memory, pids, cpu bool
	swap              bool // memory.swap.max exists
}

// v2Resources converts limits for containerd's cgroup2 package. With the
// memory controller, swap is always off and the OOM killer takes the whole
// run (memory.oom.group) even without a memory limit of our own.
func v2Resources(l Limits, c v2Controls) *cgroup2.Resources {
	r := &cgroup2.Resources{}
	if c.memory {
		oomGroup := true
		r.Memory = &cgroup2.Memory{OOMGroup: &oomGroup}
		if l.MemoryBytes > 0 {
			mem := l.MemoryBytes
			r.Memory.Max = &mem
		}
		if c.swap {
			var zero int64
			r.Memory.Swap = &zero
		}
	}
	if l.Pids > 0 {
		r.Pids = &cgroup2.Pids{Max: l.Pids}
	}
	if c.cpu {
		weight := l.weight()
		r.CPU = &cgroup2.CPU{Weight: &weight}
		if l.CPUs > 0 {
			r.CPU.Max = cgroup2.CPUMax(cpuMax(l.CPUs))
		}
	}
	return r
}
