package envs

import (
	"slices"
	"strings"
	"testing"
)

func TestInstallerArgs(t *testing.T) {
	in := Install{
		Target: "/usr/lib/python3.11/site-packages", Python: "/usr/bin/python3",
		Requirements: []string{"cbalpha", "cbgamma<2"},
		FindLinks:    []string{"/tmp/cellblock/find-links/0"}, NoIndex: true,
		Policy: PolicyWheelsOnly, Report: true,
	}
	pip := strings.Join(PipArgs(in), " ")
	for _, want := range []string{
		"install --target /usr/lib/python3.11/site-packages ",
		" --isolated ", " --no-cache-dir ", " --no-input ", " --disable-pip-version-check ",
		" --only-binary :all: ", " --no-index ", " --find-links /tmp/cellblock/find-links/0 ",
		" --quiet --report - ",
	} {
		if !strings.Contains(pip, want) {
			t.Errorf("pip args lack %q: %s", want, pip)
		}
	}
	if !strings.HasSuffix(pip, " cbalpha cbgamma<2") {
		t.Errorf("pip args do not end with the requirements: %s", pip)
	}
	uv := strings.Join(UVArgs(in), " ")
	for _, want := range []string{
		"pip install --target /usr/lib/python3.11/site-packages --python /usr/bin/python3 ",
		" --no-config ", " --no-cache ", " --compile-bytecode ", " --only-binary :all: ", " --no-index ",
	} {
		if !strings.Contains(uv, want) {
			t.Errorf("uv args lack %q: %s", want, uv)
		}
	}

	in.Policy, in.NoIndex, in.FindLinks, in.IndexURL, in.Report = PolicyAllowSdist, false, nil, "https://pypi.example/simple", false
	for name, args := range map[string][]string{"pip": PipArgs(in), "uv": UVArgs(in)} {
		if slices.Contains(args, "--only-binary") || slices.Contains(args, "--no-index") || slices.Contains(args, "--report") {
			t.Errorf("%s: allow-sdist with an index: %q", name, args)
		}
		if i := slices.Index(args, "--index-url"); i < 0 || args[i+1] != in.IndexURL {
			t.Errorf("%s: no --index-url: %q", name, args)
		}
	}
}
