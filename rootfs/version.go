package rootfs

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// ErrUnknownVersion is wrapped by the errors of Pick and PickSpecifier when
// no stored Python matches; the message lists the versions that exist.
var ErrUnknownVersion = errors.New("unknown python version")

// ErrInvalidSpecifier is wrapped by PickSpecifier's error for a
// requires-python specifier it cannot parse.
var ErrInvalidSpecifier = errors.New("invalid python version specifier")

// pyVersion is a parsed CPython version: release numbers and an optional
// pre-release tag. Epochs, post- and dev-releases do not occur in CPython
// versions and are rejected.
type pyVersion struct {
	release []int
	pre     string // "", "a", "b" or "rc"
	preN    int
}

// parseVersion parses "3.12", "3.12.1", "3.13.0rc1" and the PEP 440
// spellings of pre-releases ("3.13.0-rc.1", "3.13.0c1", "3.13.0beta2").
func parseVersion(s string) (pyVersion, error) {
	var v pyVersion
	s = strings.ToLower(strings.TrimSpace(s))
	s = strings.TrimPrefix(s, "v")
	// The release segment is the leading run of digits and dots.
	i := 0
	for i < len(s) && (s[i] == '.' || (s[i] >= '0' && s[i] <= '9')) {
		i++
	}
	rel, rest := strings.TrimSuffix(s[:i], "."), s[i:]
	if rel == "" {
		return v, fmt.Errorf("version %q: no release number", s)
	}
	for _, part := range strings.Split(rel, ".") {
		n, err := strconv.Atoi(part)
		if err != nil {
			return v, fmt.Errorf("version %q: bad release segment %q", s, part)
		}
		v.release = append(v.release, n)
	}
	if s[:i] != rel { // a trailing dot belongs to a pre-release separator
		rest = "." + rest
	}
	if rest == "" {
		return v, nil
	}
	rest = strings.TrimLeft(rest, ".-_")
	for _, t := range []struct{ spelling, tag string }{
		{"alpha", "a"}, {"beta", "b"}, {"preview", "rc"}, {"pre", "rc"},
		{"rc", "rc"}, {"a", "a"}, {"b", "b"}, {"c", "rc"},
	} {
		if strings.HasPrefix(rest, t.spelling) {
			v.pre = t.tag
			rest = strings.TrimLeft(rest[len(t.spelling):], ".-_")
			break
		}
	}
	if v.pre == "" {
		return v, fmt.Errorf("version %q: unsupported suffix %q", s, rest)
	}
	if rest != "" {
		n, err := strconv.Atoi(rest)
		if err != nil {
			return v, fmt.Errorf("version %q: bad pre-release number %q", s, rest)
		}
		v.preN = n
	}
	return v, nil
}

func (v pyVersion) String() string {
	parts := make([]string, len(v.release))
	for i, n := range v.release {
		parts[i] = strconv.Itoa(n)
	}
	s := strings.Join(parts, ".")
	if v.pre != "" {
		s += v.pre + strconv.Itoa(v.preN)
	}
	return s
}

// compareVersions orders versions as PEP 440 does for CPython's versions:
// release segments compared with zero padding, and a pre-release before
// its final release (a < b < rc < final).
func compareVersions(a, b pyVersion) int {
	for i := 0; i < len(a.release) || i < len(b.release); i++ {
		x, y := segment(a.release, i), segment(b.release, i)
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	if c := preRank(a.pre) - preRank(b.pre); c != 0 {
		if c < 0 {
			return -1
		}
		return 1
	}
	switch {
	case a.preN < b.preN:
		return -1
	case a.preN > b.preN:
		return 1
	}
	return 0
}

func segment(r []int, i int) int {
	if i < len(r) {
		return r[i]
	}
	return 0
}

func preRank(pre string) int {
	switch pre {
	case "a":
		return 0
	case "b":
		return 1
	case "rc":
		return 2
	}
	return 3
}

// sortPythons orders by version, then ID.
func sortPythons(ps []Python) {
	sort.SliceStable(ps, func(i, j int) bool {
		a, errA := parseVersion(ps[i].Version)
		b, errB := parseVersion(ps[j].Version)
		if errA == nil && errB == nil {
			if c := compareVersions(a, b); c != 0 {
				return c < 0
			}
		}
		return ps[i].ID < ps[j].ID
	})
}

// unknownVersion builds the ErrUnknownVersion error for a request.
func unknownVersion(what string, ps []Python) error {
	if len(ps) == 0 {
		return fmt.Errorf("%w %s: the rootfs store is empty", ErrUnknownVersion, what)
	}
	var vs []string
	for _, p := range ps {
		vs = appendUnique(vs, p.Version)
	}
	return fmt.Errorf("%w %s; available: %s", ErrUnknownVersion, what, strings.Join(vs, ", "))
}

// pickVersion implements Store.Pick over a list sorted by sortPythons.
func pickVersion(ps []Python, req string) (Python, error) {
	req = strings.TrimSpace(req)
	if req == "" {
		for _, p := range ps {
			if p.Default {
				return p, nil
			}
		}
		return Python{}, unknownVersion("(no default)", ps)
	}
	for _, p := range ps {
		if p.ID == req {
			return p, nil
		}
	}
	want := strings.Split(req, ".")
	var matches []Python
	for _, p := range ps {
		have := strings.Split(p.Version, ".")
		if len(have) < len(want) {
			continue
		}
		ok := true
		for i := range want {
			if want[i] != have[i] {
				ok = false
				break
			}
		}
		if ok {
			matches = append(matches, p)
		}
	}
	if p, ok := best(matches); ok {
		return p, nil
	}
	return Python{}, unknownVersion(strconv.Quote(req), ps)
}

// best chooses among candidates sorted by sortPythons: final releases over
// pre-releases, then the highest version, and among builds of that same
// version the default, else the first by ID.
func best(ps []Python) (Python, bool) {
	if len(ps) == 0 {
		return Python{}, false
	}
	var finals []Python
	for _, p := range ps {
		if v, err := parseVersion(p.Version); err == nil && v.pre == "" {
			finals = append(finals, p)
		}
	}
	if len(finals) > 0 {
		ps = finals
	}
	top := ps[len(ps)-1].Version
	var same []Python
	for _, p := range ps {
		if p.Version == top {
			same = append(same, p)
		}
	}
	for _, p := range same {
		if p.Default {
			return p, true
		}
	}
	return same[0], true
}

// specClause is one comparison of a PEP 440 version specifier.
type specClause struct {
	op       string // "===", "~=", "==", "!=", "<=", ">=", "<", ">"
	raw      string // the version text as written
	v        pyVersion
	wildcard bool // "==3.11.*" or "!=3.11.*"
}

// parseSpecifier parses a requires-python style specifier such as
// ">=3.9", ">=3.8,<3.12", "~=3.10" or "==3.11.*".
func parseSpecifier(spec string) ([]specClause, error) {
	var clauses []specClause
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			return nil, fmt.Errorf("%w %q: empty clause", ErrInvalidSpecifier, spec)
		}
		var c specClause
		for _, op := range []string{"===", "~=", "==", "!=", "<=", ">=", "<", ">"} {
			if strings.HasPrefix(part, op) {
				c.op = op
				break
			}
		}
		if c.op == "" {
			return nil, fmt.Errorf("%w %q: clause %q has no operator", ErrInvalidSpecifier, spec, part)
		}
		c.raw = strings.TrimSpace(part[len(c.op):])
		if c.op == "===" {
			clauses = append(clauses, c)
			continue
		}
		text := c.raw
		if strings.HasSuffix(text, ".*") {
			if c.op != "==" && c.op != "!=" {
				return nil, fmt.Errorf("%w %q: wildcard only allowed with == and !=", ErrInvalidSpecifier, spec)
			}
			c.wildcard = true
			text = strings.TrimSuffix(text, ".*")
		}
		v, err := parseVersion(text)
		if err != nil {
			return nil, fmt.Errorf("%w %q: %w", ErrInvalidSpecifier, spec, err)
		}
		if c.wildcard && v.pre != "" {
			return nil, fmt.Errorf("%w %q: wildcard after a pre-release", ErrInvalidSpecifier, spec)
		}
		if c.op == "~=" && len(v.release) < 2 {
			return nil, fmt.Errorf("%w %q: ~= needs at least two release segments", ErrInvalidSpecifier, spec)
		}
		c.v = v
		clauses = append(clauses, c)
	}
	return clauses, nil
}

// matches reports whether version v (written raw) satisfies the clause.
func (c specClause) matches(v pyVersion, raw string) bool {
	switch c.op {
	case "===":
		return raw == c.raw
	case "==":
		if c.wildcard {
			return hasReleasePrefix(v, c.v.release)
		}
		return compareVersions(v, c.v) == 0
	case "!=":
		if c.wildcard {
			return !hasReleasePrefix(v, c.v.release)
		}
		return compareVersions(v, c.v) != 0
	case "<=":
		return compareVersions(v, c.v) <= 0
	case ">=":
		return compareVersions(v, c.v) >= 0
	case "<":
		// "<3.12" must not admit 3.12.0rc1.
		if v.pre != "" && c.v.pre == "" && compareVersions(pyVersion{release: v.release}, c.v) == 0 {
			return false
		}
		return compareVersions(v, c.v) < 0
	case ">":
		return compareVersions(v, c.v) > 0
	case "~=":
		prefix := c.v.release[:len(c.v.release)-1]
		return compareVersions(v, c.v) >= 0 && hasReleasePrefix(v, prefix)
	}
	return false
}

func hasReleasePrefix(v pyVersion, prefix []int) bool {
	for i, n := range prefix {
		if segment(v.release, i) != n {
			return false
		}
	}
	return true
}

// pickSpecifier implements Store.PickSpecifier over a sorted list.
func pickSpecifier(ps []Python, spec string) (Python, error) {
	if strings.TrimSpace(spec) == "" {
		return pickVersion(ps, "")
	}
	clauses, err := parseSpecifier(spec)
	if err != nil {
		return Python{}, err
	}
	// Pre-releases only count when the specifier names one (PEP 440).
	allowPre := false
	for _, c := range clauses {
		if c.v.pre != "" {
			allowPre = true
		}
	}
	var matches []Python
	for _, p := range ps {
		v, err := parseVersion(p.Version)
		if err != nil || (v.pre != "" && !allowPre) {
			continue
		}
		ok := true
		for _, c := range clauses {
			if !c.matches(v, p.Version) {
				ok = false
				break
			}
		}
		if ok {
			matches = append(matches, p)
		}
	}
	for _, p := range matches {
		if p.Default {
			return p, nil
		}
	}
	if p, ok := best(matches); ok {
		return p, nil
	}
	return Python{}, unknownVersion("for requires-python "+strconv.Quote(spec), ps)
}
