package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/cellblock/cellblock/internal/api"
)

// What the sandbox refused comes after the output, one line each.
func TestDenialNotes(t *testing.T) {
	res := &api.Result{Denials: []api.Denial{
		{Kind: "network", Detail: "CONNECT evil.example:443 refused: evil.example:443 is not in the network allowlist (api.example.org:443)",
			Host: "evil.example", Port: 443, Reason: api.DenyNotAllowed, Count: 3},
		{Kind: "network", Detail: "GET localhost:8080 refused: a private address", Count: 1},
	}}
	got := strings.Join(notes(res, &api.RunRequest{}), "\n")
	for _, want := range []string{
		"cellblock: network denied: CONNECT evil.example:443 refused: evil.example:443 is not in the network allowlist (api.example.org:443) (3 times)",
		"cellblock: network denied: GET localhost:8080 refused: a private address",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("notes lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "(1 times)") {
		t.Errorf("a single denial counted:\n%s", got)
	}
}

func TestDescribeInvalidNetwork(t *testing.T) {
	req := &api.RunRequest{Code: "pass", Network: &api.Network{Allow: []string{"ok.example:443", "bad"}}}
	e := req.Validate()
	if got := describeInvalid(e, req, "-c"); !strings.HasPrefix(got, `--allow-net "bad": `) {
		t.Errorf("describeInvalid = %q", got)
	}
	e = api.Errorf(api.ErrOverLimit, "network", "beyond what this cellblockd allows")
	if got := describeInvalid(e, req, "-c"); got != "--allow-net: beyond what this cellblockd allows" {
		t.Errorf("describeInvalid = %q", got)
	}
}

func TestInfoShowsNetworkPolicy(t *testing.T) {
	var b bytes.Buffer
	writeInfo(&b, &api.Info{Network: "none unless asked", NetworkPolicy: &api.NetworkInfo{
		Allow: []string{"*.example.org:443"}, MaxConnections: 32, MaxConnectionsTotal: 1024, MaxBytes: 1 << 30,
		Proxy: "http://127.0.0.1:3128", Builds: []string{"pypi.org:443", "files.pythonhosted.org:443"},
	}})
	for _, want := range []string{
		"--allow-net within: *.example.org:443 (private addresses refused)",
		"32 connections at once, 1024 in all",
		"dependency builds reach only: pypi.org:443, files.pythonhosted.org:443",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("info lacks %q:\n%s", want, b.String())
		}
	}
}
