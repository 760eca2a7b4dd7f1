package runner

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// pyFiles holds the runner and the cellblock package, under "py".
//
//go:embed py/_cellblock_runner.py py/cellblock/*.py
var pyFiles embed.FS

const (
	// LibDir is where the jail has Files, read-only; PYTHONPATH includes it.
	LibDir = "/usr/lib/cellblock"
	// RunnerPath is the runner program in the jail: run as `python RunnerPath`.
	RunnerPath = LibDir + "/_cellblock_runner.py"
	// EnvFD names the environment variable that holds the channel's
	// descriptor number when the runner starts.
	EnvFD = "CELLBLOCK_RUNNER_FD"
	// MPLBackend is matplotlib's backend in a run unless the request's env
	// sets MPLBACKEND.
	MPLBackend = "module://cellblock._mpl_backend"
)

// Files returns the files to put at LibDir: _cellblock_runner.py and
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
// LibDir. dir must not exist or be empty.
func WriteFiles(dir string) error {
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
	// Directories last, deepest first: once 0555 nothing more goes in.
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Chmod(dirs[i], 0o555); err != nil {
			return fmt.Errorf("write runner files into %s: %w", dir, err)
		}
	}
	return nil
}
