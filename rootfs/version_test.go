package rootfs

import (
	"errors"
	"strings"
	"testing"
)

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		bad      bool
	}{
		{in: "3.12.1", want: "3.12.1"},
		{in: "3.12", want: "3.12"},
		{in: " v3 ", want: "3"},
		{in: "3.13.0rc1", want: "3.13.0rc1"},
		{in: "3.13.0-rc.1", want: "3.13.0rc1"},
		{in: "3.13.0.c2", want: "3.13.0rc2"},
		{in: "3.13.0beta2", want: "3.13.0b2"},
		{in: "3.13.0a", want: "3.13.0a0"},
		{in: "", bad: true},
		{in: "latest", bad: true},
		{in: "3.12.1.post1", bad: true},
		{in: "1!3.12", bad: true},
		{in: "3.x", bad: true},
		{in: "3.12.", bad: true},
	} {
		v, err := parseVersion(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("parseVersion(%q) = %v, want an error", tc.in, v)
			}
			continue
		}
		if err != nil || v.String() != tc.want {
			t.Errorf("parseVersion(%q) = %v, %v; want %s", tc.in, v, err, tc.want)
		}
	}
}

func TestCompareVersions(t *testing.T) {
	ordered := []string{"3.8", "3.8.18", "3.10.0a1", "3.10.0b1", "3.10.0rc1", "3.10.0rc2", "3.10", "3.10.13", "3.11.2", "3.11.7", "3.12.1"}
	for i := range ordered {
		for j := range ordered {
			a, _ := parseVersion(ordered[i])
			b, _ := parseVersion(ordered[j])
			got := compareVersions(a, b)
			want := 0
			switch {
			case i < j:
				want = -1
			case i > j:
				want = 1
			}
			// "3.10" and "3.10.0" are equal; our list has no such pair.
			if got != want {
				t.Errorf("compare(%s, %s) = %d, want %d", ordered[i], ordered[j], got, want)
			}
		}
	}
	a, _ := parseVersion("3.10")
	b, _ := parseVersion("3.10.0")
	if compareVersions(a, b) != 0 {
		t.Errorf("3.10 != 3.10.0")
	}
}

// testPythons is a store's worth of Pythons, sorted as List sorts them.
func testPythons() []Python {
	ps := []Python{
		{ID: "cpython-3.13.0", Version: "3.13.0"},
		{ID: "cpython-3.11.7", Version: "3.11.7", Default: true},
		{ID: "cpython-3.12.1-2", Version: "3.12.1"},
		{ID: "cpython-3.12.1", Version: "3.12.1"},
		{ID: "cpython-3.12.0", Version: "3.12.0"},
		{ID: "cpython-3.14.0rc1", Version: "3.14.0rc1"},
		{ID: "cpython-3.8.18", Version: "3.8.18"},
		{ID: "cpython-3.11.2", Version: "3.11.2"},
	}
	sortPythons(ps)
	return ps
}

func TestSortPythons(t *testing.T) {
	var ids []string
	for _, p := range testPythons() {
		ids = append(ids, p.ID)
	}
	want := "cpython-3.8.18 cpython-3.11.2 cpython-3.11.7 cpython-3.12.0 cpython-3.12.1 cpython-3.12.1-2 cpython-3.13.0 cpython-3.14.0rc1"
	if got := strings.Join(ids, " "); got != want {
		t.Errorf("sorted:\n got %s\nwant %s", got, want)
	}
}

func TestPickVersion(t *testing.T) {
	ps := testPythons()
	for _, tc := range []struct{ req, want string }{
		{"", "cpython-3.11.7"},
		{"3", "cpython-3.13.0"}, // final releases before pre-releases
		{"3.12", "cpython-3.12.1"},
		{"3.12.0", "cpython-3.12.0"},
		{"3.12.1", "cpython-3.12.1"},
		{"3.11", "cpython-3.11.7"},
		{"3.8", "cpython-3.8.18"},
		{"3.14", "cpython-3.14.0rc1"}, // only a pre-release matches
		{"3.14.0rc1", "cpython-3.14.0rc1"},
		{"cpython-3.12.1-2", "cpython-3.12.1-2"},
		{" 3.13 ", "cpython-3.13.0"},
	} {
		p, err := pickVersion(ps, tc.req)
		if err != nil || p.ID != tc.want {
			t.Errorf("pick(%q) = %s, %v; want %s", tc.req, p.ID, err, tc.want)
		}
	}
	// Among builds of one version the default wins.
	ps2 := testPythons()
	for i := range ps2 {
		ps2[i].Default = ps2[i].ID == "cpython-3.12.1-2"
	}
	if p, err := pickVersion(ps2, "3.12"); err != nil || p.ID != "cpython-3.12.1-2" {
		t.Errorf("pick(3.12) with default 3.12.1-2 = %s, %v", p.ID, err)
	}
}

func TestPickUnknownVersion(t *testing.T) {
	ps := testPythons()
	for _, req := range []string{"3.99", "3.1", "3.12.2", "2", "latest", "3.12.1.0"} {
		_, err := pickVersion(ps, req)
		if !errors.Is(err, ErrUnknownVersion) {
			t.Errorf("pick(%q) error = %v, want ErrUnknownVersion", req, err)
			continue
		}
		for _, v := range []string{"3.8.18", "3.11.2", "3.11.7", "3.12.0", "3.12.1", "3.13.0", "3.14.0rc1"} {
			if !strings.Contains(err.Error(), v) {
				t.Errorf("pick(%q) error %q does not list %s", req, err, v)
			}
		}
		_, avail, _ := strings.Cut(err.Error(), "available: ")
		if strings.Count(avail, "3.12.1") != 1 {
			t.Errorf("pick(%q) error %q lists a version twice", req, err)
		}
	}
	if _, err := pickVersion(nil, ""); !errors.Is(err, ErrUnknownVersion) || !strings.Contains(err.Error(), "empty") {
		t.Errorf("pick in an empty store: %v", err)
	}
	noDefault := testPythons()
	for i := range noDefault {
		noDefault[i].Default = false
	}
	if _, err := pickVersion(noDefault, ""); !errors.Is(err, ErrUnknownVersion) {
		t.Errorf("pick default without one: %v", err)
	}
}

func TestPickSpecifier(t *testing.T) {
	ps := testPythons()
	for _, tc := range []struct{ spec, want string }{
		{"", "cpython-3.11.7"},
		{">=3.9", "cpython-3.11.7"}, // the default satisfies it
		{">=3.12", "cpython-3.13.0"},
		{">=3.8,<3.11", "cpython-3.8.18"},
		{"<3.14", "cpython-3.11.7"},
		{">3.12,<3.14", "cpython-3.13.0"}, // 3.14.0rc1 is excluded by <3.14 and as a pre-release
		{"~=3.12.0", "cpython-3.12.1"},
		{"~=3.12", "cpython-3.13.0"},
		{"==3.12.*", "cpython-3.12.1"},
		{"==3.12.0", "cpython-3.12.0"},
		{"==3.12", "cpython-3.12.0"},
		{"!=3.11.*, >=3.10", "cpython-3.13.0"},
		{">=3.14.0rc1", "cpython-3.14.0rc1"}, // a pre-release was asked for
		{"<=3.11.2", "cpython-3.11.2"},
		{"===3.12.1", "cpython-3.12.1"},
		{" >= 3.8 , < 3.9 ", "cpython-3.8.18"},
	} {
		p, err := pickSpecifier(ps, tc.spec)
		if err != nil || p.ID != tc.want {
			t.Errorf("pickSpecifier(%q) = %s, %v; want %s", tc.spec, p.ID, err, tc.want)
		}
	}
	for _, spec := range []string{">=3.15", "<3.8", "==3.9.*"} {
		if _, err := pickSpecifier(ps, spec); !errors.Is(err, ErrUnknownVersion) || !strings.Contains(err.Error(), "3.13.0") {
			t.Errorf("pickSpecifier(%q) error %v, want ErrUnknownVersion listing versions", spec, err)
		}
	}
	for _, spec := range []string{"3.12", ">=", ">=3.8,", ">=3.*", "~=3", "==3.12.*rc1", ">=three"} {
		if _, err := pickSpecifier(ps, spec); !errors.Is(err, ErrInvalidSpecifier) {
			t.Errorf("pickSpecifier(%q) error %v, want ErrInvalidSpecifier", spec, err)
		}
	}
}
