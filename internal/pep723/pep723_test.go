package pep723

import (
	"errors"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		code string
		want Metadata
	}{
		{
			name: "no block",
			code: "print('hi')\n",
			want: Metadata{},
		},
		{
			name: "empty script",
			code: "",
			want: Metadata{},
		},
		{
			name: "the PEP's example",
			code: `# /// script
# requires-python = ">=3.11"
# dependencies = [
#   "requests<3",
#   "rich",
# ]
# ///

import requests
`,
			want: Metadata{Present: true, RequiresPython: ">=3.11", Dependencies: []string{"requests<3", "rich"}},
		},
		{
			name: "block after code and without a trailing newline",
			code: "import sys\n\n# /// script\n# dependencies = [\"attrs\"]\n# ///",
			want: Metadata{Present: true, Dependencies: []string{"attrs"}},
		},
		{
			name: "CRLF line endings",
			code: "# /// script\r\n# dependencies = [\"attrs\"]\r\n# ///\r\nprint(1)\r\n",
			want: Metadata{Present: true, Dependencies: []string{"attrs"}},
		},
		{
			name: "bare # lines and a line without the space",
			code: "# /// script\n#\n# dependencies = [\"a\"]\n#\n# ///\n",
			want: Metadata{Present: true, Dependencies: []string{"a"}},
		},
		{
			name: "only comment lines: present but empty",
			code: "# /// script\n#\n# ///\n",
			want: Metadata{Present: true},
		},
		{
			name: "tool tables are ignored, including index settings",
			code: `# /// script
# dependencies = ["a"]
#
# [tool.uv]
# index-url = "https://evil.example/simple"
# extra-index-url = ["https://evil.example/more"]
#
# [tool.other]
# x = 1
# ///
`,
			want: Metadata{Present: true, Dependencies: []string{"a"}},
		},
		{
			name: "a tool key that is not a table is ignored too",
			code: "# /// script\n# tool = 3\n# ///\n",
			want: Metadata{Present: true},
		},
		{
			name: "unknown keys are ignored",
			code: "# /// script\n# future-key = {a = 1}\n# requires-python = \"==3.12.*\"\n# ///\n",
			want: Metadata{Present: true, RequiresPython: "==3.12.*"},
		},
		{
			name: "other block types are skipped",
			code: "# /// pyproject\n# [project]\n# name = \"x\"\n# ///\n\n# /// script\n# dependencies = [\"b\"]\n# ///\n",
			want: Metadata{Present: true, Dependencies: []string{"b"}},
		},
		{
			name: "adjacent blocks: the first runs to the last closing line",
			code: "# /// pyproject\n# [project]\n# ///\n# /// script\n# dependencies = [\"b\"]\n# ///\n",
			want: Metadata{},
		},
		{
			name: "a script block inside another block's lines is consumed by it",
			code: "# /// other\n# x = 1\n# /// script\n# dependencies = [\"b\"]\n# ///\n",
			want: Metadata{},
		},
		{
			name: "the closing line is the last '# ///' of the comment run",
			code: "# /// script\n# dependencies = [\n# \"\"\"\n# ///\n# \"\"\",\n# ]\n# ///\nprint(1)\n",
			want: Metadata{Present: true, Dependencies: []string{"///\n"}},
		},
		{
			name: "a closing line with trailing space does not close",
			code: "# /// script\n# dependencies = [\"a\"]\n# /// \n",
			want: Metadata{},
		},
		{
			name: "an opening line with trailing text does not open",
			code: "# /// script extra\n# dependencies = [\"a\"]\n# ///\n",
			want: Metadata{},
		},
		{
			name: "an indented block is not a block",
			code: "  # /// script\n  # dependencies = [\"a\"]\n  # ///\n",
			want: Metadata{},
		},
		{
			name: "a non-comment line ends the run before any closing line",
			code: "# /// script\n# dependencies = [\"a\"]\nx = 1\n# ///\n",
			want: Metadata{},
		},
		{
			name: "no content lines: not a block",
			code: "# /// script\n# ///\n",
			want: Metadata{},
		},
		{
			name: "opening line at end of file",
			code: "# /// script",
			want: Metadata{},
		},
		{
			name: "quoted keys and comments",
			code: "# /// script\n# \"dependencies\" = [\"a\", \"b\"] # two\n# 'requires-python' = '>=3.8'\n# ///\n",
			want: Metadata{Present: true, RequiresPython: ">=3.8", Dependencies: []string{"a", "b"}},
		},
		{
			name: "empty dependency list",
			code: "# /// script\n# dependencies = []\n# ///\n",
			want: Metadata{Present: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.code)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Parse = %#v, want %#v", got, tt.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name     string
		code     string
		wantLine int
		wantMsg  string
	}{
		{
			name:     "two script blocks",
			code:     "# /// script\n# dependencies = [\"a\"]\n# ///\nprint(1)\n# /// script\n# dependencies = [\"b\"]\n# ///\n",
			wantLine: 5,
			wantMsg:  "second '# /// script' block (the first opens on line 1)",
		},
		{
			name:     "invalid TOML names the script line",
			code:     "import os\n# /// script\n# requires-python = \">=3.11\"\n# dependencies = [\"a\",\n# ///\n",
			wantLine: 4,
			wantMsg:  "invalid TOML",
		},
		{
			name:     "dependencies is a string",
			code:     "\n# /// script\n# requires-python = \">=3.11\"\n# dependencies = \"requests\"\n# ///\n",
			wantLine: 4,
			wantMsg:  "'dependencies' must be an array of strings",
		},
		{
			name:     "a dependency is a number",
			code:     "# /// script\n# dependencies = [\"a\", 3]\n# ///\n",
			wantLine: 2,
			wantMsg:  "item 2 must be a string, not an integer",
		},
		{
			name:     "a dependency is empty",
			code:     "# /// script\n#\n# dependencies = [\"a\", \"  \"]\n# ///\n",
			wantLine: 3,
			wantMsg:  "item 2 is empty",
		},
		{
			name:     "requires-python is a number",
			code:     "# /// script\n# requires-python = 3.11\n# ///\n",
			wantLine: 2,
			wantMsg:  "'requires-python' must be a string",
		},
		{
			name:     "requires-python is an array",
			code:     "# /// script\n# requires-python = [\">=3\"]\n# ///\n",
			wantLine: 2,
			wantMsg:  "not an array",
		},
		{
			name:     "dependencies given as a table: falls back to the opening line",
			code:     "x = 1\n# /// script\n# [dependencies]\n# a = 1\n# ///\n",
			wantLine: 2,
			wantMsg:  "not a table",
		},
		{
			name:     "duplicate key",
			code:     "# /// script\n# requires-python = \">=3\"\n# requires-python = \">=3\"\n# ///\n",
			wantLine: 3,
			wantMsg:  "invalid TOML",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.code)
			if err == nil {
				t.Fatalf("Parse = %#v, want an error", got)
			}
			if !errors.Is(err, ErrMetadata) {
				t.Errorf("errors.Is(%v, ErrMetadata) = false", err)
			}
			var perr *Error
			if !errors.As(err, &perr) {
				t.Fatalf("error %v (%T) is not an *Error", err, err)
			}
			if perr.Line != tt.wantLine {
				t.Errorf("line = %d, want %d (%v)", perr.Line, tt.wantLine, err)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q does not contain %q", err, tt.wantMsg)
			}
			if !strings.HasPrefix(err.Error(), "line ") {
				t.Errorf("error %q does not start with its line", err)
			}
		})
	}
}

func TestMerge(t *testing.T) {
	tests := []struct {
		name  string
		meta  []string
		extra [][]string
		want  []string
	}{
		{name: "nothing", want: nil},
		{name: "meta only", meta: []string{"a", "b"}, want: []string{"a", "b"}},
		{
			name:  "order kept, exact duplicates dropped after trimming",
			meta:  []string{"requests<3", " rich "},
			extra: [][]string{{"rich", "numpy"}, {"requests<3 ", "attrs", "numpy"}},
			want:  []string{"requests<3", "rich", "numpy", "attrs"},
		},
		{
			name:  "different spellings are not merged",
			meta:  []string{"Requests"},
			extra: [][]string{{"requests", "requests>=2"}},
			want:  []string{"Requests", "requests", "requests>=2"},
		},
		{
			name:  "empty entries dropped",
			meta:  []string{"", "  "},
			extra: [][]string{nil, {"\t", "x"}},
			want:  []string{"x"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Merge(tt.meta, tt.extra...)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Merge = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestMergeDoesNotAlias(t *testing.T) {
	meta := []string{"a", "b"}
	got := Merge(meta)
	got[0] = "changed"
	if meta[0] != "a" {
		t.Fatal("Merge returned a slice sharing the input's array")
	}
}

// A block that nests deep or runs long is refused before the TOML parser
// builds anything: a 1 MB script nesting arrays 500,000 deep once took the
// daemon from 21 MiB to 511 MiB.
func TestParseBoundsTheBlock(t *testing.T) {
	block := func(lines ...string) string {
		var b strings.Builder
		b.WriteString("print(1)\n# /// script\n")
		for _, l := range lines {
			b.WriteString("# " + l + "\n")
		}
		b.WriteString("# ///\n")
		return b.String()
	}
	deep := strings.Repeat("[", 500_000)
	for name, code := range map[string]string{
		"deep arrays":         block("dependencies = " + deep),
		"deep inline tables":  block("x = " + strings.Repeat("{a = ", MaxNesting+1) + "1" + strings.Repeat("}", MaxNesting+1)),
		"dotted key":          block(strings.Repeat("a.", MaxNesting+1) + "b = 1"),
		"table header":        block("[" + strings.Repeat("t.", MaxNesting+1) + "u]"),
		"arrays across lines": block(append([]string{"dependencies = ["}, slices.Repeat([]string{"["}, MaxNesting+1)...)...),
		"too long":            block("dependencies = [" + strings.Repeat(`"x",`, MaxBlockBytes/4) + "]"),
	} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := Parse(code)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrMetadata) {
			t.Errorf("%s: %v, want a metadata error", name, err)
		}
		// The script itself, split into lines, and no more than that
		// again: nothing grows with the nesting.
		if grew := after.TotalAlloc - before.TotalAlloc; grew > uint64(4*len(code))+1<<20 {
			t.Errorf("%s: parsing a %d-byte script allocated %d bytes", name, len(code), grew)
		}
	}
	// Brackets, braces and dots in strings and comments do not count, and
	// real metadata nests two deep at most.
	ok := block(
		`dependencies = ["numpy>=1.26.4", "a[b]{c}.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.s.t.u.v.w.x.y.z.0.1.2.3.4.5.6.7.8.9"]`,
		`requires-python = '>=3.8.1' # [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[`,
		`x = """`+strings.Repeat("[.", 40)+`"""`,
		`[tool.uv.sources]`,
		`y = [[1, 2], {a = [3]}]`,
	)
	if meta, err := Parse(ok); err != nil || len(meta.Dependencies) != 2 {
		t.Errorf("ordinary block: %+v, %v", meta, err)
	}
}
