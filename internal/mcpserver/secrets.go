package mcpserver

import (
	"fmt"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/cellblock/cellblock/internal/api"
)

// Secrets for run_python. cellblock-mcp's --secret NAME gives every run
// (and session) the daemon's secret NAME: the code finds a placeholder in
// os.environ["NAME"], and the daemon's proxy puts the real value in its
// place in HTTPS requests to the secret's hosts. The model is told the
// names, so that it writes code that reads them; the daemon decides who
// may use which (cellblock-mcp's uid must be granted them).

// secretsText is run_python's line on the secrets its code may use.
func secretsText(names []string, info *api.Info) string {
	var list []string
	for _, n := range names {
		item := fmt.Sprintf("os.environ[%q]", n)
		if info != nil {
			for _, s := range info.Secrets {
				if s.Name == n && len(s.Hosts) > 0 {
					item += " (for " + strings.Join(s.Hosts, ", ") + ")"
				}
			}
		}
		list = append(list, item)
	}
	return "Credentials: " + strings.Join(list, ", ") + " hold" + map[bool]string{true: "s", false: ""}[len(names) == 1] +
		" a token the code can use as it is, in an Authorization header (\"Bearer ...\", \"token ...\", or the password of a URL such as https://user:TOKEN@host/) or a URL's query, in HTTPS requests to the service it belongs to, which the code may then reach. " +
		"The sandbox keeps the real value outside and puts it in those requests only: printed or saved, it shows a placeholder, and a request that carries it anywhere else, or over plain http://, is refused and listed in \"denials\". Never ask the user for these credentials, and do not hard-code tokens."
}

// withSecrets adds the secrets' line to run_python's description.
func withSecrets(t mcp.Tool, info *api.Info, names []string) mcp.Tool {
	if len(names) == 0 {
		return t
	}
	const anchor = "\nWhat the sandbox allows and forbids:\n"
	t.Description = strings.Replace(t.Description, anchor, anchor+"- "+secretsText(names, info)+"\n", 1)
	return t
}
