// Package workdir reads a run's /work from the host, for the daemon, which
// must never be led by what the program left there into reading or
// blocking on anything else. It opens the jail's /work tmpfs once, as a
// directory descriptor taken through /proc/PID/root before any of the
// program's code ran (OpenJail), and resolves every path beneath that
// descriptor with openat2(2) and RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
// RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV, opening with O_NOFOLLOW |
// O_NONBLOCK, and checking with fstat(2) that what it opened is a regular
// file before it reads a byte. Everything else (symbolic links, FIFOs,
// sockets, device nodes) is reported as skipped, with the reason; so is a
// file over a cap, or one that changed while it was read: a partial file
// is never presented as whole.
//
// The descriptor keeps the tmpfs alive, and readable, after the jail's
// processes are gone and its mount namespace with them (a detached mount
// lives while a descriptor holds it), so that a run's files are read when
// nothing can change them any more.
//
// It reads and lists; where content goes is its caller's (a Sink). It does
// not write to /work: the jail's own runner does (package runner).
package workdir

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Dir is a run's /work, open. A Dir is used by one goroutine at a time;
// Clone gives another its own.
type Dir struct {
	f *os.File
}

// resolve are the openat2 resolve flags of every path opened beneath a Dir.
const resolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// ErrNotTmpfs is returned by OpenJail when the jail's /work is not a tmpfs.
var ErrNotTmpfs = errors.New("the jail's /work is not a tmpfs")

// OpenJail opens /work of the jail whose init's /proc directory is open as
// procDir, through its root. Call it before the jail runs code that is not
// the daemon's: the path is resolved in the jail's mount namespace, without
// following a symbolic link, and must end on a tmpfs.
func OpenJail(procDir int) (*Dir, error) {
	root, err := unix.Openat(procDir, "root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open the jail's root: %w", err)
	}
	defer unix.Close(root)
	fd, err := openat2(root, "work", unix.O_RDONLY|unix.O_DIRECTORY,
		unix.RESOLVE_BENEATH|unix.RESOLVE_NO_SYMLINKS|unix.RESOLVE_NO_MAGICLINKS)
	if err != nil {
		return nil, fmt.Errorf("open the jail's /work: %w", err)
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("the jail's /work: %w", err)
	}
	if st.Type != unix.TMPFS_MAGIC {
		unix.Close(fd)
		return nil, ErrNotTmpfs
	}
	return &Dir{f: os.NewFile(uintptr(fd), "work")}, nil
}

// Open opens the directory at path as a Dir: for tests, and tools that
// read a tree as the daemon reads a jail's.
func Open(path string) (*Dir, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return &Dir{f: os.NewFile(uintptr(fd), path)}, nil
}

// Clone returns a Dir of its own on the same directory, which the caller
// closes. It is safe to call while another goroutine closes d: it then
// fails.
func (d *Dir) Clone() (*Dir, error) {
	rc, err := d.f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var nfd int
	var derr error
	if err := rc.Control(func(fd uintptr) {
		nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, derr
	}
	return &Dir{f: os.NewFile(uintptr(nfd), d.f.Name())}, nil
}

// Close closes the descriptor. It is safe on a nil Dir.
func (d *Dir) Close() error {
	if d == nil {
		return nil
	}
	return d.f.Close()
}

// Has reports whether name exists in d (a symbolic link counts); false
// on a nil Dir.
func (d *Dir) Has(name string) bool {
	if d == nil {
		return false
	}
	var st unix.Stat_t
	return unix.Fstatat(d.fd(), name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
}

// fd is d's descriptor.
func (d *Dir) fd() int { return int(d.f.Fd()) }

// openat2 opens path beneath dirfd with flags (O_CLOEXEC and O_NOFOLLOW
// added) and resolve, retrying when the kernel asks to.
func openat2(dirfd int, path string, flags int, resolve uint64) (int, error) {
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC | unix.O_NOFOLLOW), Resolve: resolve}
	var err error
	for range 8 {
		var fd int
		fd, err = unix.Openat2(dirfd, path, &how)
		if err == nil {
			return fd, nil
		}
		// EAGAIN: a rename raced the lookup; EINTR: a signal.
		if err != unix.EAGAIN && err != unix.EINTR {
			break
		}
	}
	return -1, err
}

// openBeneath opens path (relative, no symbolic link anywhere) beneath
// dirfd, on the same mount.
func openBeneath(dirfd int, path string, flags int) (int, error) {
	return openat2(dirfd, path, flags|unix.O_NONBLOCK, resolve)
}

// kind names what a file type is, for a skipped entry's reason.
func kind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return "a symbolic link (never followed)"
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "a device node"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFREG:
		return "a regular file"
	}
	return "not a regular file"
}

// Stamp is what tells one state of a file from another: inode, size, and
// modification and change times (a write changes the ctime, which no
// program can set back).
type Stamp struct {
	Ino   uint64
	Size  int64
	Mtime unix.Timespec
	Ctime unix.Timespec
}

func stampOf(st *unix.Stat_t) Stamp {
	return Stamp{Ino: st.Ino, Size: st.Size, Mtime: st.Mtim, Ctime: st.Ctim}
}
