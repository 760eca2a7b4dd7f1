package cgroup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// writeFile writes val to an existing cgroup control file. It never creates
// files, so a missing control file is fs.ErrNotExist rather than EACCES.
func writeFile(dir, name, val string) error {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(val)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", val, filepath.Join(dir, name), err)
	}
	return nil
}

func readString(dir, name string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	return string(bytes.TrimSpace(b)), err
}

// readInt reads a control file that holds one integer.
func readInt(dir, name string) (int64, error) {
	v, err := readString(dir, name)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", filepath.Join(dir, name), err)
	}
	return n, nil
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// readKeyed reads one "key value" line of a flat-keyed control file
// (memory.events, pids.events, cgroup.events, memory.oom_control, ...).
func readKeyed(dir, name, key string) (int64, bool, error) {
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), " ")
		if !ok || k != key {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return 0, false, fmt.Errorf("parse %s in %s: %w", key, filepath.Join(dir, name), err)
		}
		return n, true, nil
	}
	return 0, false, s.Err()
}

// readProcs returns the pids in cgroup.procs of dir and of every cgroup below
// it. A directory that is gone counts as empty.
func readProcs(dir string) ([]int, error) {
	var out []int
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENODEV) {
				return nil
			}
			return err
		}
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				return fmt.Errorf("parse %s: %w", filepath.Join(p, "cgroup.procs"), err)
			}
			out = append(out, pid)
		}
		return nil
	})
	return out, err
}

// sortUnique sorts pids and drops duplicates.
func sortUnique(pids []int) []int {
	slices.Sort(pids)
	return slices.Compact(pids)
}

// removeTree removes a cgroup directory and any cgroups below it. A missing
// directory is not an error; EBUSY (tasks still leaving) is retried for
// about a second.
func removeTree(dir string) error {
	err := unix.Rmdir(dir)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) {
		return &os.PathError{Op: "rmdir", Path: dir, Err: err}
	}
	entries, rerr := os.ReadDir(dir)
	if rerr != nil {
		if errors.Is(rerr, fs.ErrNotExist) {
			return nil
		}
		return rerr
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	delay := time.Millisecond
	for i := 0; i < 10; i++ {
		err = unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			break
		}
		time.Sleep(delay)
		delay *= 2
	}
	return &os.PathError{Op: "rmdir", Path: dir, Err: err}
}

// rmdirIfEmpty removes dir if it has no child cgroups and no tasks.
func rmdirIfEmpty(dir string) error {
	err := unix.Rmdir(dir)
	switch {
	case err == nil, errors.Is(err, unix.ENOENT), errors.Is(err, unix.EBUSY), errors.Is(err, unix.ENOTEMPTY), errors.Is(err, unix.EEXIST):
		return nil
	default:
		return &os.PathError{Op: "rmdir", Path: dir, Err: err}
	}
}

// mkdirNew creates dir, reporting whether it did (false if it existed).
func mkdirNew(dir string) (bool, error) {
	err := os.Mkdir(dir, 0o755)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	return false, err
}

// isGone reports whether err means the process or file no longer exists.
func isGone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH)
}
