package api

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestPreloadValidation(t *testing.T) {
	for _, c := range []struct {
		name  string
		mods  []string
		field string // "" for valid
		want  []string
	}{
		{"absent", nil, "", nil},
		{"empty clears", []string{}, "", []string{}},
		{"plain and dotted", []string{"pandas", "matplotlib.pyplot", "_private", "a1.b_2"}, "", []string{"pandas", "matplotlib.pyplot", "_private", "a1.b_2"}},
		{"repeats dropped, order kept", []string{"numpy", "pandas", "numpy"}, "", []string{"numpy", "pandas"}},
		{"empty name", []string{"numpy", ""}, "preload[1]", nil},
		{"comma", []string{"numpy,pandas"}, "preload[0]", nil},
		{"leading dot", []string{".x"}, "preload[0]", nil},
		{"trailing dot", []string{"x."}, "preload[0]", nil},
		{"double dot", []string{"x..y"}, "preload[0]", nil},
		{"digit first", []string{"x.2d"}, "preload[0]", nil},
		{"dash", []string{"scikit-learn"}, "preload[0]", nil},
		{"space", []string{"os path"}, "preload[0]", nil},
		{"non-ASCII", []string{"café"}, "preload[0]", nil},
		{"NUL", []string{"os\x00"}, "preload[0]", nil},
		{"too long", []string{strings.Repeat("a", MaxModuleName+1)}, "preload[0]", nil},
		{"longest", []string{strings.Repeat("a", MaxModuleName)}, "", []string{strings.Repeat("a", MaxModuleName)}},
		{"too many", slices.Repeat([]string{"os"}, MaxPreload+1), "preload", nil},
	} {
		got, err := NormalizePreload("preload", c.mods)
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.field == "" && (!slices.Equal(got, c.want) || (got == nil) != (c.want == nil)):
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		case c.field != "" && (err == nil || err.Field != c.field || err.Type != ErrBadRequest):
			t.Errorf("%s: %v, want bad_request on %s", c.name, err, c.field)
		}
	}
}

func TestEnvBuildRequestPreload(t *testing.T) {
	ok := &EnvBuildRequest{Dependencies: []string{"pandas"}, Preload: []string{"pandas", "numpy"}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := &EnvBuildRequest{Dependencies: []string{"pandas"}, Preload: []string{"pandas; import os"}}
	if err := bad.Validate(); err == nil || err.Field != "preload[0]" {
		t.Fatalf("bad module name: %v", err)
	}
	// Absent and null leave the list alone; [] clears it: the client
	// must send each as it is.
	for body, wantNil := range map[string]bool{`{"dependencies":["x"]}`: true, `{"dependencies":["x"],"preload":null}`: true, `{"dependencies":["x"],"preload":[]}`: false} {
		var r EnvBuildRequest
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			t.Fatal(err)
		}
		if (r.Preload == nil) != wantNil {
			t.Errorf("%s: preload %#v", body, r.Preload)
		}
		b, _ := json.Marshal(&r)
		var back EnvBuildRequest
		if err := json.Unmarshal(b, &back); err != nil || (back.Preload == nil) != wantNil {
			t.Errorf("%s: round trip %s lost the difference", body, b)
		}
	}
}
