package envs

// Install describes one installation in a build jail, with paths as the
// jail sees them.
type Install struct {
	// Target is the directory to install into: the rootfs's site-packages
	// directory, over which the new environment is mounted writable.
	Target string
	// Python is the interpreter that will run the packages (for uv).
	Python string
	// Requirements are in normal form (see Normalize).
	Requirements []string
	// IndexURL and NoIndex are as in Index; FindLinks are the jail's
	// paths of the find-links directories.
	IndexURL  string
	FindLinks []string
	NoIndex   bool
	Policy    Policy
	// Report asks pip for its installation report on standard output
	// (pip 22.2 and later), which carries the hashes of the wheels used.
	Report bool
}

// PipArgs is the command line of `python -m pip` (after "pip") for in:
// install into the target directory only (--target, which also ignores
// whatever is installed elsewhere), without a cache, without reading
// configuration files or PIP_* variables (--isolated), without prompts,
// and with bytecode compiled now (pip's default), since runs cannot write
// __pycache__ into a read-only environment.
func PipArgs(in Install) []string {
	args := []string{"install", "--target", in.Target,
		"--isolated", "--no-cache-dir", "--disable-pip-version-check", "--no-input",
		"--no-warn-script-location", "--progress-bar", "off"}
	if in.Report {
		// The report goes to standard output; --quiet keeps pip's
		// progress messages out of it (errors still go to stderr).
		args = append(args, "--quiet", "--report", "-")
	}
	args = append(args, indexArgs(in)...)
	return append(args, in.Requirements...)
}

// UVArgs is the command line of uv (after "uv") for in. It uses
// `uv pip install --target`, not `uv venv` plus an install: a run needs a
// plain directory of packages to mount over site-packages, not a virtual
// environment with its own interpreter links and pyvenv.cfg. It reads no
// configuration files (--no-config), uses no cache (--no-cache; the build
// jail's /tmp is gone after the build anyway), copies instead of linking
// (--link-mode copy) and compiles bytecode (--compile-bytecode; uv does
// not by default).
func UVArgs(in Install) []string {
	args := []string{"pip", "install", "--target", in.Target, "--python", in.Python,
		"--no-config", "--no-cache", "--link-mode", "copy", "--compile-bytecode"}
	args = append(args, indexArgs(in)...)
	return append(args, in.Requirements...)
}

// indexArgs are the options pip and uv share for the policy and sources.
func indexArgs(in Install) []string {
	var args []string
	if in.Policy != PolicyAllowSdist {
		args = append(args, "--only-binary", ":all:")
	}
	if in.NoIndex {
		args = append(args, "--no-index")
	}
	if in.IndexURL != "" {
		args = append(args, "--index-url", in.IndexURL)
	}
	for _, d := range in.FindLinks {
		args = append(args, "--find-links", d)
	}
	return args
}
