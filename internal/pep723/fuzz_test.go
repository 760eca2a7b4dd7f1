package pep723

import (
	"errors"
	"runtime"
	"strings"
	"testing"
)

// FuzzParse checks that Parse never panics, that its memory stays in
// proportion to the script (no input makes the TOML parser balloon), and
// that what it returns is consistent: an error is an *Error naming a line
// of the script, and a script without a "# /// script" line has no
// metadata.
func FuzzParse(f *testing.F) {
	seeds := []string{
		"",
		"print(1)\n",
		"# /// script\n# dependencies = [\"requests<3\", \"rich\"]\n# requires-python = \">=3.11\"\n# ///\n",
		"# /// script\r\n# dependencies = []\r\n# ///",
		"# /// script\n#\n# ///\n",
		"# /// script\n# ///\n",
		"# /// script\n# dependencies = [\n# ///\n",
		"# /// script\n# dependencies = \"x\"\n# ///\n# /// script\n# ///\n",
		"# /// script\n# [tool.uv]\n# index-url = \"http://x\"\n# ///\n",
		"# /// other\n# /// script\n# a = 1\n# ///\n# ///\n",
		"# /// script\n# dependencies = [1, 2.5, true, 1979-05-27T07:32:00Z, [\"x\"], {a = 1}]\n# ///\n",
		"# /// script\n# requires-python = \"\"\"\n# multi\n# line\"\"\"\n# ///\n",
		"# /// script\n# \"\\u0000\" = 1\n# ///\n",
		"# /// script\n# [[dependencies]]\n# a = 1\n# ///\n",
		"#/// script\n#\n#///\n",
		"# /// script\r# a = 1\r# ///\r",
		"# /// script\n# dependencies = " + strings.Repeat("[", 5000) + "\n# ///\n",
		"# /// script\n# " + strings.Repeat("a.", 5000) + "b = 1\n# ///\n",
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, code string) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		meta, err := Parse(code)
		runtime.ReadMemStats(&after)
		if grew, bound := after.TotalAlloc-before.TotalAlloc, uint64(64*len(code))+4<<20; grew > bound {
			t.Fatalf("parsing a %d-byte script allocated %d bytes (bound %d)", len(code), grew, bound)
		}
		if err != nil {
			var perr *Error
			if !errors.As(err, &perr) || !errors.Is(err, ErrMetadata) {
				t.Fatalf("error %v (%T) is not an *Error wrapping ErrMetadata", err, err)
			}
			lines := strings.Count(code, "\n") + strings.Count(code, "\r") + 1
			if perr.Line < 1 || perr.Line > lines {
				t.Fatalf("error names line %d of a %d-line script: %v", perr.Line, lines, err)
			}
			return
		}
		if !strings.Contains(code, "# /// script") && meta.Present {
			t.Fatalf("metadata present in a script without an opening line: %#v", meta)
		}
		for _, d := range meta.Dependencies {
			if strings.TrimSpace(d) == "" {
				t.Fatalf("empty dependency in %#v", meta)
			}
		}
		merged := Merge(meta.Dependencies, meta.Dependencies)
		if len(merged) > len(meta.Dependencies) {
			t.Fatalf("Merge of a list with itself grew it: %q", merged)
		}
	})
}
