package runner

import (
	"embed"
	"io/fs"
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
