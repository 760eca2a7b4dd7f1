package daemontest

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// IdleInit reports whether pid is the init of a prestarted jail still
// waiting for its program: cellblock-init (comm "init") that still holds
// its launch socket (descriptor 3, closed once the program is handed
// over), whose only child, if any, is the runner it started with the
// jail, with nothing started.
func IdleInit(pid int) bool {
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil || strings.TrimSpace(string(comm)) != "init" {
		return false
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/fd/3", pid)); err != nil {
		return false
	}
	kids := Children(pid)
	return len(kids) == 0 || len(kids) == 1 && IdleRunner(kids[0])
}

// IdleRunner reports whether pid is a jail's runner (its Python running
// cellblock's runner) that has started nothing.
func IdleRunner(pid int) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(cmdline), "_cellblock_runner.py") && len(Children(pid)) == 0
}

// IdleJailMember reports whether pid belongs to a prestarted jail that
// waits for a run: its idle init, or that init's runner.
func IdleJailMember(pid int) bool {
	if IdleInit(pid) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The parent's pid is the 4th field, after the command in parentheses.
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(fields) < 2 {
		return false
	}
	ppid, err := strconv.Atoi(fields[1])
	return err == nil && IdleRunner(pid) && IdleInit(ppid)
}

// Children are the pids of pid's children, all its threads' together.
func Children(pid int) []int {
	var kids []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, t := range tasks {
		c, _ := os.ReadFile(t)
		for _, f := range strings.Fields(string(c)) {
			if k, err := strconv.Atoi(f); err == nil {
				kids = append(kids, k)
			}
		}
	}
	return kids
}

// JailCgroups lists, in every cgroup hierarchy, the directories below a
// daemon's cgroup subtree (v1) or below its "runs" (v2) whose subtree name
// ours accepts: the cgroups of its jails, and its own "runs" and "daemon"
// directories.
func JailCgroups(ours func(subtree string) bool) []string {
	var found []string
	_ = filepath.WalkDir("/sys/fs/cgroup", func(p string, e fs.DirEntry, err error) error {
		if err != nil || !e.IsDir() {
			return nil
		}
		if strings.Count(p, "/") > 12 {
			return filepath.SkipDir
		}
		parent := filepath.Base(filepath.Dir(p))
		if parent == "runs" {
			parent = filepath.Base(filepath.Dir(filepath.Dir(p)))
		}
		if ours(parent) {
			found = append(found, p)
		}
		return nil
	})
	return found
}
