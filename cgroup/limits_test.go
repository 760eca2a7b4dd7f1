package cgroup

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestValidateID(t *testing.T) {
	for _, ok := range []string{"a", "run-1", "A_b-9", strings.Repeat("x", 64)} {
		if err := ValidateID(ok); err != nil {
			t.Errorf("ValidateID(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "a/b", "a b", "ü", "x\n", strings.Repeat("x", 65), "../etc"} {
		if err := ValidateID(bad); !errors.Is(err, ErrInvalidID) {
			t.Errorf("ValidateID(%q) = %v, want ErrInvalidID", bad, err)
		}
	}
}

func TestLimitsValidate(t *testing.T) {
	for _, ok := range []Limits{{}, {MemoryBytes: 64 << 20, Pids: 8, CPUs: 1}, {CPUs: MinCPUs}, {CPUs: MaxCPUs}} {
		if err := ok.Validate(); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}
	for _, bad := range []Limits{{MemoryBytes: -1}, {Pids: -1}, {CPUs: -1}, {CPUs: 0.001}, {CPUs: MaxCPUs + 1}, {CPUs: math.NaN()}, {CPUs: math.Inf(1)}} {
		if err := bad.Validate(); !errors.Is(err, ErrInvalidLimits) {
			t.Errorf("%+v: err = %v, want ErrInvalidLimits", bad, err)
		}
	}
}

func TestCPUQuota(t *testing.T) {
	for _, tc := range []struct {
		cpus  float64
		quota int64
		max   string
	}{
		{1, 100000, "100000 100000"},
		{0.5, 50000, "50000 100000"},
		{2.25, 225000, "225000 100000"},
		{0.01, 1000, "1000 100000"},
		{0.0123456, 1235, "1235 100000"},
		{0, 1000, "max 100000"}, // quota clamps; cpu.max says no limit
	} {
		if got := cpuQuotaUs(tc.cpus); got != tc.quota {
			t.Errorf("cpuQuotaUs(%v) = %d, want %d", tc.cpus, got, tc.quota)
		}
		if got := cpuMax(tc.cpus); got != tc.max {
			t.Errorf("cpuMax(%v) = %q, want %q", tc.cpus, got, tc.max)
		}
	}
}

func TestFormatMax(t *testing.T) {
	for v, want := range map[int64]string{0: "max", -1: "max", 8: "8", 64 << 20: "67108864"} {
		if got := formatMax(v); got != want {
			t.Errorf("formatMax(%d) = %q, want %q", v, got, want)
		}
	}
}

func TestV1Resources(t *testing.T) {
	r := v1Resources(Limits{}, true)
	if r.Memory != nil || r.Pids != nil || r.CPU.Quota != nil || *r.CPU.Shares != 1024 {
		t.Errorf("no limits gave %+v", r)
	}
	if r = v1Resources(Limits{Background: true}, true); *r.CPU.Shares != 2 {
		t.Errorf("background cpu.shares %d, want 2", *r.CPU.Shares)
	}
	r = v1Resources(Limits{MemoryBytes: 64 << 20, Pids: 8, CPUs: 1.5}, true)
	if *r.Memory.Limit != 64<<20 || *r.Memory.Swap != 64<<20 {
		t.Errorf("memory %d memsw %d", *r.Memory.Limit, *r.Memory.Swap)
	}
	if *r.Pids.Limit != 8 || *r.CPU.Quota != 150000 || *r.CPU.Period != 100000 {
		t.Errorf("pids %d quota %d period %d", *r.Pids.Limit, *r.CPU.Quota, *r.CPU.Period)
	}
	if r.Memory.Swappiness != nil {
		t.Error("swappiness is written separately, not through containerd")
	}
	if r = v1Resources(Limits{MemoryBytes: 1 << 20}, false); r.Memory.Swap != nil {
		t.Error("memsw set without swap accounting")
	}
}

func TestV2Resources(t *testing.T) {
	all := v2Controls{memory: true, pids: true, cpu: true, swap: true}
	r := v2Resources(Limits{MemoryBytes: 64 << 20, Pids: 8, CPUs: 0.5}, all)
	if *r.Memory.Max != 64<<20 || *r.Memory.Swap != 0 || !*r.Memory.OOMGroup {
		t.Errorf("memory %+v", r.Memory)
	}
	if r.Pids.Max != 8 || r.CPU.Max != "50000 100000" || *r.CPU.Weight != 100 {
		t.Errorf("pids %+v cpu %+v", r.Pids, r.CPU)
	}
	// Without limits: still no swap, group OOM kill and the default CPU
	// weight, nothing else.
	r = v2Resources(Limits{}, all)
	if r.Memory.Max != nil || r.Memory.Swap == nil || r.Memory.OOMGroup == nil || r.Pids != nil || r.CPU.Max != "" || *r.CPU.Weight != 100 {
		t.Errorf("no limits gave %+v %+v", r, r.Memory)
	}
	if r = v2Resources(Limits{Background: true}, all); *r.CPU.Weight != 1 {
		t.Errorf("background cpu.weight %d, want 1", *r.CPU.Weight)
	}
	if r = v2Resources(Limits{}, v2Controls{memory: true}); r.CPU != nil {
		t.Errorf("cpu settings without the cpu controller: %+v", r.CPU)
	}
	if r = v2Resources(Limits{MemoryBytes: 1 << 20}, v2Controls{memory: true}); r.Memory.Swap != nil {
		t.Error("memory.swap.max written where it does not exist")
	}
}
