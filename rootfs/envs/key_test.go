package envs

import (
	"testing"
)

func testSpec() Spec {
	return Spec{
		Python: "3.11.7", ABI: "cpython-311-x86_64-linux-gnu",
		Requirements: []string{"cbalpha", "cbgamma<2,>=1"},
		Index:        Index{FindLinks: []string{"/srv/wheels"}, NoIndex: true},
		Policy:       PolicyWheelsOnly,
	}
}

func TestSpecID(t *testing.T) {
	base := testSpec()
	id := base.ID()
	if !validID(id) || base.Validate() != nil {
		t.Fatalf("ID %q, Validate %v", id, base.Validate())
	}
	if again := testSpec().ID(); again != id {
		t.Errorf("ID is not stable: %s then %s", id, again)
	}
	// Requirements written differently normalize to the same key.
	reqs, err := Normalize([]string{"CBGamma >= 1, <2", "cbalpha", "cbalpha"})
	if err != nil {
		t.Fatal(err)
	}
	same := testSpec()
	same.Requirements = reqs
	if same.ID() != id {
		t.Errorf("normalized requirements %q give another key", reqs)
	}
	// Every input of the key changes it.
	for name, mutate := range map[string]func(*Spec){
		"python":       func(s *Spec) { s.Python = "3.11.8" },
		"abi":          func(s *Spec) { s.ABI = "cpython-311d-x86_64-linux-gnu" },
		"requirements": func(s *Spec) { s.Requirements = []string{"cbalpha"} },
		"index url":    func(s *Spec) { s.NoIndex = false; s.URL = "https://pypi.example/simple" },
		"find links":   func(s *Spec) { s.FindLinks = []string{"/srv/other"} },
		"link order":   func(s *Spec) { s.FindLinks = []string{"/srv/b", "/srv/wheels"} },
		"no index":     func(s *Spec) { s.NoIndex = false },
		"policy":       func(s *Spec) { s.Policy = PolicyAllowSdist },
	} {
		s := testSpec()
		mutate(&s)
		if s.ID() == id {
			t.Errorf("changing %s keeps the key %s", name, id)
		}
	}
}

func TestSpecValidate(t *testing.T) {
	for name, mutate := range map[string]func(*Spec){
		"no python":      func(s *Spec) { s.Python = "" },
		"no abi":         func(s *Spec) { s.ABI = "" },
		"no reqs":        func(s *Spec) { s.Requirements = nil },
		"unsorted":       func(s *Spec) { s.Requirements = []string{"b", "a"} },
		"not normal":     func(s *Spec) { s.Requirements = []string{"Requests"} },
		"policy":         func(s *Spec) { s.Policy = "anything" },
		"relative links": func(s *Spec) { s.FindLinks = []string{"wheels"} },
		"url+no-index":   func(s *Spec) { s.URL = "https://x" },
	} {
		s := testSpec()
		mutate(&s)
		if err := s.Validate(); err == nil {
			t.Errorf("%s: Validate passed", name)
		}
	}
}

func TestValidID(t *testing.T) {
	for id, want := range map[string]bool{
		testSpec().ID():               true,
		"0123456789abcdef01234567":    true,
		"0123456789ABCDEF01234567":    false,
		"0123456789abcdef0123456":     false,
		"../../etc/passwd/0123456789": false,
		"":                            false,
	} {
		if validID(id) != want {
			t.Errorf("validID(%q) = %v", id, !want)
		}
	}
}
