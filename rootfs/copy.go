package rootfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Modes of everything in a built tree: nothing is writable, everything is
// readable (and directories and executables searchable) by any uid, since a
// jail's user in a user namespace is "other" to the host's root.
const (
	dirMode  os.FileMode = 0o555
	fileMode os.FileMode = 0o444
	execMode os.FileMode = 0o555
)

// copyWorkers is how many files are copied at once; the copy is mostly
// page-cache bound, a few parallel copies hide per-file syscall latency.
const copyWorkers = 4

// treeAction says what copyTree does with one entry.
type treeAction int

const (
	copyEntry treeAction = iota
	skipEntry
	emptyDir // create the directory, copy nothing below it
)

// treeFilter decides per entry; rel is slash-separated, relative to the
// tree's source root.
type treeFilter func(rel string, isDir bool) treeAction

// fileJob is one regular file to copy.
type fileJob struct {
	src, dst string
	mode     os.FileMode
	mtime    time.Time
}

// copiedTree reports what copyTree copied.
type copiedTree struct {
	files []fileJob
}

// copyTree copies the tree at src to dst; directories may exist already,
// files may not. Regular files get fileMode or execMode (when any execute
// bit is set) and keep their modification time, so that the host's
// timestamp-validated .pyc files stay valid. Directories are created
// writable; makeReadOnly seals them at the end of the build. A symlink is
// kept when it is relative, stays inside the tree and resolves; otherwise
// a symlink to a regular file is replaced by a copy of the file and any
// other symlink is dropped. Special files are dropped. Cancelling ctx
// stops the copy, leaving part of the tree.
func copyTree(ctx context.Context, src, dst string, filter treeFilter) (*copiedTree, error) {
	out := &copiedTree{}
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("walk %s: %w", path, err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		relSlash := filepath.ToSlash(rel)
		if rel == "." {
			return mkdirExisting(target)
		}
		action := copyEntry
		if filter != nil {
			action = filter(relSlash, d.IsDir())
		}
		switch {
		case action == skipEntry:
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		case d.IsDir():
			if err := mkdirExisting(target); err != nil {
				return err
			}
			if action == emptyDir {
				return filepath.SkipDir
			}
			return nil
		case d.Type()&fs.ModeSymlink != 0:
			return copySymlink(src, path, target, out)
		case d.Type().IsRegular():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			out.files = append(out.files, fileJob{src: path, dst: target, mode: modeFor(fi.Mode()), mtime: fi.ModTime()})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("copy %s: %w", src, err)
	}
	if err := copyFiles(ctx, out.files); err != nil {
		return nil, fmt.Errorf("copy %s: %w", src, err)
	}
	return out, nil
}

// mkdirExisting makes a directory that may already exist, as when two
// trees (a split prefix and exec-prefix) merge into one.
func mkdirExisting(dir string) error {
	err := os.Mkdir(dir, 0o755)
	if errors.Is(err, fs.ErrExist) {
		if fi, serr := os.Lstat(dir); serr == nil && fi.IsDir() {
			return nil
		}
	}
	return err
}

// copySymlink handles a symlink found at path inside the tree rooted at root.
func copySymlink(root, path, target string, out *copiedTree) error {
	link, err := os.Readlink(path)
	if err != nil {
		return err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil // dangling
	}
	if !filepath.IsAbs(link) {
		resolved := filepath.Join(filepath.Dir(path), link)
		if r, err := filepath.Rel(root, resolved); err == nil && r != ".." && !strings.HasPrefix(r, "../") {
			return os.Symlink(link, target)
		}
	}
	if !fi.Mode().IsRegular() {
		return nil // a directory or special file outside the tree
	}
	out.files = append(out.files, fileJob{src: path, dst: target, mode: modeFor(fi.Mode()), mtime: fi.ModTime()})
	return nil
}

// modeFor maps a source mode to the mode of the copy.
func modeFor(m os.FileMode) os.FileMode {
	if m&0o111 != 0 {
		return execMode
	}
	return fileMode
}

// copyFiles copies the jobs with a few workers and returns the first error.
// Cancelling ctx stops it after the files being copied.
func copyFiles(ctx context.Context, jobs []fileJob) error {
	ch := make(chan fileJob)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for range copyWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range ch {
				if err := copyFile(j.src, j.dst, j.mode, j.mtime); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		}()
	}
feed:
	for _, j := range jobs {
		select {
		case ch <- j:
		case <-ctx.Done():
			break feed
		}
	}
	close(ch)
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return firstErr
}

// copyFile copies the content of src (following symlinks) to the new file
// dst with the given mode and modification time.
func copyFile(src, dst string, mode os.FileMode, mtime time.Time) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	// io.Copy between files uses copy_file_range, which can share extents.
	if _, err := io.Copy(out, in); err != nil {
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	if err := out.Chmod(mode); err != nil {
		return err
	}
	if !mtime.IsZero() {
		if err := os.Chtimes(dst, mtime, mtime); err != nil {
			return err
		}
	}
	return nil
}

// writeFile creates dst with content and a read-only mode.
func writeFile(dst string, content string, mode os.FileMode) error {
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Seal makes a tree read-only and, when we are root, root-owned (a setgid
// store directory would otherwise pass its group on): directories 0555,
// regular files 0444, or 0555 when any execute bit was set, with setuid,
// setgid and sticky bits cleared; symbolic links owned but untouched
// (chmod would follow them); anything else (fifos, sockets, devices)
// removed. It walks without following symbolic links, so it is safe on a
// tree a jail wrote, such as a dependency environment.
func Seal(root string) error {
	asRoot := os.Geteuid() == 0
	// Directories are made read-only last, deepest first, so that what is
	// removed below them can be removed without root.
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if asRoot {
			if err := os.Lchown(p, 0, 0); err != nil {
				return fmt.Errorf("seal %s: %w", p, err)
			}
		}
		switch t := d.Type(); {
		case t&fs.ModeSymlink != 0:
			return nil
		case d.IsDir():
			dirs = append(dirs, p)
			return nil
		case t.IsRegular():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			want := modeFor(fi.Mode())
			if fi.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != want {
				return os.Chmod(p, want)
			}
			return nil
		default:
			return os.Remove(p)
		}
	})
	if err != nil {
		return err
	}
	for _, d := range slices.Backward(dirs) {
		if err := os.Chmod(d, dirMode); err != nil {
			return err
		}
	}
	return nil
}

// removeTree removes a tree even when it was made read-only and we are not
// root (root ignores directory modes).
func RemoveTree(path string) error {
	if err := os.RemoveAll(path); err == nil || !errors.Is(err, fs.ErrPermission) {
		return err
	}
	_ = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
	return os.RemoveAll(path)
}
