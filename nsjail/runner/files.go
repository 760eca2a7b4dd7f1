package runner

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cellblock/cellblock/rootfs"
)

// pyFiles holds the runner and the cellblock package, under "py".
//
//go:embed py/_cellblock_runner.py py/cellblock/*.py
var pyFiles embed.FS

const (
	// EnvFD names the environment variable that holds the channel's
	// descriptor number when the runner starts.
	EnvFD = "CELLBLOCK_RUNNER_FD"
	// MPLBackend is matplotlib's backend in a run unless the request's env
	// sets MPLBACKEND.
	MPLBackend = "module://cellblock._mpl_backend"
)

// Files returns the files to put at layout.RunnerDir: _cellblock_runner.py and
// cellblock/*.py.
func Files() fs.FS {
	sub, err := fs.Sub(pyFiles, "py")
	if err != nil {
		panic(err) // "py" is a valid path: cannot happen
	}
	return sub
}

// WriteFiles writes Files into dir, which it creates if needed: files
// mode 0444, directories 0555, for the daemon to bind-mount read-only at
// layout.RunnerDir. dir must not exist or be empty.
func WriteFiles(dir string) error { return writeFiles(dir, nil) }

// writeFiles writes Files and extra (more files at the top, by name).
func writeFiles(dir string, extra map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write runner files: %w", err)
	}
	src := Files()
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
		return fmt.Errorf("write runner files into %s: %w", dir, err)
	}
	for _, name := range slices.Sorted(maps.Keys(extra)) {
		if err := os.WriteFile(filepath.Join(dir, name), extra[name], 0o444); err != nil {
			return fmt.Errorf("write runner files into %s: %w", dir, err)
		}
	}
	// Directories last, deepest first: once 0555 nothing more goes in.
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Chmod(dirs[i], 0o555); err != nil {
			return fmt.Errorf("write runner files into %s: %w", dir, err)
		}
	}
	return nil
}

// Install puts Files, read-only, in a directory under parent named by
// their hash, and returns that directory: a daemon of another version
// finds its own files, and a jail never sees a half-written one. extra
// are more files for every jail, by plain name at the top (the daemon's
// CA bundle, layout.CABundleName), in the hash too. It removes the
// directories of other versions under parent, which belongs to one daemon
// (its state directory is locked).
func Install(parent string, extra map[string][]byte) (string, error) {
	h := sha256.New()
	for _, name := range slices.Sorted(maps.Keys(extra)) {
		if name == "" || strings.ContainsAny(name, "/\x00") || name[0] == '.' {
			return "", fmt.Errorf("runner files: %q is no plain file name", name)
		}
		if _, err := fs.Stat(Files(), name); err == nil {
			return "", fmt.Errorf("runner files: %s is the runner's own", name)
		}
		fmt.Fprintf(h, "extra %s %d\n", name, len(extra[name]))
		h.Write(extra[name])
	}
	files := Files()
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
		return "", fmt.Errorf("runner files: %w", err)
	}
	dir := filepath.Join(parent, hex.EncodeToString(h.Sum(nil))[:16])
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("runner files: %w", err)
	}
	if entries, err := os.ReadDir(parent); err == nil {
		for _, e := range entries {
			if p := filepath.Join(parent, e.Name()); p != dir {
				rootfs.RemoveTree(p)
			}
		}
	}
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	tmp, err := os.MkdirTemp(parent, ".new-")
	if err != nil {
		return "", fmt.Errorf("runner files: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", fmt.Errorf("runner files: %w", err)
	}
	if err := writeFiles(tmp, extra); err != nil {
		rootfs.RemoveTree(tmp)
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		rootfs.RemoveTree(tmp)
		return "", fmt.Errorf("runner files: %w", err)
	}
	return dir, nil
}
