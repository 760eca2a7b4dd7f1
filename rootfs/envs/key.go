package envs

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
)

// Policy says what an installer may do to get a package.
type Policy string

// Install policies.
const (
	// PolicyWheelsOnly installs wheels and nothing else (--only-binary
	// :all:): installing a wheel unpacks files and never runs code from
	// the package. The default.
	PolicyWheelsOnly Policy = "wheels-only"
	// PolicyAllowSdist lets the installer build source distributions,
	// which runs the packages' build code (inside the build jail). The
	// operator opts in with cellblockd --allow-sdist.
	PolicyAllowSdist Policy = "allow-sdist"
)

// Index says where packages come from, as the daemon's --index-url,
// --find-links and --no-index flags do for uv and pip.
type Index struct {
	// URL is the package index; empty means the installer's default
	// (PyPI) unless NoIndex.
	URL string `json:"index_url,omitempty"`
	// FindLinks are absolute host directories of wheels, searched in order.
	FindLinks []string `json:"find_links,omitempty"`
	// NoIndex uses FindLinks only.
	NoIndex bool `json:"no_index,omitempty"`
}

// NeedsNetwork reports whether an installer with these settings must reach
// the network: anything but --no-index does.
func (ix Index) NeedsNetwork() bool { return !ix.NoIndex }

// Spec is what an environment is made from: the inputs of its key.
type Spec struct {
	// Python is the interpreter's full version ("3.12.1") and ABI its
	// SOABI ("cpython-312-x86_64-linux-gnu"): together they decide which
	// wheels fit and which bytecode is valid.
	Python string `json:"python"`
	ABI    string `json:"abi"`
	// Requirements are in normal form, sorted, without duplicates (see
	// Normalize).
	Requirements []string `json:"requirements"`
	Index
	Policy Policy `json:"policy"`
}

// keyFormat is mixed into every key; bump it when the layout of an
// environment changes so that old environments are not reused.
const keyFormat = 1

// idLen is the length of an environment ID in hex digits (96 bits).
const idLen = 24

// Validate checks that s is complete and in normal form.
func (s Spec) Validate() error {
	switch {
	case s.Python == "" || s.ABI == "":
		return fmt.Errorf("environment spec: python version and ABI are required")
	case len(s.Requirements) == 0:
		return fmt.Errorf("environment spec: no requirements")
	case s.Policy != PolicyWheelsOnly && s.Policy != PolicyAllowSdist:
		return fmt.Errorf("environment spec: unknown install policy %q", s.Policy)
	case s.NoIndex && s.URL != "":
		return fmt.Errorf("environment spec: an index URL with no-index")
	}
	norm, err := Normalize(s.Requirements)
	if err != nil {
		return fmt.Errorf("environment spec: %w", err)
	}
	if !slices.Equal(norm, s.Requirements) {
		return fmt.Errorf("environment spec: requirements %q are not in normal form %q", s.Requirements, norm)
	}
	for _, d := range s.FindLinks {
		if !filepath.IsAbs(d) {
			return fmt.Errorf("environment spec: find-links %q is not absolute", d)
		}
	}
	return nil
}

// ID is the environment's key: the first 96 bits, in hex, of the SHA-256
// of the spec's canonical JSON (fields in a fixed order, requirements
// already sorted) together with the layout format. Find-links keep their
// order, which decides which wheel wins between directories.
func (s Spec) ID() string {
	if s.FindLinks == nil {
		s.FindLinks = []string{}
	}
	b, err := json.Marshal(struct {
		Format int `json:"format"`
		Spec
	}{keyFormat, s})
	if err != nil {
		panic(err) // plain strings and bools always marshal
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:idLen]
}

// validID reports whether id could be an environment ID; used before an ID
// from a request becomes part of a path.
func validID(id string) bool {
	if len(id) != idLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if !(id[i] >= '0' && id[i] <= '9' || id[i] >= 'a' && id[i] <= 'f') {
			return false
		}
	}
	return true
}
