package envs

import (
	"errors"
	"slices"
	"testing"
)

func TestNormalizeName(t *testing.T) {
	for in, want := range map[string]string{
		"Requests":          "requests",
		"zope.interface":    "zope-interface",
		"Foo__Bar--baz..Q":  "foo-bar-baz-q",
		"typing_extensions": "typing-extensions",
		"a":                 "a",
	} {
		if got := NormalizeName(in); got != want {
			t.Errorf("NormalizeName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseRequirement(t *testing.T) {
	for in, want := range map[string]string{
		"requests":                   "requests",
		"  Requests  ":               "requests",
		"requests>=2":                "requests>=2",
		"requests >= 2.0 , < 3":      "requests<3,>=2.0",
		"requests (>=2.0,<3)":        "requests<3,>=2.0",
		"Rich[Jupyter, extra_B]>=13": "rich[extra-b,jupyter]>=13",
		"foo[b,a,b]":                 "foo[a,b]",
		"numpy==1.26.*":              "numpy==1.26.*",
		"pkg~=1.4.2":                 "pkg~=1.4.2",
		"pkg===1.0+local":            "pkg===1.0+local",
		"pkg>=1.0RC1":                "pkg>=1.0rc1",
		"foo; python_version<'3.8'":  `foo; python_version < "3.8"`,
		`foo ;python_version < "3.8" and (os_name=="posix")`: `foo; python_version < "3.8" and (os_name == "posix")`,
		"foo>=1; sys_platform == 'linux'":                    `foo>=1; sys_platform == "linux"`,
		"zope.interface":                                     "zope-interface",
	} {
		r, err := ParseRequirement(in)
		if err != nil {
			t.Errorf("ParseRequirement(%q): %v", in, err)
			continue
		}
		if got := r.String(); got != want {
			t.Errorf("ParseRequirement(%q) = %q, want %q", in, got, want)
		}
		// The normal form is a fixed point.
		again, err := ParseRequirement(r.String())
		if err != nil || again.String() != r.String() {
			t.Errorf("normal form %q does not parse to itself: %q, %v", r.String(), again.String(), err)
		}
	}
}

func TestParseRequirementRejects(t *testing.T) {
	for _, in := range []string{
		"",
		"   ",
		"--index-url=http://evil.example/simple",
		"-e .",
		"-r requirements.txt",
		"./local/path",
		"/abs/path.whl",
		"foo @ https://example.com/foo.whl",
		"foo@file:///tmp/x.whl",
		"https://example.com/foo.whl",
		"foo-",
		"_foo",
		"foo bar",
		"foo>=",
		"foo=1",
		"foo>=1 2",
		"foo>=1.*",
		"foo==1.*.2",
		"foo[bar",
		"foo[b@r]",
		"foo (>=1",
		"foo;",
		"foo; os_name == 'nt",
		"foo; os_name === $x",
		"foo\nbar",
		"foo\x00",
		string(make([]byte, 600)),
	} {
		if r, err := ParseRequirement(in); !errors.Is(err, ErrInvalidRequirement) {
			t.Errorf("ParseRequirement(%q) = %q, %v; want an invalid requirement", in, r.String(), err)
		}
	}
}

func TestNormalize(t *testing.T) {
	got, err := Normalize([]string{"Requests>=2", "numpy", "requests >= 2", "NumPy", "attrs"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"attrs", "numpy", "requests>=2"}; !slices.Equal(got, want) {
		t.Errorf("Normalize = %q, want %q", got, want)
	}
	_, err = Normalize([]string{"ok", "--bad"})
	var re *RequirementError
	if !errors.As(err, &re) || re.Index != 1 || !errors.Is(err, ErrInvalidRequirement) {
		t.Errorf("Normalize with a bad second entry: %v", err)
	}
}
