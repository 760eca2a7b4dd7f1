package cgroup

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Mode is the cgroup layout of the host.
type Mode string

const (
	// ModeV2 is the unified hierarchy only (cgroup2 mounted at /sys/fs/cgroup).
	ModeV2 Mode = "v2"
	// ModeHybrid is v1 controllers plus an empty cgroup2 hierarchy at
	// /sys/fs/cgroup/unified (systemd's hybrid layout).
	ModeHybrid Mode = "hybrid"
	// ModeV1 is v1 hierarchies only.
	ModeV1 Mode = "v1"
	// ModeNone means no usable cgroup mount was found.
	ModeNone Mode = "none"
)

// The fixed paths libcontainer (github.com/opencontainers/cgroups) uses to
// decide the mode and to resolve cgroup v2 paths.
const (
	unifiedMountpoint = "/sys/fs/cgroup"
	hybridMountpoint  = "/sys/fs/cgroup/unified"
)

// mountEntry is the part of a /proc/self/mountinfo line this package needs.
type mountEntry struct {
	root       string   // root of the mount within its filesystem (field 4)
	mountpoint string   // field 5, unescaped
	fstype     string   // "cgroup" or "cgroup2" for the interesting ones
	superOpts  []string // super options, e.g. ["rw", "memory"]
}

func (m mountEntry) hasOpt(opt string) bool {
	for _, o := range m.superOpts {
		if o == opt {
			return true
		}
	}
	return false
}

func readMountinfo() ([]mountEntry, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseMountinfo(f)
}

// parseMountinfo parses the cgroup and cgroup2 mounts of a mountinfo file;
// other mounts are skipped. Order is kept (a later entry is mounted on top
// of an earlier one with the same mount point).
func parseMountinfo(r io.Reader) ([]mountEntry, error) {
	var out []mountEntry
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for s.Scan() {
		line := s.Text()
		if line == "" {
			continue
		}
		fields := strings.Split(line, " ")
		sep := -1
		for i := 6; i < len(fields); i++ {
			if fields[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || len(fields) < sep+4 {
			return nil, fmt.Errorf("parse mountinfo line %q: malformed", line)
		}
		fstype := fields[sep+1]
		if fstype != "cgroup" && fstype != "cgroup2" {
			continue
		}
		out = append(out, mountEntry{
			root:       unescapeMountinfo(fields[3]),
			mountpoint: unescapeMountinfo(fields[4]),
			fstype:     fstype,
			superOpts:  strings.Split(fields[sep+3], ","),
		})
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	return out, nil
}

// unescapeMountinfo undoes the kernel's octal escaping (\040 for a space,
// \011, \012, \134) in mountinfo paths.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// lastMountAt returns the top-most mount at mountpoint, if any.
func lastMountAt(mounts []mountEntry, mountpoint string) (mountEntry, bool) {
	for i := len(mounts) - 1; i >= 0; i-- {
		if mounts[i].mountpoint == mountpoint {
			return mounts[i], true
		}
	}
	return mountEntry{}, false
}

// modeFromMounts reports the cgroup layout from the cgroup mounts of
// /proc/self/mountinfo, using the same rules as libcontainer: cgroup2 at
// /sys/fs/cgroup is v2, cgroup2 at /sys/fs/cgroup/unified is hybrid, any
// other cgroup mount is v1.
func modeFromMounts(mounts []mountEntry) Mode {
	if m, ok := lastMountAt(mounts, unifiedMountpoint); ok && m.fstype == "cgroup2" {
		return ModeV2
	}
	hasV1 := false
	for _, m := range mounts {
		if m.fstype == "cgroup" {
			hasV1 = true
			break
		}
	}
	if !hasV1 {
		return ModeNone
	}
	if m, ok := lastMountAt(mounts, hybridMountpoint); ok && m.fstype == "cgroup2" {
		return ModeHybrid
	}
	return ModeV1
}

func readProcCgroup(pid int) (map[string]string, error) {
	name := "/proc/self/cgroup"
	if pid > 0 {
		name = "/proc/" + strconv.Itoa(pid) + "/cgroup"
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseProcCgroup(f)
}

// parseProcCgroup parses /proc/<pid>/cgroup into a map from controller (or
// "name=<name>" for named v1 hierarchies, "" for the cgroup2 hierarchy) to
// the cgroup path, the same keys libcontainer uses.
func parseProcCgroup(r io.Reader) (map[string]string, error) {
	out := make(map[string]string)
	s := bufio.NewScanner(r)
	for s.Scan() {
		line := s.Text()
		if line == "" {
			continue
		}
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			return nil, fmt.Errorf("parse cgroup line %q: want id:controllers:path", line)
		}
		for _, ctl := range strings.Split(parts[1], ",") {
			out[ctl] = parts[2]
		}
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("read cgroup file: %w", err)
	}
	return out, nil
}
