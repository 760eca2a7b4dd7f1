package daemon

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/cellblock/cellblock/internal/config"
	"github.com/cellblock/cellblock/rootfs"
)

// rootfsMain is `cellblockd rootfs import|ls`.
func rootfsMain(args []string, stdout, stderr io.Writer) int {
	usage := "usage: cellblockd rootfs import --python PATH [--state-dir DIR]\n       cellblockd rootfs ls [--state-dir DIR]\n"
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	fs := flag.NewFlagSet("cellblockd rootfs "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	stateDir := fs.String("state-dir", config.DefaultStateDir, "the daemon's state directory")
	python := fs.String("python", "", "interpreter to import (a path; shims are resolved)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	store, err := rootfs.Open(filepath.Join(*stateDir, "rootfs"))
	if err != nil {
		fmt.Fprintf(stderr, "cellblockd: %v\n", err)
		return 1
	}
	switch args[0] {
	case "import":
		if *python == "" {
			fmt.Fprint(stderr, "cellblockd rootfs import: --python PATH is required\n")
			return 2
		}
		// Interrupted, the build removes its partial tree before exiting.
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		py, err := store.Import(ctx, *python)
		if err != nil {
			fmt.Fprintf(stderr, "cellblockd: import %s: %v\n", *python, err)
			return 1
		}
		fmt.Fprintf(stdout, "imported %s (Python %s) from %s\n", py.ID, py.Version, py.Source)
	case "ls":
		pys, err := store.List()
		if err != nil {
			fmt.Fprintf(stderr, "cellblockd: %v\n", err)
			return 1
		}
		for _, p := range pys {
			def := ""
			if p.Default {
				def = " (default)"
			}
			fmt.Fprintf(stdout, "%s\t%s\t%s%s\n", p.ID, p.Version, p.Source, def)
		}
	default:
		fmt.Fprint(stderr, usage)
		return 2
	}
	return 0
}
