package cgroup

import (
	"errors"
	"fmt"
	"time"

	"github.com/containerd/cgroups/v3/cgroup2"
	"golang.org/x/sys/unix"
)

// Timing of Kill. Variables so tests can shorten them.
var (
	// killTimeout bounds Kill: after it, surviving processes are an error.
	killTimeout = 2 * time.Second
	// killRoundWait is how long one kill round waits for the cgroup to
	// empty before the next round signals again.
	killRoundWait = 100 * time.Millisecond
	// freezeTimeout bounds waiting for a freezer to report FROZEN.
	freezeTimeout = 100 * time.Millisecond
)

// signalMember sends SIGKILL to pid only if it is a member of the run's
// cgroup. It opens a pidfd first, checks membership, then signals through
// the pidfd, so a pid that is recycled in between is never signalled: if
// the original process died, the pidfd signal fails with ESRCH.
func (c *Cgroup) signalMember(pid int) error {
	fd, err := unix.PidfdOpen(pid, 0)
	switch {
	case err == nil:
		defer unix.Close(fd)
	case errors.Is(err, unix.ESRCH):
		return nil
	case errors.Is(err, unix.ENOSYS):
		fd = -1 // kernel < 5.3: kill(2) after the check, racy only on pid reuse
	default:
		return fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	ok, err := c.isMember(pid)
	if err != nil || !ok {
		return err
	}
	if fd >= 0 {
		err = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
	} else {
		err = unix.Kill(pid, unix.SIGKILL)
	}
	if err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("kill %d: %w", pid, err)
	}
	return nil
}

// signalAll sends SIGKILL to every member process listed in the run's
// cgroups; it returns the first error but tries every pid.
func (c *Cgroup) signalAll() error {
	pids, err := c.procs()
	if err != nil {
		return err
	}
	var first error
	for _, pid := range pids {
		if err := c.signalMember(pid); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// kill empties the cgroup: rounds of (freeze, SIGKILL every member, thaw) or
// cgroup.kill, each followed by a short wait, until no process is left or
// killTimeout has passed.
func (c *Cgroup) kill() error {
	deadline := time.Now().Add(killTimeout)
	var lastErr error
	for {
		pids, err := c.procs()
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			err := fmt.Errorf("%w: %d process(es) left after %v: %v", ErrKillTimeout, len(pids), killTimeout, pids)
			if lastErr != nil {
				err = errors.Join(err, lastErr)
			}
			return err
		}
		if err := c.killRound(); err != nil {
			lastErr = err
		}
		until := time.Now().Add(killRoundWait)
		if until.After(deadline) {
			until = deadline
		}
		c.waitEmpty(until)
	}
}

// waitEmpty polls until the cgroup has no processes or until is reached.
func (c *Cgroup) waitEmpty(until time.Time) {
	delay := 500 * time.Microsecond
	for {
		pids, err := c.procs()
		if err != nil || len(pids) == 0 || time.Now().After(until) {
			return
		}
		time.Sleep(delay)
		if delay < 10*time.Millisecond {
			delay *= 2
		}
	}
}

func (c *Cgroup) killRound() error {
	if c.root.mode == ModeV2 {
		return c.killRoundV2()
	}
	return c.killRoundV1()
}

// killRoundV1: with the v1 freezer, frozen tasks can neither fork nor exit,
// so the pid list read while frozen is complete and stable; SIGKILL is
// delivered on THAWED. The freezer is written directly (doc.go):
// containerd's Freeze and Thaw wait for the state without bound, and a
// run must not stall its own kill.
func (c *Cgroup) killRoundV1() error {
	fz := c.dirFor("freezer")
	if fz == "" {
		return c.signalAll()
	}
	ferr := freezeV1(fz)
	serr := c.signalAll()
	terr := thawV1(fz)
	return errors.Join(ferr, serr, terr)
}

func freezeV1(dir string) error {
	if err := writeFile(dir, "freezer.state", "FROZEN"); err != nil {
		return err
	}
	deadline := time.Now().Add(freezeTimeout)
	for {
		st, err := readString(dir, "freezer.state")
		if err != nil {
			return err
		}
		if st == "FROZEN" || time.Now().After(deadline) {
			// Still FREEZING (tasks keep forking): signal what is there;
			// the next round gets the rest.
			return nil
		}
		time.Sleep(time.Millisecond)
	}
}

func thawV1(dir string) error {
	deadline := time.Now().Add(time.Second)
	for {
		if err := writeFile(dir, "freezer.state", "THAWED"); err != nil {
			if errors.Is(err, unix.ENOENT) {
				return nil
			}
			return err
		}
		st, err := readString(dir, "freezer.state")
		if err != nil || st == "THAWED" {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("thaw %s: still %s", dir, st)
		}
		time.Sleep(time.Millisecond)
	}
}

// killRoundV2 uses cgroup.kill (kernel >= 5.14, through containerd's
// Kill), which kills every process of the cgroup and its descendants
// atomically with respect to fork; without it, cgroup.freeze (>= 5.2,
// written directly, bounded: see killRoundV1), SIGKILL every member,
// unfreeze.
func (c *Cgroup) killRoundV2() error {
	dir := c.dirs[0]
	if c.hasKillFile {
		m := c.cg2
		if m == nil { // a swept leftover
			var err error
			if m, err = cgroup2.Load(c.LibcontainerPath(), cgroup2.WithMountpoint(c.root.v2.mountpoint)); err != nil {
				return err
			}
		}
		return m.Kill()
	}
	if !c.hasFreezeFile {
		return c.signalAll()
	}
	ferr := writeFile(dir, "cgroup.freeze", "1")
	if ferr == nil {
		deadline := time.Now().Add(freezeTimeout)
		for {
			frozen, _, err := readKeyed(dir, "cgroup.events", "frozen")
			if err != nil || frozen == 1 || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	serr := c.signalAll()
	terr := writeFile(dir, "cgroup.freeze", "0")
	if errors.Is(terr, unix.ENOENT) {
		terr = nil
	}
	return errors.Join(ferr, serr, terr)
}
