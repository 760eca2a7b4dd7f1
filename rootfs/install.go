package rootfs

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// writeFiles writes the tree src into dir, which it creates if needed:
// files mode 0444, directories 0555, for the daemon to bind-mount
// read-only into jails. dir must not exist or be empty.
func writeFiles(dir string, src fs.FS) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write files: %w", err)
	}
	var dirs []string
	err := fs.WalkDir(src, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, filepath.FromSlash(path))
		if d.IsDir() {
			if path != "." {
				if err := os.Mkdir(dst, 0o755); err != nil {
					return err
				}
			}
			dirs = append(dirs, dst)
			return nil
		}
		b, err := fs.ReadFile(src, path)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o444)
	})
	if err != nil {
		return fmt.Errorf("write files into %s: %w", dir, err)
	}
	// Directories last, deepest first: once 0555 nothing more goes in.
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Chmod(dirs[i], 0o555); err != nil {
			return fmt.Errorf("write files into %s: %w", dir, err)
		}
	}
	return nil
}

// InstallFiles puts the tree files, read-only (writeFiles), in a
// directory under parent named by their hash, and returns that directory:
// a daemon of another version finds its own files, and a jail never sees
// a half-written one. It removes the other directories under parent,
// which belongs to one daemon (its state directory is locked). The
// daemon installs the runner's files (nsjail/runner.Files) with it.
func InstallFiles(parent string, files fs.FS) (string, error) {
	h := sha256.New()
	err := fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(files, p)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %d\n", p, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("install files: %w", err)
	}
	dir := filepath.Join(parent, hex.EncodeToString(h.Sum(nil))[:16])
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("install files: %w", err)
	}
	if entries, err := os.ReadDir(parent); err == nil {
		for _, e := range entries {
			if p := filepath.Join(parent, e.Name()); p != dir {
				RemoveTree(p)
			}
		}
	}
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	tmp, err := os.MkdirTemp(parent, ".new-")
	if err != nil {
		return "", fmt.Errorf("install files: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", fmt.Errorf("install files: %w", err)
	}
	if err := writeFiles(tmp, files); err != nil {
		RemoveTree(tmp)
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		RemoveTree(tmp)
		return "", fmt.Errorf("install files: %w", err)
	}
	return dir, nil
}
