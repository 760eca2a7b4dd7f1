package api

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestErrorTypesListsEveryClass: ErrorTypes has every ErrorType constant
// declared in this package, and no other.
func TestErrorTypesListsEveryClass(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var declared []ErrorType
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				v := spec.(*ast.ValueSpec)
				if id, ok := v.Type.(*ast.Ident); !ok || id.Name != "ErrorType" {
					continue
				}
				for _, e := range v.Values {
					lit, ok := e.(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Fatalf("an ErrorType constant that is not a string literal: %v", e)
					}
					s, _ := strconv.Unquote(lit.Value)
					declared = append(declared, ErrorType(s))
				}
			}
		}
	}
	if len(declared) < 10 {
		t.Fatalf("found %d ErrorType constants; is the search broken?", len(declared))
	}
	// The package's files are read in name order: sort both for the set.
	got, want := slices.Sorted(slices.Values(ErrorTypes)), slices.Sorted(slices.Values(declared))
	if !slices.Equal(got, want) {
		t.Errorf("ErrorTypes %q, the declared classes %q", got, want)
	}
}
