// Command cellblock is the command-line client of cellblockd: it runs
// Python programs in the daemon's sandbox. All of it is in package cli.
package main

import (
	"os"

	"github.com/cellblock/cellblock/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
