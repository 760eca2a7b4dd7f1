package mcpserver

import (
	"fmt"
	"slices"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/cellblock/cellblock/internal/api"
)

// Network egress for run_python. cellblock-mcp's --network-allow is the
// most the model may ask for; without it run_python has no network_allow
// parameter at all and its description says there is no network. The
// daemon holds every run to its own bound as well.

// parseNetworkAllow reads --network-allow patterns, which cellblock-mcp's
// main has checked already; an invalid one is left out.
func parseNetworkAllow(list []string) []api.NetPattern {
	var out []api.NetPattern
	for _, s := range list {
		if p, err := api.ParseNetPattern(s); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// patternsText lists patterns for the model.
func patternsText(ps []api.NetPattern) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}

// networkAllowText is run_python's line on the network when the model may
// ask for it.
func networkAllowText(allow []api.NetPattern) string {
	example := "api.example.org:443"
	for _, p := range allow {
		if p.Host != "" && !p.Subdomains {
			example = p.String()
			break
		}
	}
	return fmt.Sprintf(`Network only when asked: list in "network_allow" each host:port the code must reach, within what this server allows: %s ("*.example.org:443" means any name below example.org, not example.org itself). `+
		`The code then reaches exactly those over HTTP and HTTPS with urllib.request, requests or httpx (add the package to "dependencies") or pip, through a proxy the sandbox names in HTTP_PROXY and HTTPS_PROXY, with no setup in the code; nothing else: no DNS lookups, no raw sockets. `+
		`A connection to anything else fails with "403 cellblock refused ..." and is listed in the result's "denials". For example "network_allow": [%q] with code that calls urllib.request.urlopen("https://%s/").`,
		patternsText(allow), example, strings.TrimSuffix(strings.TrimSuffix(example, ":443"), ":80"))
}

// withNetwork fits run_python to the server's network bound: with one, a
// network_allow parameter and a description that says what may be asked;
// without one, a description that says there is no network, whatever the
// daemon would allow others.
func withNetwork(t mcp.Tool, info *api.Info, allow []api.NetPattern) mcp.Tool {
	line := "- " + networkText(info) + "\n"
	if len(allow) == 0 {
		t.Description = strings.Replace(t.Description, line, "- "+networkText(nil)+"\n", 1)
		return t
	}
	t.Description = strings.Replace(t.Description, line, "- "+networkAllowText(allow)+"\n", 1)
	t.Description = strings.Replace(t.Description, "while the program runs (no pip, no network)", "while the program runs", 1)
	t.RawInputSchema = mustJSON(runPythonInput(info, allow))
	return t
}

// runArgNames are the arguments run_python takes on this server.
func (h *handler) runArgNames() []string {
	if len(h.netAllow) == 0 {
		return runArgNames
	}
	return append(slices.Clone(runArgNames), "network_allow")
}

// networkRequest checks the call's network_allow against the server's
// bound and puts it in rr.
func (h *handler) networkRequest(a *runArgs, rr *api.RunRequest) error {
	if len(a.NetworkAllow) == 0 {
		return nil
	}
	if len(a.NetworkAllow) > api.MaxNetworkAllow {
		return fmt.Errorf(`"network_allow" has %d entries; the most is %d`, len(a.NetworkAllow), api.MaxNetworkAllow)
	}
	for _, s := range a.NetworkAllow {
		p, err := api.ParseNetPattern(s)
		if err != nil {
			return fmt.Errorf(`"network_allow" entry %.100q %v; write host:port, such as "api.github.com:443"`, s, err)
		}
		if !slices.ContainsFunc(h.netAllow, p.Within) {
			return fmt.Errorf(`"network_allow" entry %q is beyond what this server allows: %s`, p.String(), patternsText(h.netAllow))
		}
	}
	rr.Network = &api.Network{Allow: a.NetworkAllow}
	return nil
}

// networkNote is check_environment's word on what run_python may ask of
// the network here.
func networkNote(allow []api.NetPattern) string {
	if len(allow) == 0 {
		return "\n\nrun_python cannot ask for network on this server: every run has none."
	}
	return "\n\nrun_python's network_allow may ask for: " + patternsText(allow) + " (within what cellblockd allows)."
}

// denialsText lists what the sandbox refused the program, for the text
// of a result.
func denialsText(ds []api.Denial) string {
	if len(ds) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n\n--- denials: what the sandbox refused the program ---\n")
	for _, d := range ds {
		b.WriteString("- " + d.Detail)
		if d.Count > 1 {
			fmt.Fprintf(&b, " (%d times)", d.Count)
		}
		b.WriteString("\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// sameNetwork reports whether two allowlists are the same set.
func sameNetwork(a, b []string) bool {
	a, b = slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b))
	return slices.Equal(a, b)
}
