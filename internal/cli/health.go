package cli

import (
	"context"
	"fmt"
)

// healthCmd is "cellblock health".
type healthCmd struct{}

func (healthCmd) name() string     { return "health" }
func (healthCmd) synopsis() string { return "check that the daemon answers" }
func (healthCmd) usage() string {
	return `Usage:
  cellblock health [--socket PATH]

Asks the daemon whether it is healthy. Prints "ok" and exits 0 when it is;
otherwise says why and exits 1.

Flags:
  --socket PATH   the daemon's socket (else $CELLBLOCK_SOCKET, else
                  /run/cellblock/cellblockd.sock)
`
}

func (c healthCmd) main(ctx context.Context, inv *invocation, args []string) int {
	fs := inv.newFlagSet("health")
	if st := inv.parse(c, fs, args); st >= 0 {
		return st
	}
	if fs.NArg() > 0 {
		return inv.usageError(c, "unexpected argument %q", fs.Arg(0))
	}
	if err := inv.newClient().Health(ctx); err != nil {
		if st := inv.failure(ctx, err); st != exitFailed {
			return st
		}
		return 1
	}
	fmt.Fprintln(inv.stdout, "ok")
	return exitOK
}
