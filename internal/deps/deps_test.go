package deps

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/rootfs"
)

// fakePicker stands in for the rootfs store: it records which method was
// asked and answers from a fixed list.
type fakePicker struct {
	asked string
}

func (f *fakePicker) Pick(v string) (rootfs.Python, error) {
	f.asked = "pick " + v
	switch v {
	case "", "3.11":
		return rootfs.Python{Version: "3.11.7"}, nil
	case "3.12":
		return rootfs.Python{Version: "3.12.1"}, nil
	}
	return rootfs.Python{}, fmt.Errorf("%w %q; available: 3.11.7, 3.12.1", rootfs.ErrUnknownVersion, v)
}

func (f *fakePicker) PickSpecifier(s string) (rootfs.Python, error) {
	f.asked = "spec " + s
	switch s {
	case ">=3.12":
		return rootfs.Python{Version: "3.12.1"}, nil
	case "garbage":
		return rootfs.Python{}, fmt.Errorf("%w: %q", rootfs.ErrInvalidSpecifier, s)
	}
	return rootfs.Python{}, fmt.Errorf("%w for requires-python %q; available: 3.11.7, 3.12.1", rootfs.ErrUnknownVersion, s)
}

func TestPickPython(t *testing.T) {
	for _, c := range []struct {
		python, requires string
		asked, version   string
		errType          api.ErrorType
	}{
		{"", "", "pick ", "3.11.7", ""},
		{"", ">=3.12", "spec >=3.12", "3.12.1", ""},
		{"", "   ", "pick ", "3.11.7", ""},
		// An explicit python wins over requires-python.
		{"3.11", ">=3.12", "pick 3.11", "3.11.7", ""},
		{"3.99", "", "pick 3.99", "", api.ErrUnknownPython},
		{"", ">=3.99", "spec >=3.99", "", api.ErrUnknownPython},
		{"", "garbage", "spec garbage", "", api.ErrBadRequest},
	} {
		f := &fakePicker{}
		py, err := PickPython(f, c.python, c.requires)
		if f.asked != c.asked {
			t.Errorf("python %q requires %q: asked %q, want %q", c.python, c.requires, f.asked, c.asked)
		}
		if c.errType == "" {
			if err != nil || py.Version != c.version {
				t.Errorf("python %q requires %q: %s, %v; want %s", c.python, c.requires, py.Version, err, c.version)
			}
			continue
		}
		if !errors.Is(err, c.errType) || api.ErrorOf(err).Type != c.errType {
			t.Errorf("python %q requires %q: error %v, want %s", c.python, c.requires, err, c.errType)
		}
		if c.errType == api.ErrUnknownPython && !strings.Contains(err.Error(), "available: 3.11.7, 3.12.1") {
			t.Errorf("the error does not list the versions there are: %v", err)
		}
	}
}

func TestRequirements(t *testing.T) {
	got, err := Requirements([]string{"Rich>=13", "cbalpha"}, []string{"cbalpha", "rich >= 13", "CB_Gamma<2"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"cb-gamma<2", "cbalpha", "rich>=13"}; !slices.Equal(got, want) {
		t.Errorf("merged %q, want %q", got, want)
	}
	if got, err := Requirements(nil, nil); err != nil || len(got) != 0 {
		t.Errorf("no requirements: %q, %v", got, err)
	}
	var aerr *api.Error
	_, err = Requirements([]string{"ok"}, []string{"fine", "--index-url=http://evil"})
	if !errors.As(err, &aerr) || aerr.Type != api.ErrBadRequest || aerr.Field != "dependencies[1]" {
		t.Errorf("bad request dependency: %v", err)
	}
	_, err = Requirements([]string{"pkg @ https://example.com/pkg.whl"}, nil)
	if !errors.As(err, &aerr) || aerr.Field != "code" || !strings.Contains(aerr.Message, "PEP 723") {
		t.Errorf("bad script dependency: %v", err)
	}
	many := make([]string, maxRequirements+1)
	for i := range many {
		many[i] = fmt.Sprintf("pkg%d", i)
	}
	if _, err := Requirements(many, nil); !errors.As(err, &aerr) || aerr.Field != "dependencies" {
		t.Errorf("too many requirements: %v", err)
	}
}

func TestInstallerMessage(t *testing.T) {
	pip := "Looking in links: /tmp/x\nERROR: Could not find a version that satisfies the requirement cbmissing (from versions: none)\nERROR: No matching distribution found for cbmissing\n"
	if got := installerMessage([]byte(pip), nil); got != "ERROR: Could not find a version that satisfies the requirement cbmissing (from versions: none)\nERROR: No matching distribution found for cbmissing" {
		t.Errorf("pip message %q", got)
	}
	uv := "  × No solution found when resolving dependencies:\n  ╰─▶ Because cbmissing was not found in the provided package locations and you require cbmissing, we can conclude that your requirements are unsatisfiable.\n"
	if got := installerMessage([]byte(uv), nil); !strings.Contains(got, "cbmissing was not found") {
		t.Errorf("uv message %q", got)
	}
	if got := installerMessage(nil, nil); got == "" {
		t.Errorf("empty message")
	}
	if got := installerMessage([]byte(strings.Repeat("x", 10000)), nil); len(got) > maxMessage+3 {
		t.Errorf("message not bounded: %d bytes", len(got))
	}
}

func TestPipReports(t *testing.T) {
	for wheel, want := range map[string]bool{
		"/usr/lib/python3.11/ensurepip/_bundled/pip-23.2.1-py3-none-any.whl": true,
		"/usr/share/python-wheels/pip-22.2-py3-none-any.whl":                 true,
		"/x/pip-22.1.2-py3-none-any.whl":                                     false,
		"/x/pip-18.1-py2.py3-none-any.whl":                                   false,
		"/x/setuptools-65.5.0-py3-none-any.whl":                              false,
	} {
		if got := pipReports(wheel); got != want {
			t.Errorf("pipReports(%s) = %v", wheel, got)
		}
	}
}

func TestSiteDir(t *testing.T) {
	mk := func(dirs ...string) rootfs.Python {
		root := t.TempDir()
		for _, d := range dirs {
			if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return rootfs.Python{ID: "cpython-3.11.7", Version: "3.11.7", Dir: root}
	}
	d := &Manager{}
	upstream := mk("usr/lib/python3.11/site-packages")
	if got, err := d.siteDir(upstream); err != nil || got != "/usr/lib/python3.11/site-packages" {
		t.Errorf("upstream layout: %q, %v", got, err)
	}
	debian := mk("usr/lib/python3.11/site-packages", "usr/local/lib/python3.11/dist-packages")
	if got, err := d.siteDir(debian); err != nil || got != "/usr/local/lib/python3.11/dist-packages" {
		t.Errorf("Debian layout: %q, %v", got, err)
	}
	pre := mk("usr/lib/python3.13/site-packages")
	pre.Version = "3.13.0rc1"
	if got, err := d.siteDir(pre); err != nil || got != "/usr/lib/python3.13/site-packages" {
		t.Errorf("pre-release: %q, %v", got, err)
	}
	if _, err := d.siteDir(mk()); !errors.Is(err, api.ErrDependency) {
		t.Errorf("no site-packages: %v", err)
	}
}

// TestPreloadOf: a stored preload list reaches jails only when it is
// valid; a damaged one preloads nothing rather than fail the runs.
func TestPreloadOf(t *testing.T) {
	for _, c := range []struct {
		in, want []string
	}{
		{nil, nil},
		{[]string{}, nil},
		{[]string{"pandas", "numpy", "pandas"}, []string{"pandas", "numpy"}},
		{[]string{"pandas", "not a module"}, nil},
	} {
		if got := preloadOf(c.in); !slices.Equal(got, c.want) || (got == nil) != (c.want == nil) {
			t.Errorf("preloadOf(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	var a *Attachment
	if a.Preload() != nil {
		t.Error("no environment preloads something")
	}
}
