package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/cellblock/cellblock/internal/api"
)

// describeDenial is the note for something the sandbox refused the
// program, such as a connection outside its --allow-net list.
func describeDenial(d api.Denial) string {
	s := d.Kind + " denied: " + d.Detail
	if d.Count > 1 {
		s += fmt.Sprintf(" (%d times)", d.Count)
	}
	return s
}

// writeNetworkPolicy adds info's egress policy to the info table: what
// runs may ask for with --allow-net, the caps, and what dependency builds
// reach.
func writeNetworkPolicy(w io.Writer, p *api.NetworkInfo) {
	if p == nil {
		return
	}
	if len(p.Allow) > 0 {
		private := "refused"
		if p.AllowPrivate {
			private = "allowed"
		}
		fmt.Fprintf(w, "\t--allow-net within: %s (private addresses %s)\n", strings.Join(p.Allow, ", "), private)
		fmt.Fprintf(w, "\tper run: %d connections at once, %d in all, %s in all, through %s\n",
			p.MaxConnections, p.MaxConnectionsTotal, formatSize(p.MaxBytes), p.Proxy)
	}
	if len(p.Builds) > 0 {
		fmt.Fprintf(w, "\tdependency builds reach only: %s\n", strings.Join(p.Builds, ", "))
	} else {
		fmt.Fprintf(w, "\tdependency builds: no network\n")
	}
}

// writeSecrets adds the daemon's secrets to the info table (root sees
// them): the name --secret takes, the hosts each goes to and who may ask.
func writeSecrets(w io.Writer, list []api.SecretInfo) {
	for _, s := range list {
		who := "root"
		for _, uid := range s.AllowUIDs {
			who += fmt.Sprintf(", uid %d", uid)
		}
		fmt.Fprintf(w, "secret %s\tgoes to %s; --secret %s for %s\n", s.Name, strings.Join(s.Hosts, ", "), s.Name, who)
	}
}
