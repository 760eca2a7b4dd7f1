package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/cellblock/cellblock/internal/api"
)

// infoCmd is "cellblock info".
type infoCmd struct{}

func (infoCmd) name() string     { return "info" }
func (infoCmd) synopsis() string { return "describe the daemon: Python versions, isolation, limits" }
func (infoCmd) usage() string {
	return `Usage:
  cellblock info [--json] [--socket PATH]

Describes the daemon: its version, the Python versions it runs, how runs are
isolated, the default and maximum limits, and how busy it is.

Flags:
  --json          print the description as one JSON object
  --socket PATH   the daemon's socket (else $CELLBLOCK_SOCKET, else
                  /run/cellblock/cellblockd.sock)
`
}

func (c infoCmd) main(ctx context.Context, inv *invocation, args []string) int {
	fs := inv.newFlagSet("info")
	asJSON := fs.Bool("json", false, "")
	if st := inv.parse(c, fs, args); st >= 0 {
		return st
	}
	if fs.NArg() > 0 {
		return inv.usageError(c, "unexpected argument %q", fs.Arg(0))
	}
	info, err := inv.newClient().Info(ctx)
	if err != nil {
		return inv.failure(ctx, err)
	}
	if *asJSON {
		enc := json.NewEncoder(inv.stdout)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(info); err != nil {
			fmt.Fprintf(inv.stderr, "cellblock: write info: %v\n", err)
			return exitFailed
		}
		return exitOK
	}
	writeInfo(inv.stdout, info)
	return exitOK
}

// writeInfo prints a short human summary of info.
func writeInfo(w io.Writer, info *api.Info) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	yesNo := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	orNone := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	fmt.Fprintf(tw, "cellblockd\t%s\n", orNone(info.Version))
	fmt.Fprintf(tw, "python\t%s\n", orNone(api.PythonList(info.Pythons)))
	fmt.Fprintf(tw, "cgroups\t%s\n", orNone(info.CgroupMode))
	fmt.Fprintf(tw, "user namespace\t%s\n", yesNo(info.UserNamespace))
	fmt.Fprintf(tw, "seccomp\t%s\n", yesNo(info.Seccomp))
	fmt.Fprintf(tw, "network\t%s\n", orNone(info.Network))
	writeNetworkPolicy(tw, info.NetworkPolicy)
	writeSecrets(tw, info.Secrets)
	if info.Filesystem != "" {
		fmt.Fprintf(tw, "filesystem\t%s\n", info.Filesystem)
	}
	fmt.Fprintf(tw, "runs\t%d at once, %d more may wait (now %d running, %d waiting)\n",
		info.MaxConcurrent, info.QueueSize, info.Running, info.Queued)
	if f := info.Files; f != nil {
		fmt.Fprintf(tw, "files in	up to %d files, %s in all, put under /work (--file)\n", f.InCount, formatSize(f.InBytes))
		fmt.Fprintf(tw, "files out	up to %d files from /work/out, %s each, %s in all (--out)\n", f.OutCount, formatSize(f.OutFileBytes), formatSize(f.OutBytes))
		if f.StoreBytes > 0 {
			fmt.Fprintf(tw, "artifact store	%d files, %s of %s; each kept %s after its run\n", f.StoreFiles, formatSize(f.StoreUsedBytes), formatSize(f.StoreBytes), formatMillis(f.StoreTTLSeconds*1000))
		}
	}
	if d := info.Display; d != nil {
		fmt.Fprintf(tw, "rich output\tup to %d items of %s each, %s in all; reprs %s, tracebacks %s\n",
			d.Items, formatSize(int64(d.ItemBytes)), formatSize(int64(d.TotalBytes)), formatSize(int64(d.ReprBytes)), formatSize(int64(d.TracebackBytes)))
	}
	if info.Prestart > 0 {
		fmt.Fprintf(tw, "prestarted jails\t%d kept ready for runs on the default Python without dependencies (%d ready now)\n", info.Prestart, info.PrestartReady)
		if info.PrestartShapes > 0 {
			fmt.Fprintf(tw, "\tand one each for up to %d other shapes (another Python, dependencies, tmp size) that runs used lately (%d ready now)\n", info.PrestartShapes, info.PrestartShapesReady)
		}
	} else {
		fmt.Fprintf(tw, "prestarted jails\tnone: each jail is built when its request arrives\n")
	}
	if d := info.Dependencies; d != nil {
		src := "the installer's default index"
		if d.IndexURL != "" {
			src = "index " + d.IndexURL
		}
		if d.NoIndex {
			src = "no index"
		}
		if len(d.FindLinks) > 0 {
			src += ", find-links " + strings.Join(d.FindLinks, " ")
		}
		fmt.Fprintf(tw, "dependencies\t%s, %s\n", orNone(d.Installer), src)
		fmt.Fprintf(tw, "environment cache\t%d environments, %s of %s\n",
			d.CacheEntries, formatSize(d.CacheBytes), formatSize(d.CacheBudget))
	}
	fmt.Fprintf(tw, "\nlimit\tdefault\tmaximum\n")
	def, max := info.Defaults, info.Maxima
	fmt.Fprintf(tw, "timeout\t%s\t%s\n", formatMillis(def.TimeoutMs), formatMillis(max.TimeoutMs))
	fmt.Fprintf(tw, "memory\t%s\t%s\n", formatSize(def.MemoryBytes), formatSize(max.MemoryBytes))
	fmt.Fprintf(tw, "pids\t%d\t%d\n", def.Pids, max.Pids)
	fmt.Fprintf(tw, "cpus\t%s\t%s\n", formatCPUs(def.CPUs), formatCPUs(max.CPUs))
	fmt.Fprintf(tw, "output\t%s\t%s\n", formatSize(def.OutputBytes), formatSize(max.OutputBytes))
	fmt.Fprintf(tw, "tmp\t%s\t%s\n", formatSize(def.TmpBytes), formatSize(max.TmpBytes))
	writeToolCaps(tw, info.Tools)
	tw.Flush()
}
