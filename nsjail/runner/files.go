package runner

import (
	"embed"
	"fmt"
	"io/fs"
	"strings"
	"testing/fstest"
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
// cellblock/*.py. The daemon lays them down read-only with
// rootfs.InstallFiles.
func Files() fs.FS {
	sub, err := fs.Sub(pyFiles, "py")
	if err != nil {
		panic(err) // "py" is a valid path: cannot happen
	}
	return sub
}

// FilesWith returns Files with extra, more files for every jail by plain
// name at the top of the tree (the daemon's CA bundle,
// layout.CABundleName). A name that is not plain, or that is one of the
// runner's own, is an error.
func FilesWith(extra map[string][]byte) (fs.FS, error) {
	if len(extra) == 0 {
		return Files(), nil
	}
	files := fstest.MapFS{}
	err := fs.WalkDir(Files(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(Files(), p)
		if err != nil {
			return err
		}
		files[p] = &fstest.MapFile{Data: b, Mode: 0o444}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("runner files: %w", err)
	}
	for name, b := range extra {
		if name == "" || strings.ContainsAny(name, "/\x00") || name[0] == '.' {
			return nil, fmt.Errorf("runner files: %q is no plain file name", name)
		}
		if _, ok := files[name]; ok {
			return nil, fmt.Errorf("runner files: %s is the runner's own", name)
		}
		files[name] = &fstest.MapFile{Data: b, Mode: 0o444}
	}
	return files, nil
}
