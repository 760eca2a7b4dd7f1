package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// One daemon per subtree: OpenRoot takes an exclusive flock(2) on each
// directory whose runs Sweep would remove (the private <own>/<name> on
// v1 and hybrid, <own> on v2), on the directory itself, so that the lock
// lives with the very thing it guards: two daemons whose state
// directories differ but whose subtrees are the same find each other,
// whatever /run or /var they see. The kernel drops the lock when the
// process dies, so a crashed daemon never leaves it behind, and the next
// one's Sweep removes what the crash left.

// InUseError is OpenRoot's error when another process holds the subtree.
// It matches ErrInUse.
type InUseError struct {
	// Name is the root's name (--cgroup-name), Dir the directory held.
	Name, Dir string
	// PID holds the lock (as /proc/locks shows it), 0 when unknown.
	PID int
}

func (e *InUseError) Error() string {
	holder := "another process"
	if e.PID > 0 {
		holder = "pid " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("%s: the cgroup subtree %s of cgroup name %q is held by %s (another cellblockd); stop it, or give this daemon another --cgroup-name",
		ErrInUse, e.Dir, e.Name, holder)
}

// Is makes errors.Is(err, ErrInUse) hold.
func (e *InUseError) Is(target error) bool { return target == ErrInUse }

// lockDirs takes the lock on every directory of dirs, in order, and
// returns the open directories that hold them. On error none is held.
func lockDirs(name string, dirs []string) ([]*os.File, error) {
	var held []*os.File
	for _, d := range dirs {
		f, err := lockDir(name, d)
		if err != nil {
			for _, h := range held {
				h.Close()
			}
			return nil, err
		}
		held = append(held, f)
	}
	return held, nil
}

// lockDir takes an exclusive, non-blocking flock on directory dir. A
// directory removed (and perhaps made again) between the open and the
// lock, as a daemon closing its root does, is opened again: the lock
// must be on the directory that is there.
func lockDir(name, dir string) (*os.File, error) {
	for range 5 {
		f, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", dir, err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			var st unix.Stat_t
			_ = unix.Fstat(int(f.Fd()), &st)
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, &InUseError{Name: name, Dir: dir, PID: lockHolder(st)}
			}
			return nil, fmt.Errorf("lock %s: %w", dir, err)
		}
		fi, ferr := f.Stat()
		di, derr := os.Stat(dir)
		if ferr == nil && derr == nil && os.SameFile(fi, di) {
			return f, nil
		}
		f.Close()
		if derr != nil && !errors.Is(derr, os.ErrNotExist) {
			return nil, fmt.Errorf("lock %s: %w", dir, derr)
		}
		if errors.Is(derr, os.ErrNotExist) {
			if _, err := mkdirNew(dir); err != nil {
				return nil, fmt.Errorf("lock %s: %w", dir, err)
			}
		}
	}
	return nil, fmt.Errorf("lock %s: it was removed and made again while it was locked, five times", dir)
}

// lockHolder is the pid /proc/locks names for the flock on the inode st
// describes, 0 when it names none.
func lockHolder(st unix.Stat_t) int {
	f, err := os.Open("/proc/locks")
	if err != nil {
		return 0
	}
	defer f.Close()
	return parseLocks(bufio.NewScanner(f), unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
}

// parseLocks finds the pid of a FLOCK on device major:minor, inode ino in
// /proc/locks lines such as
//
//	1: FLOCK  ADVISORY  WRITE 24659 00:20:72866 0 EOF
//
// (the device's major and minor numbers in hex, the inode in decimal).
// Lines of blocked waiters ("1: -> FLOCK ...") are skipped.
func parseLocks(s *bufio.Scanner, major, minor uint32, ino uint64) int {
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) < 6 || f[1] != "FLOCK" || !slices.Contains([]string{"WRITE", "READ"}, f[3]) {
			continue
		}
		parts := strings.Split(f[5], ":")
		if len(parts) != 3 {
			continue
		}
		ma, err1 := strconv.ParseUint(parts[0], 16, 32)
		mi, err2 := strconv.ParseUint(parts[1], 16, 32)
		in, err3 := strconv.ParseUint(parts[2], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || uint32(ma) != major || uint32(mi) != minor || in != ino {
			continue
		}
		if pid, err := strconv.Atoi(f[4]); err == nil && pid > 0 {
			return pid
		}
	}
	return 0
}
