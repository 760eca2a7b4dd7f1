package rootfs

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// MinVersion is the oldest CPython the store builds a rootfs for.
const MinVersion = "3.8"

// minMajor and minMinor are MinVersion as numbers.
const (
	minMajor = 3
	minMinor = 8
)

// probeTimeout bounds one run of the interpreter being probed; shims such
// as pyenv's run a few shell processes before the interpreter starts.
const probeTimeout = 30 * time.Second

// probeFlags make the probed interpreter ignore PYTHON* variables (-E),
// the user site directory (-s) and site-packages (-S). They are -I without
// its dropping of the current directory from sys.path, which the script
// does itself, because Python 2 has no -I and must be told apart clearly.
var probeFlags = []string{"-E", "-s", "-S"}

// probeScript (probe.py) runs under the interpreter to import and prints
// one JSON object. It must stay valid Python 2.
//
//go:embed probe.py
var probeScript string

// hostPython is what the probe learned about an interpreter on the host.
type hostPython struct {
	Version        [3]int `json:"version"`
	ReleaseLevel   string `json:"releaselevel"`
	Serial         int    `json:"serial"`
	Implementation string `json:"implementation"`
	Executable     string `json:"executable"` // symlink-resolved after probing
	BasePrefix     string `json:"base_prefix"`
	BaseExecPrefix string `json:"base_exec_prefix"`
	Stdlib         string `json:"stdlib"`
	PlatStdlib     string `json:"platstdlib"`
	PureLib        string `json:"purelib"` // site-packages (Debian: /usr/local/lib/python3.X/dist-packages)
	PlatLib        string `json:"platlib"`
	Dynload        string `json:"dynload"`
	SOABI          string `json:"soabi"`
	CacheTag       string `json:"cache_tag"`
	WheelPkgDir    string `json:"wheel_pkg_dir"`
	OpenSSLCAFile  string `json:"openssl_cafile"`
	OpenSSLCAPath  string `json:"openssl_capath"`
	PycMagic       string `json:"pyc_magic"` // hex of importlib.util.MAGIC_NUMBER
}

// versionString formats the version like "3.12.1" or "3.13.0rc1".
func (h *hostPython) versionString() string {
	v := fmt.Sprintf("%d.%d.%d", h.Version[0], h.Version[1], h.Version[2])
	switch h.ReleaseLevel {
	case "alpha":
		v += fmt.Sprintf("a%d", h.Serial)
	case "beta":
		v += fmt.Sprintf("b%d", h.Serial)
	case "candidate":
		v += fmt.Sprintf("rc%d", h.Serial)
	}
	return v
}

// probe runs the interpreter at path (which may be a shim script or a
// symlink, or a bare name looked up on PATH) and reports the real
// interpreter behind it. Cancelling ctx kills the interpreter.
func probe(ctx context.Context, path string) (*hostPython, error) {
	if !strings.Contains(path, "/") {
		p, err := exec.LookPath(path)
		if err != nil {
			return nil, fmt.Errorf("find %s: %w", path, err)
		}
		path = p
	}
	cmdCtx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	cmd := exec.CommandContext(cmdCtx, path, append(probeFlags, "-c", probeScript)...)
	// The environment and working directory are kept: shims need them to
	// pick their interpreter (pyenv reads .python-version files).
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("probe python %s: %w", path, ctx.Err())
		}
		return nil, fmt.Errorf("probe python %s: %w: %s", path, err, lastLines(stderr.String(), 5))
	}
	h := &hostPython{}
	if err := json.Unmarshal(stdout.Bytes(), h); err != nil {
		return nil, fmt.Errorf("probe python %s: parse output %q: %w", path, lastLines(stdout.String(), 3), err)
	}
	if err := h.check(path); err != nil {
		return nil, err
	}
	real, err := filepath.EvalSymlinks(h.Executable)
	if err != nil {
		return nil, fmt.Errorf("probe python %s: resolve sys.executable: %w", path, err)
	}
	h.Executable = real
	return h, nil
}

// check rejects interpreters the store cannot build a rootfs from.
func (h *hostPython) check(path string) error {
	if h.Version[0] < minMajor || (h.Version[0] == minMajor && h.Version[1] < minMinor) {
		return fmt.Errorf("python %s at %s is not supported: need CPython %s or newer", h.versionString(), path, MinVersion)
	}
	if h.Implementation != "cpython" {
		return fmt.Errorf("python at %s is %q, only CPython is supported", path, h.Implementation)
	}
	for name, p := range map[string]string{
		"sys.executable":   h.Executable,
		"sys.base_prefix":  h.BasePrefix,
		"stdlib":           h.Stdlib,
		"platstdlib":       h.PlatStdlib,
		"lib-dynload":      h.Dynload,
		"base_exec_prefix": h.BaseExecPrefix,
	} {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("python at %s reports %s %q, want an absolute path", path, name, p)
		}
	}
	if len(h.PycMagic) != 8 {
		return fmt.Errorf("python at %s reports .pyc magic %q, want 4 bytes in hex", path, h.PycMagic)
	}
	if h.CacheTag == "" {
		return fmt.Errorf("python at %s has no sys.implementation.cache_tag", path)
	}
	return nil
}

// sourceStamp identifies the content of the source interpreter binary well
// enough to notice an in-place upgrade.
type sourceStamp struct {
	Size    int64     `json:"size"`
	ModTime time.Time `json:"mtime"`
}

func stampOf(path string) (sourceStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return sourceStamp{}, fmt.Errorf("stat python binary: %w", err)
	}
	return sourceStamp{Size: fi.Size(), ModTime: fi.ModTime().UTC()}, nil
}

// lastLines keeps the end of a command's output, where Python puts the
// error of a traceback.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = append([]string{"..."}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
