package cli

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is the client's version. The build may set it with
// -ldflags "-X github.com/cellblock/cellblock/internal/cli.Version=v1.2.3";
// otherwise it comes from the module and VCS data Go records.
var Version = ""

// versionCmd is "cellblock version".
type versionCmd struct{}

func (versionCmd) name() string     { return "version" }
func (versionCmd) synopsis() string { return "print the client's version" }
func (versionCmd) usage() string {
	return `Usage:
  cellblock version

Prints the version of this client; 'cellblock info' shows the daemon's.
`
}

func (c versionCmd) main(_ context.Context, inv *invocation, args []string) int {
	fs := inv.newFlagSet("version")
	if st := inv.parse(c, fs, args); st >= 0 {
		return st
	}
	fmt.Fprintf(inv.stdout, "cellblock %s (%s)\n", version(), runtime.Version())
	return exitOK
}

func version() string {
	if Version != "" {
		return Version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	if v == "" || v == "(devel)" {
		v = "devel"
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" && v == "devel" {
		v += " " + rev + dirty
	}
	return v
}
