package api

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseNetPattern(t *testing.T) {
	for in, want := range map[string]string{
		"api.example.org:443":  "api.example.org:443",
		"API.Example.ORG.:443": "api.example.org:443",
		"*.example.org:443":    "*.example.org:443",
		"*:443":                "*:443",
		"localhost:8080":       "localhost:8080",
		"203.0.113.7:80":       "203.0.113.7:80",
		"[2001:db8::7]:443":    "[2001:db8::7]:443",
		"[::ffff:1.2.3.4]:443": "1.2.3.4:443",
		"under_score.io:1":     "under_score.io:1",
		"xn--bcher-kva.de:443": "xn--bcher-kva.de:443",
	} {
		p, err := ParseNetPattern(in)
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		if p.String() != want {
			t.Errorf("%q reads as %q, want %q", in, p.String(), want)
		}
	}
	for in, why := range map[string]string{
		"example.org":                    "needs a port",
		"example.org:*":                  "port wildcards",
		"example.org:80-90":              "ranges",
		"example.org:0":                  "1 to 65535",
		"example.org:65536":              "1 to 65535",
		"example.org:080":                "1 to 65535",
		"example.org:+80":                "1 to 65535",
		"ex*ample.org:80":                "whole first label",
		"*example.org:80":                "whole first label",
		"a.*.org:80":                     "whole first label",
		"*.*.org:80":                     "whole first label",
		"*.1.2.3.4:80":                   "neither a host name",
		"::1:80":                         "needs brackets",
		"[example.org]:80":               "IPv6 address in brackets",
		"[1.2.3.4]:80":                   "IPv6 address in brackets",
		"[fe80::1%eth0]:80":              "IPv6 address in brackets",
		"127.1:80":                       "neither a host name",
		"2130706433:80":                  "neither a host name",
		"-bad.org:80":                    "not a host name",
		"bad..org:80":                    "not a host name",
		"bücher.de:443":                  "xn--",
		"exa mple.org:80":                "not a host name",
		":80":                            "not a host name",
		"user@example.org:80":            "not a host name",
		"example.org/path:80":            "not a host name",
		strings.Repeat("a", 400) + ":80": "at most",
	} {
		_, err := ParseNetPattern(in)
		if err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("%q: error %v, want one saying %q", in, err, why)
		}
	}
}

func mustPattern(t *testing.T, s string) NetPattern {
	t.Helper()
	p, err := ParseNetPattern(s)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return p
}

func TestNetPatternMatches(t *testing.T) {
	type target struct {
		host string
		port uint16
	}
	for _, c := range []struct {
		pattern string
		yes, no []target
	}{
		{"api.example.org:443",
			[]target{{"api.example.org", 443}, {"API.EXAMPLE.ORG.", 443}},
			[]target{{"api.example.org", 80}, {"x.api.example.org", 443}, {"example.org", 443}, {"api.example.org.evil", 443}}},
		{"*.example.org:443",
			[]target{{"a.example.org", 443}, {"a.b.example.org", 443}},
			[]target{{"example.org", 443}, {"aexample.org", 443}, {"a.example.org", 80}, {"1.2.3.4", 443}}},
		{"*:443",
			[]target{{"anything.at.all", 443}, {"1.2.3.4", 443}, {"[2001:db8::1]", 443}},
			[]target{{"anything.at.all", 444}}},
		{"203.0.113.7:80",
			[]target{{"203.0.113.7", 80}, {"::ffff:203.0.113.7", 80}},
			[]target{{"203.0.113.8", 80}, {"203.0.113.7", 81}}},
		{"[2001:db8::7]:443",
			[]target{{"[2001:db8::7]", 443}, {"2001:db8:0::7", 443}},
			[]target{{"2001:db8::8", 443}}},
	} {
		p := mustPattern(t, c.pattern)
		check := func(tg target, want bool) {
			name, addr, err := NormalizeHost(tg.host)
			if err != nil {
				t.Errorf("NormalizeHost(%q): %v", tg.host, err)
				return
			}
			if got := p.Matches(name, addr, tg.port); got != want {
				t.Errorf("%s matches %s:%d = %v, want %v", c.pattern, tg.host, tg.port, got, want)
			}
		}
		for _, tg := range c.yes {
			check(tg, true)
		}
		for _, tg := range c.no {
			check(tg, false)
		}
	}
	// A name never matches an address pattern, nor an address a name.
	if mustPattern(t, "localhost:80").Matches("", netip.MustParseAddr("127.0.0.1"), 80) {
		t.Error("localhost:80 matches the address 127.0.0.1")
	}
}

func TestNetPatternWithin(t *testing.T) {
	for _, c := range []struct {
		p, bound string
		want     bool
	}{
		{"api.example.org:443", "api.example.org:443", true},
		{"api.example.org:443", "api.example.org:80", false},
		{"api.example.org:443", "*.example.org:443", true},
		{"example.org:443", "*.example.org:443", false},
		{"*.a.example.org:443", "*.example.org:443", true},
		{"*.example.org:443", "*.example.org:443", true},
		{"*.example.org:443", "*.a.example.org:443", false},
		{"*.example.org:443", "api.example.org:443", false},
		{"*.org:443", "*.example.org:443", false},
		{"anything:443", "*:443", true},
		{"*.x:443", "*:443", true},
		{"1.2.3.4:443", "*:443", true},
		{"*:443", "*.example.org:443", false},
		{"*:443", "*:80", false},
		{"1.2.3.4:443", "1.2.3.4:443", true},
		{"1.2.3.4:443", "1.2.3.5:443", false},
		{"1.2.3.4:443", "*.example.org:443", false},
		{"example.org:443", "1.2.3.4:443", false},
	} {
		if got := mustPattern(t, c.p).Within(mustPattern(t, c.bound)); got != c.want {
			t.Errorf("%s within %s = %v, want %v", c.p, c.bound, got, c.want)
		}
	}
}

func TestNetworkValidation(t *testing.T) {
	req := &RunRequest{Code: "pass", Network: &Network{Allow: []string{"ok.example:443", "bad"}}}
	e := req.Validate()
	if e == nil || e.Type != ErrBadRequest || e.Field != "network.allow[1]" {
		t.Fatalf("error %+v", e)
	}
	many := make([]string, MaxNetworkAllow+1)
	for i := range many {
		many[i] = "a.example:443"
	}
	req.Network.Allow = many
	if e := req.Validate(); e == nil || e.Field != "network.allow" {
		t.Fatalf("too many: %+v", e)
	}
	req.Network.Allow = []string{"a.example:443"}
	if e := req.Validate(); e != nil {
		t.Fatalf("valid: %+v", e)
	}
	// A session fixes its network: a run in it cannot ask for one.
	req.Session = "s1"
	if e := req.Validate(); e == nil || e.Field != "network" {
		t.Fatalf("run in a session with network: %+v", e)
	}
	s := &SessionRequest{Network: &Network{Allow: []string{"nope"}}}
	if e := s.Validate(); e == nil || e.Field != "network.allow[0]" {
		t.Fatalf("session: %+v", e)
	}
}
