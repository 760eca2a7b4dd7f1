package daemon

// Dependencies: how a run's requirements become a read-only environment
// attached to its jail.
//
//  1. The requirements are the script's PEP 723 "dependencies" merged with
//     the request's (the CLI's --with, the MCP tool's dependencies), each
//     checked and normalized (rootfs/envs). requires-python picks the
//     interpreter when the request names none.
//  2. The environment store (rootfs/envs) finds the environment by its
//     key, or builds it once however many runs ask at the same time.
//  3. A build runs the installer in a build jail: the same Runner, so the
//     same namespaces, seccomp policy and cgroup limits as a run, with its
//     own limits and timeout. The new environment's directory, chowned to
//     the jail user, is bind-mounted writable over the rootfs's empty
//     site-packages directory and is the only thing the jail can write
//     besides its tmpfs mounts; the --find-links directories (and uv) are
//     bind-mounted read-only. The jail gets the host's network only when
//     an index must be reached (no --no-index); runs never do.
//  4. The installer is uv when it is on the daemon's PATH, else pip from
//     the rootfs's own ensurepip wheel, run straight from the wheel
//     (PYTHONPATH=<wheel> python -m pip), else the build fails saying so.
//  5. A run gets the environment's site-packages bind-mounted read-only
//     over the same site-packages directory of its rootfs. Python's site
//     module adds it to sys.path as it would any installed packages (after
//     the standard library, with .pth files honoured), so nothing needs
//     PYTHONPATH, nothing is copied, and attaching costs one bind mount
//     (tens of microseconds). The directory exists, empty, in every
//     rootfs; a mountpoint of our own (say /opt/cellblock/env) would have
//     to be created in the read-only rootfs. An overlay would buy nothing:
//     libcontainer takes the rootfs as a directory it bind-mounts (an
//     overlay mount at / is silently not applied), a per-run overlay would
//     need per-run upper and work directories and a mount the daemon must
//     own and undo, and the environment is read-only anyway.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/config"
	"github.com/cellblock/cellblock/internal/pep723"
	"github.com/cellblock/cellblock/internal/server"
	"github.com/cellblock/cellblock/nsjail"
	"github.com/cellblock/cellblock/rootfs"
	"github.com/cellblock/cellblock/rootfs/envs"
)

// Paths inside a build jail. /tmp is the jail's own tmpfs, so libcontainer
// can make the mountpoints there without touching the read-only rootfs.
const (
	buildFindLinksDir = "/tmp/cellblock/find-links"
	buildUVPath       = "/tmp/cellblock/uv"
	buildScriptName   = "cellblock_build.py"
)

// maxRequirements bounds a run's merged requirements.
const maxRequirements = 2 * api.MaxDeps

// buildScript is the build jail's program. It checks that the target is a
// site-packages directory of this interpreter (where runs will find the
// packages), then becomes uv or runs pip from the wheel on PYTHONPATH.
const buildScript = `import os, site, sys
target, mode = sys.argv[1], sys.argv[2]
if target not in site.getsitepackages():
    sys.exit("cellblock: %s is not a site-packages directory of this Python %s" % (target, site.getsitepackages()))
if mode == "uv":
    os.execv(sys.argv[3], sys.argv[3:])
import runpy
sys.argv = ["pip"] + sys.argv[3:]
runpy.run_module("pip", run_name="__main__", alter_sys=True)
`

// dependencies is the daemon's dependency handling: the environment store,
// where packages come from and how builds are limited.
type dependencies struct {
	store  *envs.Store
	index  envs.Index
	policy envs.Policy
	// uv is the host path of uv and uvVersion what `uv --version` said;
	// empty when uv is not on the daemon's PATH.
	uv, uvVersion string
	limits        nsjail.Limits
	log           *slog.Logger

	siteDirs sync.Map // rootfs directory -> in-rootfs site-packages path
}

// openDependencies checks the sources of packages, looks for uv and opens
// the environment store in <state-dir>/envs.
func openDependencies(cfg config.Config, log *slog.Logger) (*dependencies, error) {
	d := &dependencies{
		index:  envs.Index{URL: cfg.IndexURL, NoIndex: cfg.NoIndex},
		policy: envs.PolicyWheelsOnly,
		log:    log,
		limits: nsjail.Limits{
			Timeout:     cfg.EnvBuildTimeout,
			MemoryBytes: cfg.EnvBuildMemory,
			Pids:        512,
			CPUs:        cfg.Maxima.CPUs,
			OutputBytes: 16 << 20,
			TmpBytes:    cfg.EnvBuildMemory,
			OpenFiles:   4096,
		},
	}
	if cfg.AllowSdist {
		d.policy = envs.PolicyAllowSdist
	}
	for _, dir := range cfg.FindLinks {
		abs, err := filepath.Abs(dir)
		if err == nil {
			abs, err = filepath.EvalSymlinks(abs)
		}
		if err != nil {
			return nil, fmt.Errorf("--find-links %s: %w", dir, err)
		}
		if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("--find-links %s is not a directory", dir)
		}
		if bad := unreadableByOthers(abs); bad != "" {
			log.Warn("a --find-links entry is not readable by the build jail's unprivileged user; builds will fail with permission denied (chmod -R a+rX the directory)",
				"dir", abs, "entry", bad)
		}
		d.index.FindLinks = append(d.index.FindLinks, abs)
	}
	if p, err := exec.LookPath("uv"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			out, err := exec.CommandContext(ctx, real, "--version").Output()
			cancel()
			if err == nil {
				d.uv, d.uvVersion = real, strings.TrimSpace(string(out))
			} else {
				log.Warn("uv is on PATH but does not run; using pip", "uv", real, "err", err)
			}
		}
	}
	store, err := envs.Open(envs.Config{
		Dir:       filepath.Join(cfg.StateDir, "envs"),
		Budget:    cfg.EnvCacheSize,
		MaxBuilds: max(1, runtime.NumCPU()/2),
		Log:       log,
	})
	if err != nil {
		return nil, err
	}
	d.store = store
	return d, nil
}

// unreadableByOthers returns the first of dir and its entries that a
// user other than the owner cannot read (or, for directories, search),
// or "". The build jail's user owns nothing on the host.
func unreadableByOthers(dir string) string {
	check := func(p string) bool {
		fi, err := os.Stat(p)
		if err != nil {
			return false
		}
		if fi.IsDir() {
			return fi.Mode()&0o005 == 0o005
		}
		return fi.Mode()&0o004 != 0
	}
	if !check(dir) {
		return dir
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return dir
	}
	for _, e := range entries {
		if p := filepath.Join(dir, e.Name()); !check(p) {
			return p
		}
	}
	return ""
}

// close cancels builds in progress and waits for them.
func (d *dependencies) close() { d.store.Close() }

// installerName describes the installer builds use.
func (d *dependencies) installerName() string {
	if d.uv != "" {
		return d.uvVersion
	}
	return "pip (each Python's own, from its ensurepip wheel)"
}

// info is the Info's dependency section.
func (d *dependencies) info() *api.DependencyInfo {
	st := d.store.Stats()
	return &api.DependencyInfo{
		Installer:    d.installerName(),
		IndexURL:     d.index.URL,
		FindLinks:    d.index.FindLinks,
		NoIndex:      d.index.NoIndex,
		OnlyBinary:   d.policy == envs.PolicyWheelsOnly,
		CacheEntries: st.Entries,
		CacheBytes:   st.Bytes,
		CacheBudget:  st.Budget,
		Policy:       string(d.policy),
		Builds:       st.Builds,
	}
}

// pythonPicker is the part of the rootfs store that chooses interpreters.
type pythonPicker interface {
	Pick(version string) (rootfs.Python, error)
	PickSpecifier(spec string) (rootfs.Python, error)
}

// pickPython chooses the run's interpreter: the request's python when set
// (an explicit choice wins over the script's metadata, as with uv run
// --python), else the best one satisfying the script's requires-python,
// else the default.
func pickPython(p pythonPicker, python, requiresPython string) (rootfs.Python, error) {
	if python != "" || strings.TrimSpace(requiresPython) == "" {
		py, err := p.Pick(python)
		if errors.Is(err, rootfs.ErrUnknownVersion) {
			return py, fmt.Errorf("%w: %w", server.ErrUnknownPython, err)
		}
		return py, err
	}
	py, err := p.PickSpecifier(requiresPython)
	switch {
	case errors.Is(err, rootfs.ErrUnknownVersion):
		return py, api.Errorf(api.ErrUnknownPython, "code", "the script's PEP 723 requires-python %q matches no Python here: %v", requiresPython, err)
	case errors.Is(err, rootfs.ErrInvalidSpecifier):
		return py, api.Errorf(api.ErrBadRequest, "code", "the script's PEP 723 requires-python: %v", err)
	}
	return py, err
}

// requirements merges the script's PEP 723 dependencies with the
// request's and normalizes them; an invalid one is a bad request naming
// where it came from.
func requirements(script, request []string) ([]string, error) {
	for _, d := range script {
		if _, err := envs.ParseRequirement(d); err != nil {
			return nil, api.Errorf(api.ErrBadRequest, "code", "the script's PEP 723 dependencies: %v", err)
		}
	}
	for i, d := range request {
		if _, err := envs.ParseRequirement(d); err != nil {
			return nil, api.Errorf(api.ErrBadRequest, fmt.Sprintf("dependencies[%d]", i), "%v", err)
		}
	}
	merged := pep723.Merge(script, request)
	if len(merged) > maxRequirements {
		return nil, api.Errorf(api.ErrBadRequest, "dependencies", "%d requirements in all; the maximum is %d", len(merged), maxRequirements)
	}
	return envs.Normalize(merged)
}

// attachment is a run's environment: held until the run ends.
type attachment struct {
	lease *envs.Lease
	mount nsjail.Mount
	took  time.Duration
}

// resolveRun reads the run's PEP 723 metadata, picks its interpreter and,
// when it has requirements, gets their environment (building it on a
// miss). The attachment is nil without requirements; release it when the
// run is over.
func (e *executor) resolveRun(ctx context.Context, req *api.RunRequest) (rootfs.Python, *attachment, error) {
	meta, err := pep723.Parse(req.Code)
	if err != nil {
		return rootfs.Python{}, nil, api.Errorf(api.ErrBadRequest, "code", "%v: %v", pep723.ErrMetadata, err)
	}
	py, err := pickPython(e.store, req.Python, meta.RequiresPython)
	if err != nil {
		return py, nil, err
	}
	reqs, err := requirements(meta.Dependencies, req.Dependencies)
	if err != nil || len(reqs) == 0 {
		return py, nil, err
	}
	if e.deps == nil {
		return py, nil, fmt.Errorf("%w: this daemon does not install dependencies", server.ErrDependency)
	}
	att, err := e.deps.attach(ctx, e.runner, py, reqs)
	if err != nil && ctx.Err() != nil {
		// The caller went away or shutdown killed the run while it
		// waited for its environment; the build goes on for the next.
		return py, nil, api.Errorf(api.ErrCanceled, "", "the run was cancelled while its environment was being built")
	}
	return py, att, err
}

// attach gets the environment of reqs for py.
func (d *dependencies) attach(ctx context.Context, runner *nsjail.Runner, py rootfs.Python, reqs []string) (*attachment, error) {
	start := time.Now()
	site, err := d.siteDir(py)
	if err != nil {
		return nil, err
	}
	spec := envs.Spec{Python: py.Version, ABI: py.ABI, Requirements: reqs, Index: d.index, Policy: d.policy}
	lease, err := d.store.Acquire(ctx, spec, d.builder(runner, py, site, spec))
	if err != nil {
		return nil, err
	}
	return &attachment{
		lease: lease,
		mount: nsjail.Mount{Source: lease.Site, Destination: site},
		took:  time.Since(start),
	}, nil
}

func (a *attachment) release() {
	if a != nil {
		a.lease.Release()
	}
}

// mounts are the run's extra mounts: the environment, read-only.
func (a *attachment) mounts() []nsjail.Mount {
	if a == nil {
		return nil
	}
	return []nsjail.Mount{a.mount}
}

// result is the result's environment object.
func (a *attachment) result() *api.Environment {
	if a == nil {
		return nil
	}
	return environmentOf(a.lease)
}

// micros is how long getting the environment took.
func (a *attachment) micros() int64 {
	if a == nil {
		return 0
	}
	return a.took.Microseconds()
}

func environmentOf(l *envs.Lease) *api.Environment {
	env := &api.Environment{ID: l.Env.ID, CacheHit: l.CacheHit, Policy: string(l.Env.Spec.Policy)}
	for _, p := range l.Env.Packages {
		env.Packages = append(env.Packages, api.Package{Name: p.Name, Version: p.Version, Hash: p.Hash})
	}
	return env
}

// siteDir is the in-rootfs path of py's empty site-packages directory:
// where a build installs and where runs find the environment. Debian's
// interpreters use /usr/local/lib/pythonX.Y/dist-packages (their
// /usr/lib/pythonX.Y/site-packages is not on sys.path); others
// /usr/lib/pythonX.Y/site-packages. The build checks the choice against
// site.getsitepackages().
func (d *dependencies) siteDir(py rootfs.Python) (string, error) {
	if v, ok := d.siteDirs.Load(py.Dir); ok {
		return v.(string), nil
	}
	parts := strings.SplitN(py.Version, ".", 3)
	if len(parts) < 2 {
		return "", fmt.Errorf("python version %q", py.Version)
	}
	xy := "python" + parts[0] + "." + strings.TrimRightFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' })
	for _, c := range []string{
		"/usr/local/lib/" + xy + "/dist-packages",
		"/usr/lib/" + xy + "/site-packages",
		"/usr/lib64/" + xy + "/site-packages",
	} {
		fi, err := os.Lstat(filepath.Join(py.Dir, c))
		if err == nil && fi.IsDir() {
			d.siteDirs.Store(py.Dir, c)
			return c, nil
		}
	}
	return "", fmt.Errorf("%w: Python %s (rootfs %s) has no site-packages directory to attach packages to", server.ErrDependency, py.Version, py.ID)
}

// pipWheelVersion is the version in a pip wheel's file name.
var pipWheelVersion = regexp.MustCompile(`^pip-([0-9]+)\.([0-9]+)[^-]*-`)

// pipReports reports whether a pip wheel is pip 22.2 or later, which can
// write its installation report (with the wheels' hashes) to stdout.
func pipReports(wheel string) bool {
	m := pipWheelVersion.FindStringSubmatch(path.Base(wheel))
	if m == nil {
		return false
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	return major > 22 || major == 22 && minor >= 2
}

// builder returns the BuildFunc that installs spec for py in a build jail.
func (d *dependencies) builder(runner *nsjail.Runner, py rootfs.Python, site string, spec envs.Spec) envs.BuildFunc {
	return func(ctx context.Context, dir string) (envs.BuildResult, error) {
		in := envs.Install{
			Target: site, Python: py.Executable, Requirements: spec.Requirements,
			IndexURL: spec.URL, NoIndex: spec.NoIndex, Policy: spec.Policy,
		}
		id := spec.ID()
		js := &nsjail.Spec{
			ID:         "envbuild-" + id[:16] + "-" + fmt.Sprint(time.Now().UnixNano()%1e9),
			Rootfs:     py.Dir,
			Python:     py.Executable,
			Script:     []byte(buildScript),
			ScriptName: buildScriptName,
			// The jail's PYTHONDONTWRITEBYTECODE=1 is for runs; a build
			// compiles the packages' bytecode once, for every run.
			Env:         map[string]string{"PYTHONDONTWRITEBYTECODE": ""},
			Mounts:      []nsjail.Mount{{Source: dir, Destination: site, Writable: true}},
			HostNetwork: spec.NeedsNetwork(),
			Limits:      d.limits,
		}
		for i, l := range spec.FindLinks {
			p := fmt.Sprintf("%s/%d", buildFindLinksDir, i)
			js.Mounts = append(js.Mounts, nsjail.Mount{Source: l, Destination: p})
			in.FindLinks = append(in.FindLinks, p)
		}
		if js.HostNetwork {
			// An empty resolv.conf is all the rootfs has.
			if conf, err := filepath.EvalSymlinks("/etc/resolv.conf"); err == nil {
				js.Mounts = append(js.Mounts, nsjail.Mount{Source: conf, Destination: "/etc/resolv.conf"})
			}
		}
		var installer string
		switch {
		case d.uv != "":
			installer = d.uvVersion
			js.Mounts = append(js.Mounts, nsjail.Mount{Source: d.uv, Destination: buildUVPath})
			js.Env["UV_PYTHON_DOWNLOADS"] = "never"
			js.Args = append([]string{site, "uv", buildUVPath}, envs.UVArgs(in)...)
		case py.PipWheel != "":
			installer = "pip " + strings.TrimSuffix(strings.TrimPrefix(path.Base(py.PipWheel), "pip-"), "-py3-none-any.whl")
			in.Report = pipReports(py.PipWheel)
			js.Env["PYTHONPATH"] = py.PipWheel
			js.Args = append([]string{site, "pip"}, envs.PipArgs(in)...)
		default:
			return envs.BuildResult{}, fmt.Errorf("%w: no installer: uv is not on cellblockd's PATH and Python %s has no pip wheel (ensurepip) in its rootfs; install uv on the host", server.ErrDependency, py.Version)
		}
		// The jail's user must own what it writes; the store gives the
		// tree back to root and seals it afterwards.
		uid, gid := runner.JailHostID()
		if err := os.Lchown(dir, uid, gid); err != nil {
			return envs.BuildResult{}, fmt.Errorf("build environment %s: %w", id, err)
		}
		d.log.Info("environment build jail", "env", id, "installer", installer, "python", py.Version,
			"requirements", spec.Requirements, "network", js.HostNetwork)
		out, err := runner.Run(ctx, js, nil)
		if err != nil {
			return envs.BuildResult{}, fmt.Errorf("build environment %s: %w", id, err)
		}
		switch {
		case out.Canceled:
			return envs.BuildResult{}, fmt.Errorf("build environment %s: %w", id, context.Canceled)
		case out.TimedOut:
			return envs.BuildResult{}, fmt.Errorf("%w: %s did not finish installing %s within %s", server.ErrDependency,
				installer, strings.Join(spec.Requirements, " "), d.limits.Timeout)
		case out.OOMKilled:
			return envs.BuildResult{}, fmt.Errorf("%w: %s ran out of memory (%d MiB) installing %s", server.ErrDependency,
				installer, d.limits.MemoryBytes>>20, strings.Join(spec.Requirements, " "))
		case out.ExitCode != 0:
			return envs.BuildResult{}, fmt.Errorf("%w: %s could not install %s: %s", server.ErrDependency,
				installer, strings.Join(spec.Requirements, " "), installerMessage(out.Stderr, out.Stdout))
		}
		res := envs.BuildResult{Installer: installer}
		if in.Report {
			hashes, err := envs.ParseInstallReport(out.Stdout)
			if err != nil {
				d.log.Warn("pip's installation report; recording RECORD hashes instead", "env", id, "err", err)
			}
			res.WheelHashes = hashes
		}
		return res, nil
	}
}

// maxMessage bounds the installer's message in an error.
const maxMessage = 4000

// installerMessage picks what the installer said about its failure: pip's
// ERROR lines when there are any, else the end of its output.
func installerMessage(stderr, stdout []byte) string {
	text := strings.TrimSpace(api.ValidUTF8(stderr))
	if text == "" {
		text = strings.TrimSpace(api.ValidUTF8(stdout))
	}
	var errLines []string
	for line := range strings.Lines(text) {
		if strings.HasPrefix(line, "ERROR:") {
			errLines = append(errLines, strings.TrimRight(line, "\n"))
		}
	}
	if len(errLines) > 0 {
		text = strings.Join(errLines, "\n")
	}
	if len(text) > maxMessage {
		text = "..." + text[len(text)-maxMessage:]
	}
	if text == "" {
		text = "(the installer said nothing)"
	}
	return text
}

// Envs implements server.EnvManager.
func (e *executor) Envs(ctx context.Context) (*api.EnvList, error) {
	list := &api.EnvList{Envs: []api.EnvInfo{}}
	for _, in := range e.deps.store.List() {
		list.Envs = append(list.Envs, envInfo(in))
		list.TotalBytes += in.SizeBytes
	}
	list.BudgetBytes = e.deps.store.Stats().Budget
	return list, nil
}

// BuildEnv implements server.EnvManager.
func (e *executor) BuildEnv(ctx context.Context, req *api.EnvBuildRequest) (*api.EnvBuildResult, error) {
	start := time.Now()
	py, err := pickPython(e.store, req.Python, "")
	if err != nil {
		return nil, err
	}
	reqs, err := requirements(nil, req.Dependencies)
	if err != nil {
		return nil, err
	}
	att, err := e.deps.attach(ctx, e.runner, py, reqs)
	if err != nil {
		return nil, err
	}
	defer att.release()
	return &api.EnvBuildResult{Environment: att.result(), Python: py.Version, DurationMs: time.Since(start).Milliseconds()}, nil
}

// RemoveEnv implements server.EnvManager.
func (e *executor) RemoveEnv(ctx context.Context, id string) (*api.EnvRemoveResult, error) {
	in, err := e.deps.store.Remove(id)
	switch {
	case errors.Is(err, envs.ErrNotFound):
		return nil, fmt.Errorf("%w: %q (see cellblock env ls)", server.ErrNotFound, id)
	case errors.Is(err, envs.ErrInUse):
		return nil, fmt.Errorf("%w: %w", server.ErrInUse, err)
	case err != nil:
		return nil, err
	}
	return &api.EnvRemoveResult{Removed: []api.EnvInfo{envInfo(in)}, FreedBytes: in.SizeBytes}, nil
}

// PruneEnvs implements server.EnvManager.
func (e *executor) PruneEnvs(ctx context.Context) (*api.EnvRemoveResult, error) {
	removed, err := e.deps.store.Prune()
	res := &api.EnvRemoveResult{Removed: []api.EnvInfo{}}
	for _, in := range removed {
		res.Removed = append(res.Removed, envInfo(in))
		res.FreedBytes += in.SizeBytes
	}
	return res, err
}

func envInfo(in envs.Info) api.EnvInfo {
	out := api.EnvInfo{
		ID: in.ID, Python: in.Spec.Python, ABI: in.Spec.ABI, Requirements: in.Spec.Requirements,
		Policy: string(in.Spec.Policy), Installer: in.Installer, SizeBytes: in.SizeBytes,
		Built: in.Built, LastUsed: in.LastUsed, InUse: in.InUse, Packages: []api.Package{},
	}
	for _, p := range in.Packages {
		out.Packages = append(out.Packages, api.Package{Name: p.Name, Version: p.Version, Hash: p.Hash})
	}
	return out
}
