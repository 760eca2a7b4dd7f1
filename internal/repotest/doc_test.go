// Package repotest holds checks on the repository itself rather than on one
// package's behaviour.
package repotest

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// TestEveryPackageHasADocComment: every package says what it owns and what
// it must not do.
func TestEveryPackageHasADocComment(t *testing.T) {
	root := repoRoot()
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin") {
			return filepath.SkipDir
		}
		docs, err := packageDocs(path)
		if err != nil {
			return err
		}
		for pname, documented := range docs {
			checked++
			if !documented {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("package %s (%s) has no doc comment", pname, rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 10 {
		t.Fatalf("checked only %d packages; is the walk broken?", checked)
	}
}

// packageDocs reports, for each package with non-test Go files in dir,
// whether any of its files has a package doc comment. Build constraints
// are not considered: every file counts.
func packageDocs(dir string) (map[string]bool, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	docs := make(map[string]bool)
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return nil, err
		}
		pname := f.Name.Name
		docs[pname] = docs[pname] || (f.Doc != nil && strings.TrimSpace(f.Doc.Text()) != "")
	}
	return docs, nil
}
