// Command cellblockd is the privileged daemon that runs untrusted Python in
// jails; see package daemon.
package main

import (
	"os"

	"github.com/cellblock/cellblock/internal/daemon"
	"github.com/opencontainers/runc/libcontainer"
	_ "github.com/opencontainers/runc/libcontainer/nsenter"
)

func init() {
	// libcontainer re-executes this binary as "init" inside the new
	// namespaces; nsenter's constructor has already run by now.
	if len(os.Args) > 1 && os.Args[1] == "init" {
		libcontainer.Init()
	}
}

func main() {
	os.Exit(daemon.Main(os.Args[1:], os.Stdout, os.Stderr))
}
