package daemon

import (
	"fmt"
	"os"
	"strconv"

	"github.com/opencontainers/runc/libcontainer/exeseal"
	"golang.org/x/sys/unix"
)

// exeEnv carries the daemon's original executable path across the re-exec
// below, so that cellblock-init is still found beside it.
const exeEnv = "_CELLBLOCKD_EXE"

// sealSelf re-executes the daemon from a sealed memfd copy of its own
// binary, once, at start-up. libcontainer re-executes the daemon as every
// jail's first process and, unless /proc/self/exe already is a sealed
// memfd, protects the binary from being overwritten by a jail by sealing a
// fresh copy of it for every run (CVE-2019-5736): milliseconds per run for
// a 20 MB binary. Sealing once gives the same protection for free.
//
// It returns only if the daemon already runs sealed or sealing failed (the
// daemon then works as before, just slower).
func sealSelf() error {
	if exeseal.IsSelfExeCloned() {
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable: %w", err)
	}
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		return fmt.Errorf("open own executable: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat own executable: %w", err)
	}
	sealed, err := exeseal.CloneBinary(f, st.Size(), "cellblockd", os.TempDir())
	if err != nil {
		return fmt.Errorf("seal own executable: %w", err)
	}
	if !exeseal.IsCloned(sealed) {
		sealed.Close()
		return fmt.Errorf("sealed copy of own executable is not a sealed memfd")
	}
	if os.Getenv(exeEnv) == "" {
		os.Setenv(exeEnv, exe)
	}
	path := "/proc/self/fd/" + strconv.Itoa(int(sealed.Fd()))
	err = unix.Exec(path, os.Args, os.Environ())
	sealed.Close()
	return fmt.Errorf("re-execute from sealed copy: %w", err)
}

// originalExecutable is the daemon's executable before sealSelf.
func originalExecutable() (string, error) {
	if p := os.Getenv(exeEnv); p != "" {
		return p, nil
	}
	return os.Executable()
}
