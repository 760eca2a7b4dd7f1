package envs

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrInvalidRequirement is wrapped by the errors of ParseRequirement and
// Normalize.
var ErrInvalidRequirement = errors.New("invalid requirement")

// Requirement is one PEP 508 requirement in normal form.
//
// Direct references ("name @ URL") are refused: where packages come from is
// the operator's choice (the daemon's --index-url, --find-links and
// --no-index), not the script's. So is anything that is not a requirement,
// in particular strings starting with "-", which an installer would read as
// an option.
type Requirement struct {
	// Name is the project name normalized as PEP 503 says: lower case,
	// each run of "-", "_" and "." one "-".
	Name string
	// Extras are the normalized extras, sorted, without duplicates.
	Extras []string
	// Specifier is the version specifier: its clauses without white space,
	// lower-cased, sorted and joined by ",". Empty means any version.
	Specifier string
	// Marker is the environment marker with its tokens separated by single
	// spaces and strings in double quotes. Empty means none.
	Marker string
}

// String is the requirement in normal form, as it is passed to installers
// and hashed into keys: "name[extra1,extra2]>=1,<2; marker".
func (r Requirement) String() string {
	var b strings.Builder
	b.WriteString(r.Name)
	if len(r.Extras) > 0 {
		b.WriteString("[" + strings.Join(r.Extras, ",") + "]")
	}
	b.WriteString(r.Specifier)
	if r.Marker != "" {
		b.WriteString("; " + r.Marker)
	}
	return b.String()
}

// NormalizeName normalizes a project name as PEP 503 says.
func NormalizeName(name string) string {
	var b strings.Builder
	sep := false
	for _, c := range strings.ToLower(name) {
		if c == '-' || c == '_' || c == '.' {
			sep = true
			continue
		}
		if sep && b.Len() > 0 {
			b.WriteByte('-')
		}
		sep = false
		b.WriteRune(c)
	}
	return b.String()
}

// maxRequirementLen bounds one requirement string.
const maxRequirementLen = 512

// ParseRequirement parses a PEP 508 requirement without a URL and returns
// it in normal form.
func ParseRequirement(s string) (Requirement, error) {
	bad := func(format string, args ...any) (Requirement, error) {
		return Requirement{}, fmt.Errorf("%w %q: %s", ErrInvalidRequirement, s, fmt.Sprintf(format, args...))
	}
	if len(s) > maxRequirementLen {
		return bad("longer than %d bytes", maxRequirementLen)
	}
	rest := strings.TrimSpace(s)
	if strings.ContainsAny(rest, "\x00\r\n") {
		return bad("contains a control character")
	}
	// The name.
	n := 0
	for n < len(rest) && isNameByte(rest[n]) {
		n++
	}
	name := rest[:n]
	if name == "" || !isAlnum(name[0]) || !isAlnum(name[len(name)-1]) {
		return bad("must start with a package name such as 'requests'")
	}
	r := Requirement{Name: NormalizeName(name)}
	rest = strings.TrimLeft(rest[n:], " \t")

	// Extras.
	if strings.HasPrefix(rest, "[") {
		end := strings.IndexByte(rest, ']')
		if end < 0 {
			return bad("the extras' '[' is not closed")
		}
		for _, e := range strings.Split(rest[1:end], ",") {
			e = strings.TrimSpace(e)
			if e == "" {
				continue
			}
			if !validName(e) {
				return bad("extra %q is not a name", e)
			}
			r.Extras = append(r.Extras, NormalizeName(e))
		}
		slices.Sort(r.Extras)
		r.Extras = slices.Compact(r.Extras)
		rest = strings.TrimLeft(rest[end+1:], " \t")
	}
	if strings.HasPrefix(rest, "@") {
		return bad("direct references (name @ URL) are not allowed: packages come from the daemon's index or wheelhouse")
	}

	// The version specifier, up to the marker.
	spec, marker, hasMarker := strings.Cut(rest, ";")
	spec = strings.TrimSpace(spec)
	if strings.HasPrefix(spec, "(") {
		if !strings.HasSuffix(spec, ")") {
			return bad("the specifier's '(' is not closed")
		}
		spec = spec[1 : len(spec)-1]
	}
	specifier, err := normalizeSpecifier(spec)
	if err != nil {
		return bad("%v", err)
	}
	r.Specifier = specifier
	if hasMarker {
		m, err := normalizeMarker(marker)
		if err != nil {
			return bad("marker: %v", err)
		}
		if m == "" {
			return bad("empty marker after ';'")
		}
		r.Marker = m
	}
	return r, nil
}

// specifierOps are PEP 440's comparison operators, longest first.
var specifierOps = []string{"===", "~=", "==", "!=", "<=", ">=", "<", ">"}

func normalizeSpecifier(spec string) (string, error) {
	if strings.TrimSpace(spec) == "" {
		return "", nil
	}
	var clauses []string
	for _, c := range strings.Split(spec, ",") {
		c = strings.TrimSpace(c)
		op := ""
		for _, o := range specifierOps {
			if strings.HasPrefix(c, o) {
				op = o
				break
			}
		}
		if op == "" {
			return "", fmt.Errorf("%q is not a version clause such as '>=1.2'", c)
		}
		v := strings.ToLower(strings.TrimSpace(c[len(op):]))
		if v == "" {
			return "", fmt.Errorf("%q has no version", c)
		}
		for i := 0; i < len(v); i++ {
			ch := v[i]
			if !isAlnum(ch) && !strings.ContainsRune(".*+!_-", rune(ch)) {
				return "", fmt.Errorf("version %q contains %q", v, ch)
			}
		}
		if strings.Contains(v, "*") && (op != "==" && op != "!=" || !strings.HasSuffix(v, ".*") || strings.Count(v, "*") > 1) {
			return "", fmt.Errorf("%q: a wildcard is only allowed as a trailing .* with == or !=", c)
		}
		clauses = append(clauses, op+v)
	}
	slices.Sort(clauses)
	return strings.Join(slices.Compact(clauses), ","), nil
}

// normalizeMarker re-spells a marker expression token by token. It checks
// the tokens, not the grammar: the installer evaluates the marker.
func normalizeMarker(m string) (string, error) {
	var toks []string
	for i := 0; i < len(m); {
		c := m[i]
		switch {
		case c == ' ' || c == '\t':
			i++
		case c == '(' || c == ')':
			toks = append(toks, string(c))
			i++
		case c == '\'' || c == '"':
			end := strings.IndexByte(m[i+1:], c)
			if end < 0 {
				return "", fmt.Errorf("unterminated string at %q", m[i:])
			}
			str := m[i+1 : i+1+end]
			if strings.ContainsRune(str, '"') {
				toks = append(toks, "'"+str+"'")
			} else {
				toks = append(toks, `"`+str+`"`)
			}
			i += end + 2
		case strings.ContainsRune("<>=!~", rune(c)):
			j := i
			for j < len(m) && strings.ContainsRune("<>=!~", rune(m[j])) {
				j++
			}
			op := m[i:j]
			if !slices.Contains(specifierOps, op) {
				return "", fmt.Errorf("unknown operator %q", op)
			}
			toks = append(toks, op)
			i = j
		case c == '_' || isAlnum(c):
			j := i
			for j < len(m) && (m[j] == '_' || m[j] == '.' || isAlnum(m[j])) {
				j++
			}
			toks = append(toks, m[i:j])
			i = j
		default:
			return "", fmt.Errorf("unexpected %q", c)
		}
	}
	var b strings.Builder
	for i, t := range toks {
		if i > 0 && t != ")" && toks[i-1] != "(" {
			b.WriteByte(' ')
		}
		b.WriteString(t)
	}
	return b.String(), nil
}

// RequirementError says which requirement of a list is invalid.
type RequirementError struct {
	// Index is the requirement's position in the list given to Normalize.
	Index int
	Err   error
}

func (e *RequirementError) Error() string { return e.Err.Error() }
func (e *RequirementError) Unwrap() error { return e.Err }

// Normalize parses every requirement and returns their normal forms,
// sorted and without duplicates: the form keys are made of. An invalid one
// gives a *RequirementError wrapping ErrInvalidRequirement.
func Normalize(reqs []string) ([]string, error) {
	out := make([]string, 0, len(reqs))
	for i, s := range reqs {
		r, err := ParseRequirement(s)
		if err != nil {
			return nil, &RequirementError{Index: i, Err: err}
		}
		out = append(out, r.String())
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func isNameByte(c byte) bool { return isAlnum(c) || c == '-' || c == '_' || c == '.' }

func validName(s string) bool {
	if s == "" || !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isNameByte(s[i]) {
			return false
		}
	}
	return true
}
