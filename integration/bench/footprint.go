package main

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cellblock/cellblock/internal/daemontest"
)

// footprint reports the memory d holds while idle, when says at which
// point of the bench: the daemon's own resident set (split into its
// anonymous memory, the file pages it maps, and the pages of the sealed
// copy of its binary it runs from, a memfd that holds the whole binary
// whether mapped or not), and for each waiting jail its init's resident
// set, its runner's resident and proportional set (the interpreter's
// shared pages are counted once across jails in the latter), and what
// the memory controller charges the jail's cgroup.
func footprint(d *benchDaemon, when string) error {
	if err := d.settle(); err != nil {
		return err
	}
	pid := d.Cmd.Process.Pid
	st, err := procStatus(pid)
	if err != nil {
		return err
	}
	fmt.Printf("memory of daemon %s, %s: %s resident (%s anonymous, %s file, %s of its sealed binary)",
		d.name, when, mib(st["VmRSS:"]), mib(st["RssAnon:"]), mib(st["RssFile:"]), mib(st["RssShmem:"]))
	if link, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && strings.HasPrefix(link, "/memfd:") {
		if fi, err := os.Stat(fmt.Sprintf("/proc/%d/exe", pid)); err == nil {
			fmt.Printf("; the sealed copy holds %s in all", mib(fi.Size()>>10))
		}
	}
	fmt.Println()

	var inits, runnersRSS, runnersPSS, charged []int64
	for _, c := range daemontest.Children(pid) {
		if !daemontest.IdleInit(c) {
			continue
		}
		st, err := procStatus(c)
		if errors.Is(err, fs.ErrNotExist) {
			continue // it died meanwhile: not a waiting jail
		}
		if err != nil {
			return err
		}
		inits = append(inits, st["VmRSS:"])
		if kb, err := cgroupMemoryKB(c); err == nil {
			charged = append(charged, kb)
		}
		for _, r := range daemontest.Children(c) {
			st, err := procStatus(r)
			if err == nil {
				var pss map[string]int64
				pss, err = procKB(r, "smaps_rollup", "Pss:")
				runnersRSS, runnersPSS = append(runnersRSS, st["VmRSS:"]), append(runnersPSS, pss["Pss:"])
			}
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	if len(inits) == 0 {
		return nil
	}
	fmt.Printf("  %d jails waiting, each (mean): its init %s resident; its Python with the runner's imports %s resident, %s proportional; its cgroup charged %s\n",
		len(inits), mib(mean(inits)), mib(mean(runnersRSS)), mib(mean(runnersPSS)), mib(mean(charged)))
	return nil
}

// procStatus reads the memory lines of /proc/pid/status, in kB.
func procStatus(pid int) (map[string]int64, error) {
	return procKB(pid, "status", "VmRSS:", "RssAnon:", "RssFile:", "RssShmem:")
}

// procKB reads the "Key: N kB" lines of /proc/pid/file named by keys.
func procKB(pid int, file string, keys ...string) (map[string]int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/%s", pid, file))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := make(map[string]int64, len(keys))
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		for _, k := range keys {
			if len(fields) >= 2 && fields[0] == k {
				n, err := strconv.ParseInt(fields[1], 10, 64)
				if err != nil {
					return nil, fmt.Errorf("/proc/%d/%s: %s: %w", pid, file, k, err)
				}
				out[k] = n
			}
		}
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	for _, k := range keys {
		if _, ok := out[k]; !ok {
			return nil, fmt.Errorf("no %s in /proc/%d/%s", k, pid, file)
		}
	}
	return out, nil
}

// cgroupMemoryKB reads what the memory controller charges pid's cgroup:
// memory.usage_in_bytes on cgroup v1, memory.current on v2.
func cgroupMemoryKB(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return 0, err
	}
	var file string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "" && file == "":
			file = filepath.Join("/sys/fs/cgroup", parts[2], "memory.current")
		case strings.Contains(","+parts[1]+",", ",memory,"):
			file = filepath.Join("/sys/fs/cgroup/memory", parts[2], "memory.usage_in_bytes")
		}
	}
	if file == "" {
		return 0, fmt.Errorf("no memory cgroup for %d", pid)
	}
	v, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
	return n >> 10, err
}

// mean is the mean of v, 0 for none.
func mean(v []int64) int64 {
	if len(v) == 0 {
		return 0
	}
	var s int64
	for _, x := range v {
		s += x
	}
	return s / int64(len(v))
}

// mib formats kB as MiB.
func mib(kb int64) string { return fmt.Sprintf("%.1f MiB", float64(kb)/1024) }
