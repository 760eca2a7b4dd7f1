// Package deps resolves what a run depends on, its interpreter and its
// packages, and attaches the packages to its jail as a read-only
// environment. It owns the daemon's environment store (rootfs/envs) and
// the build jails that fill it; it does not run programs of its own
// outside a jail.
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
//     bind-mounted read-only. Its network namespace has only loopback, as a
//     run's; when an index must be reached (no --no-index) the daemon's
//     proxy (package egress) listens there and lets it reach the index's
//     host and port, and nothing else.
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
package deps

import (
	"context"
	_ "embed"
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
	"github.com/cellblock/cellblock/internal/egress"
	"github.com/cellblock/cellblock/internal/pep723"
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

// buildScript is the build jail's program (build.py). It checks that the
// target is a site-packages directory of this interpreter (where runs will
// find the packages), then becomes uv or runs pip from the wheel on
// PYTHONPATH.
//
//go:embed build.py
var buildScript []byte

// Config is how the daemon builds and keeps environments.
type Config struct {
	// Dir is the environment store's directory (<state-dir>/envs).
	Dir string
	// Index is where packages come from; its FindLinks are resolved to
	// real absolute directories by Open.
	Index envs.Index
	// AllowSdist lets builds run source distributions' build code
	// (PolicyAllowSdist); otherwise only wheels are installed.
	AllowSdist bool
	// BuildTimeout and BuildMemory bound one build jail; BuildCPUs is its
	// CPU quota.
	BuildTimeout time.Duration
	BuildMemory  int64
	BuildCPUs    float64
	// CacheBytes is the store's size budget.
	CacheBytes int64
	// Runner builds the build jails: the daemon's, after its probe.
	Runner *nsjail.Runner
	// Egress makes the proxy through which a build reaches the index;
	// without it builds that need an index cannot reach it.
	Egress *egress.Egress
	Log    *slog.Logger
}

// Manager is the daemon's dependency handling: the environment store,
// where packages come from and how builds are limited.
type Manager struct {
	store  *envs.Store
	runner *nsjail.Runner
	egress *egress.Egress
	index  envs.Index
	policy envs.Policy
	// uv is the host path of uv and uvVersion what `uv --version` said;
	// empty when uv is not on the daemon's PATH.
	uv, uvVersion string
	limits        nsjail.Limits
	log           *slog.Logger

	siteDirs sync.Map // rootfs directory -> in-rootfs site-packages path
}

// Open checks the sources of packages, looks for uv and opens the
// environment store.
func Open(cfg Config) (*Manager, error) {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Manager{
		runner: cfg.Runner,
		egress: cfg.Egress,
		index:  envs.Index{URL: cfg.Index.URL, NoIndex: cfg.Index.NoIndex},
		policy: envs.PolicyWheelsOnly,
		log:    log,
		limits: nsjail.Limits{
			Timeout:     cfg.BuildTimeout,
			MemoryBytes: cfg.BuildMemory,
			Pids:        512,
			CPUs:        cfg.BuildCPUs,
			OutputBytes: 16 << 20,
			TmpBytes:    cfg.BuildMemory,
			OpenFiles:   4096,
		},
	}
	if cfg.AllowSdist {
		d.policy = envs.PolicyAllowSdist
	}
	for _, dir := range cfg.Index.FindLinks {
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
		Dir:       cfg.Dir,
		Budget:    cfg.CacheBytes,
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

// Close cancels builds in progress and waits for them.
func (d *Manager) Close() { d.store.Close() }

// installerName describes the installer builds use.
func (d *Manager) installerName() string {
	if d.uv != "" {
		return d.uvVersion
	}
	return "pip (each Python's own, from its ensurepip wheel)"
}

// Info is the daemon Info's dependency section.
func (d *Manager) Info() *api.DependencyInfo {
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

// Picker is the part of the rootfs store that chooses interpreters.
type Picker interface {
	Pick(version string) (rootfs.Python, error)
	PickSpecifier(spec string) (rootfs.Python, error)
}

// PickPython chooses a run's interpreter: the request's python when set
// (an explicit choice wins over the script's metadata, as with uv run
// --python), else the best one satisfying the script's requires-python,
// else the default.
func PickPython(p Picker, python, requiresPython string) (rootfs.Python, error) {
	if python != "" || strings.TrimSpace(requiresPython) == "" {
		py, err := p.Pick(python)
		if errors.Is(err, rootfs.ErrUnknownVersion) {
			return py, api.Wrap(api.ErrUnknownPython, "python", err)
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

// Requirements merges the script's PEP 723 dependencies with the
// request's and normalizes them: the list an environment is built from.
// An invalid one is a bad request naming where it came from.
func Requirements(script, request []string) ([]string, error) {
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

// Attachment is a run's environment: held until the run ends. A nil
// Attachment is a run without one.
type Attachment struct {
	lease *envs.Lease
	mount nsjail.Mount
	took  time.Duration
}

// Resolve reads a run's PEP 723 metadata, picks its interpreter and, when
// it has requirements, gets their environment (building it on a miss).
// The Attachment is nil without requirements; Release it when the run is
// over.
func (d *Manager) Resolve(ctx context.Context, p Picker, req *api.RunRequest) (rootfs.Python, *Attachment, error) {
	meta, err := pep723.Parse(req.Code)
	if err != nil {
		return rootfs.Python{}, nil, api.Errorf(api.ErrBadRequest, "code", "%v: %v", pep723.ErrMetadata, err)
	}
	py, err := PickPython(p, req.Python, meta.RequiresPython)
	if err != nil {
		return py, nil, err
	}
	reqs, err := Requirements(meta.Dependencies, req.Dependencies)
	if err != nil || len(reqs) == 0 {
		return py, nil, err
	}
	att, err := d.attach(ctx, py, reqs)
	if err != nil && ctx.Err() != nil {
		// The caller went away or shutdown killed the run while it
		// waited for its environment; the build goes on for the next.
		return py, nil, api.Errorf(api.ErrCanceled, "", "the run was cancelled while its environment was being built")
	}
	return py, att, err
}

// attach gets the environment of reqs for py.
func (d *Manager) attach(ctx context.Context, py rootfs.Python, reqs []string) (*Attachment, error) {
	start := time.Now()
	site, err := d.siteDir(py)
	if err != nil {
		return nil, err
	}
	spec := envs.Spec{Python: py.Version, ABI: py.ABI, Requirements: reqs, Index: d.index, Policy: d.policy}
	lease, err := d.store.Acquire(ctx, spec, d.builder(py, site, spec))
	if err != nil {
		return nil, err
	}
	return &Attachment{
		lease: lease,
		mount: nsjail.Mount{Source: lease.Site, Destination: site},
		took:  time.Since(start),
	}, nil
}

// Release lets the environment go: the store may evict it once no run
// holds it.
func (a *Attachment) Release() {
	if a != nil {
		a.lease.Release()
	}
}

// Mounts are the run's extra mounts: the environment, read-only.
func (a *Attachment) Mounts() []nsjail.Mount {
	if a == nil {
		return nil
	}
	return []nsjail.Mount{a.mount}
}

// Preload are the modules prestarted jails of the environment import
// while they wait; nil without an environment or a list.
func (a *Attachment) Preload() []string {
	if a == nil {
		return nil
	}
	return preloadOf(a.lease.Env.Preload)
}

// preloadOf is a stored preload list as jails may get it: checked again,
// since it came from a file, and nil when it is empty or not valid (the
// environment then preloads nothing rather than fail its runs).
func preloadOf(mods []string) []string {
	out, err := api.NormalizePreload("preload", mods)
	if err != nil || len(out) == 0 {
		return nil
	}
	return out
}

// Result is the result's environment object.
func (a *Attachment) Result() *api.Environment {
	if a == nil {
		return nil
	}
	return environmentOf(a.lease)
}

// Micros is how long getting the environment took.
func (a *Attachment) Micros() int64 {
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
func (d *Manager) siteDir(py rootfs.Python) (string, error) {
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
	return "", api.Errorf(api.ErrDependency, "dependencies", "Python %s (rootfs %s) has no site-packages directory to attach packages to", py.Version, py.ID)
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
func (d *Manager) builder(py rootfs.Python, site string, spec envs.Spec) envs.BuildFunc {
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
			Script:     buildScript,
			ScriptName: buildScriptName,
			// The jail's PYTHONDONTWRITEBYTECODE=1 is for runs; a build
			// compiles the packages' bytecode once, for every run.
			Env:    map[string]string{"PYTHONDONTWRITEBYTECODE": ""},
			Mounts: []nsjail.Mount{{Source: dir, Destination: site, Writable: true}},
			Limits: d.limits,
		}
		for i, l := range spec.FindLinks {
			p := fmt.Sprintf("%s/%d", buildFindLinksDir, i)
			js.Mounts = append(js.Mounts, nsjail.Mount{Source: l, Destination: p})
			in.FindLinks = append(in.FindLinks, p)
		}
		if spec.NeedsNetwork() && d.egress != nil {
			// The index only, through the daemon's proxy, which resolves
			// its name: the jail has no DNS and no route.
			proxy, err := d.egress.ForBuild(js.ID, spec.URL)
			if err != nil {
				return envs.BuildResult{}, fmt.Errorf("build environment %s: %w", id, err)
			}
			if proxy != nil {
				js.Egress = proxy
				defer func() { d.noteDenials(id, proxy.Close()) }()
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
			return envs.BuildResult{}, api.Errorf(api.ErrDependency, "dependencies", "no installer: uv is not on cellblockd's PATH and Python %s has no pip wheel (ensurepip) in its rootfs; install uv on the host", py.Version)
		}
		// The jail's user must own what it writes; the store gives the
		// tree back to root and seals it afterwards.
		uid, gid := d.runner.JailHostID()
		if err := os.Lchown(dir, uid, gid); err != nil {
			return envs.BuildResult{}, fmt.Errorf("build environment %s: %w", id, err)
		}
		d.log.Info("environment build jail", "env", id, "installer", installer, "python", py.Version,
			"requirements", spec.Requirements, "network", js.Egress != nil)
		out, err := d.runner.Run(ctx, js, nil)
		if err != nil {
			return envs.BuildResult{}, fmt.Errorf("build environment %s: %w", id, err)
		}
		switch {
		case out.Canceled:
			return envs.BuildResult{}, fmt.Errorf("build environment %s: %w", id, context.Canceled)
		case out.TimedOut:
			return envs.BuildResult{}, api.Errorf(api.ErrDependency, "dependencies", "%s did not finish installing %s within %s",
				installer, strings.Join(spec.Requirements, " "), d.limits.Timeout)
		case out.OOMKilled:
			return envs.BuildResult{}, api.Errorf(api.ErrDependency, "dependencies", "%s ran out of memory (%d MiB) installing %s",
				installer, d.limits.MemoryBytes>>20, strings.Join(spec.Requirements, " "))
		case out.ExitCode != 0:
			return envs.BuildResult{}, api.Errorf(api.ErrDependency, "dependencies", "%s could not install %s: %s",
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

// noteDenials logs what a build's proxy refused: an index whose pages
// link to files on another host, or package build code reaching out.
func (d *Manager) noteDenials(id string, denials []api.Denial) {
	for _, dn := range denials {
		d.log.Warn("a dependency build was refused a connection; builds reach only the package index",
			"env", id, "host", dn.Host, "port", dn.Port, "reason", dn.Reason, "count", dn.Count, "detail", dn.Detail)
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

// List lists the cached environments.
func (d *Manager) List() *api.EnvList {
	list := &api.EnvList{Envs: []api.EnvInfo{}}
	for _, in := range d.store.List() {
		list.Envs = append(list.Envs, envInfo(in))
		list.TotalBytes += in.SizeBytes
	}
	list.BudgetBytes = d.store.Stats().Budget
	return list
}

// Build builds the environment req asks for ahead of the runs that will
// use it, or finds it.
func (d *Manager) Build(ctx context.Context, p Picker, req *api.EnvBuildRequest) (*api.EnvBuildResult, error) {
	start := time.Now()
	py, err := PickPython(p, req.Python, "")
	if err != nil {
		return nil, err
	}
	reqs, err := Requirements(nil, req.Dependencies)
	if err != nil {
		return nil, err
	}
	preload, aerr := api.NormalizePreload("preload", req.Preload)
	if aerr != nil {
		return nil, aerr
	}
	att, err := d.attach(ctx, py, reqs)
	if err != nil {
		return nil, err
	}
	defer att.Release()
	if preload != nil {
		// A new list, empty to clear it: held by the lease, the
		// environment cannot go away meanwhile.
		info, err := d.store.SetPreload(att.lease.Env.ID, preload)
		if err != nil {
			return nil, err
		}
		att.lease.Env.Preload = info.Preload
	}
	return &api.EnvBuildResult{
		Environment: att.Result(), Python: py.Version, DurationMs: time.Since(start).Milliseconds(),
		Preload: nonNil(att.Preload()),
	}, nil
}

// nonNil is mods, or an empty list for JSON's [] rather than null.
func nonNil(mods []string) []string {
	if mods == nil {
		return []string{}
	}
	return mods
}

// Remove deletes one environment that no run holds.
func (d *Manager) Remove(id string) (*api.EnvRemoveResult, error) {
	in, err := d.store.Remove(id)
	switch {
	case errors.Is(err, envs.ErrNotFound):
		return nil, api.Errorf(api.ErrNotFound, "id", "no such environment: %q (see cellblock env ls)", id)
	case errors.Is(err, envs.ErrInUse):
		return nil, api.Wrap(api.ErrInUse, "id", err)
	case err != nil:
		return nil, err
	}
	return &api.EnvRemoveResult{Removed: []api.EnvInfo{envInfo(in)}, FreedBytes: in.SizeBytes}, nil
}

// Prune deletes every environment no run holds.
func (d *Manager) Prune() (*api.EnvRemoveResult, error) {
	removed, err := d.store.Prune()
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
		Preload: nonNil(preloadOf(in.Preload)),
	}
	for _, p := range in.Packages {
		out.Packages = append(out.Packages, api.Package{Name: p.Name, Version: p.Version, Hash: p.Hash})
	}
	return out
}
