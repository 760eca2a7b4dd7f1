package repotest

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestEmbeddedPythonCompiles: every Python program that a go:embed
// directive puts into a binary compiles with the host's python3, so that a
// syntax error shows up here rather than when the program first runs in a
// jail or a rootfs build.
func TestEmbeddedPythonCompiles(t *testing.T) {
	root := repoRoot()
	files, err := embeddedFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	var programs []string
	for _, f := range files {
		if strings.HasSuffix(f, ".py") {
			programs = append(programs, f)
		}
	}
	// validate_python's checker at least; is the search broken?
	if len(programs) == 0 {
		t.Fatal("found no embedded .py file")
	}
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skipf("no python3 to compile %d embedded programs with: %v", len(programs), err)
	}
	// compile() rather than py_compile, which would write __pycache__
	// into the tree.
	const compileFile = `import sys; compile(open(sys.argv[1], "rb").read(), sys.argv[1], "exec", dont_inherit=True)`
	for _, p := range programs {
		rel, _ := filepath.Rel(root, p)
		t.Run(rel, func(t *testing.T) {
			out, err := exec.Command(python, "-c", compileFile, p).CombinedOutput()
			if err != nil {
				t.Errorf("%s does not compile: %v\n%s", rel, err, out)
			}
		})
	}
}

// embeddedFiles lists the files the go:embed directives of the Go files
// under root (test files included) embed, sorted and without duplicates.
func embeddedFiles(root string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			// Go files under testdata are not built.
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, g := range f.Comments {
			for _, c := range g.List {
				args, ok := strings.CutPrefix(c.Text, "//go:embed")
				if !ok || args != "" && args[0] != ' ' && args[0] != '\t' {
					continue
				}
				patterns, err := embedPatterns(args)
				if err != nil {
					return fmt.Errorf("%s: %w", path, err)
				}
				for _, pat := range patterns {
					files, err := embedMatches(filepath.Dir(path), pat)
					if err != nil {
						return fmt.Errorf("%s: go:embed %s: %w", path, pat, err)
					}
					out = append(out, files...)
				}
			}
		}
		return nil
	})
	slices.Sort(out)
	return slices.Compact(out), err
}

// embedPatterns splits a go:embed directive's arguments: patterns separated
// by spaces, each bare or a Go string literal.
func embedPatterns(args string) ([]string, error) {
	var out []string
	for {
		args = strings.TrimLeft(args, " \t")
		if args == "" {
			return out, nil
		}
		if args[0] == '"' || args[0] == '`' {
			lit, err := strconv.QuotedPrefix(args)
			if err != nil {
				return nil, fmt.Errorf("go:embed %s: %w", args, err)
			}
			pat, _ := strconv.Unquote(lit)
			out = append(out, pat)
			args = args[len(lit):]
			continue
		}
		end := strings.IndexAny(args, " \t")
		if end < 0 {
			end = len(args)
		}
		out = append(out, args[:end])
		args = args[end:]
	}
}

// embedMatches lists the files one pattern embeds from dir: the files it
// matches and, for a directory, the files below it except, without the
// "all:" prefix, those whose names start with "." or "_".
func embedMatches(dir, pattern string) ([]string, error) {
	pattern, all := strings.CutPrefix(pattern, "all:")
	matches, err := filepath.Glob(filepath.Join(dir, filepath.FromSlash(pattern)))
	if err != nil {
		return nil, err
	}
	if len(matches) == 0 {
		return nil, fmt.Errorf("matches no file")
	}
	var out []string
	for _, m := range matches {
		err := filepath.WalkDir(m, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			hidden := strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_")
			switch {
			case path != m && hidden && !all && d.IsDir():
				return filepath.SkipDir
			case path != m && hidden && !all, d.IsDir():
				return nil
			}
			out = append(out, path)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func TestEmbedPatternsAndMatches(t *testing.T) {
	got, err := embedPatterns(" a.py\t\"b c.py\"  `d/*.py` all:e")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a.py", "b c.py", "d/*.py", "all:e"}; !slices.Equal(got, want) {
		t.Errorf("embedPatterns = %q, want %q", got, want)
	}

	dir := t.TempDir()
	for _, f := range []string{"x.py", "y.txt", "e/z.py", "e/_skip.py", "e/.hidden/w.py"} {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		pattern string
		want    []string
	}{
		{"*.py", []string{"x.py"}},
		{"e", []string{"e/z.py"}},
		{"all:e", []string{"e/.hidden/w.py", "e/_skip.py", "e/z.py"}},
	} {
		files, err := embedMatches(dir, tc.pattern)
		if err != nil {
			t.Fatalf("%s: %v", tc.pattern, err)
		}
		var rel []string
		for _, f := range files {
			r, _ := filepath.Rel(dir, f)
			rel = append(rel, filepath.ToSlash(r))
		}
		slices.Sort(rel)
		if !slices.Equal(rel, tc.want) {
			t.Errorf("embedMatches(%q) = %q, want %q", tc.pattern, rel, tc.want)
		}
	}
	if _, err := embedMatches(dir, "nothing-*.py"); err == nil {
		t.Error("a pattern that matches nothing: no error")
	}
}
