// Command cellblock-init is the pid 1 of every cellblock jail; see package
// jailinit. It is built statically without cgo and bind-mounted read-only
// into each jail by cellblockd.
package main

import (
	"os"

	"github.com/cellblock/cellblock/nsjail/jailinit"
)

func main() {
	os.Exit(jailinit.Main(os.Args[1:]))
}
