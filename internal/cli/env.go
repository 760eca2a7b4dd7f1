package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/flagvalue"
)

// envCmd is "cellblock env": the daemon's cached dependency environments.
type envCmd struct{}

func (envCmd) name() string     { return "env" }
func (envCmd) synopsis() string { return "list, build and delete cached dependency environments" }
func (envCmd) usage() string {
	return `Usage:
  cellblock env ls [--json]
  cellblock env build [--json] [--python VERSION] [--preload MODULES | --no-preload]
                      --with REQUIREMENT [--with ...]
  cellblock env rm [--json] ID [ID...]
  cellblock env prune [--json]

cellblockd installs a run's dependencies (--with, or the script's PEP 723
metadata) once into a read-only environment and reuses it for every run
with the same requirements on the same Python. These commands manage that
cache.

  ls      list the environments, most recently used first
  build   build the environment of the given requirements ahead of the
          runs that need it (or find it), and print its id
  rm      delete environments by id (refused while a run uses one)
  prune   delete every environment no run uses now

Flags:
  --with REQUIREMENT   a requirement, as in 'cellblock run --with'
                       (repeatable); plain arguments after the flags count
                       too
  --python VERSION     the interpreter the environment is for: 3.12
  --preload MODULES    modules that prestarted jails of the environment
                       import while they wait for a run, so that the run's
                       own import of them is free: pandas,numpy (a comma
                       list, repeatable; dotted names such as
                       matplotlib.pyplot). Replaces the environment's list;
                       without it the list stays as it is. Imported before
                       the request, with the jail's environment variables,
                       not the run's (see docs/usage.md, "Preloaded imports")
  --no-preload         clear the environment's preload list
  --json               print the daemon's answer as one JSON object
  --socket PATH        the daemon's socket (else $CELLBLOCK_SOCKET, else
                       /run/cellblock/cellblockd.sock)
`
}

func (c envCmd) main(ctx context.Context, inv *invocation, args []string) int {
	if len(args) == 0 {
		return inv.usageError(c, "missing subcommand: ls, build, rm or prune")
	}
	sub, args := args[0], args[1:]
	fs := inv.newFlagSet("env " + sub)
	asJSON := fs.Bool("json", false, "")
	var with, preload []string
	python := ""
	noPreload := false
	if sub == "build" {
		fs.Var(flagvalue.List{P: &with}, "with", "")
		fs.StringVar(&python, "python", "", "")
		fs.Var(moduleListValue{&preload}, "preload", "")
		fs.BoolVar(&noPreload, "no-preload", false, "")
	}
	switch sub {
	case "ls", "list", "build", "rm", "prune":
	case "-h", "--help", "help":
		fmt.Fprint(inv.stdout, c.usage())
		return exitOK
	default:
		return inv.usageError(c, "unknown subcommand %q: want ls, build, rm or prune", sub)
	}
	if st := inv.parse(c, fs, args); st >= 0 {
		return st
	}
	cl := inv.newClient()
	var answer any
	var err error
	switch sub {
	case "ls", "list":
		if fs.NArg() > 0 {
			return inv.usageError(c, "env ls takes no arguments")
		}
		var list *api.EnvList
		if list, err = cl.Envs(ctx); err == nil {
			answer = list
			if !*asJSON {
				writeEnvList(inv.stdout, list)
			}
		}
	case "build":
		with = append(with, fs.Args()...)
		if len(with) == 0 {
			return inv.usageError(c, "env build needs at least one --with REQUIREMENT")
		}
		if noPreload && preload != nil {
			return inv.usageError(c, "--preload and --no-preload together")
		}
		if noPreload {
			preload = []string{} // sent as [], which clears the list
		}
		req := &api.EnvBuildRequest{Dependencies: with, Python: python, Preload: preload}
		if e := req.Validate(); e != nil {
			return inv.usageError(c, "%s", describePreloadInvalid(e, req))
		}
		var res *api.EnvBuildResult
		if res, err = cl.BuildEnv(ctx, req); err == nil {
			answer = res
			if !*asJSON {
				fmt.Fprintln(inv.stdout, res.Environment.ID)
				how := "built"
				if res.Environment.CacheHit {
					how = "found cached"
				}
				fmt.Fprintf(inv.stderr, "cellblock: %s environment for Python %s in %s: %s\n",
					how, res.Python, formatMillis(res.DurationMs), packageList(res.Environment.Packages))
				if len(res.Preload) > 0 {
					fmt.Fprintf(inv.stderr, "cellblock: its prestarted jails preload %s\n", strings.Join(res.Preload, ", "))
				}
			}
		}
	case "rm":
		if fs.NArg() == 0 {
			return inv.usageError(c, "env rm needs an environment ID (see 'cellblock env ls')")
		}
		all := &api.EnvRemoveResult{Removed: []api.EnvInfo{}}
		for _, id := range fs.Args() {
			var res *api.EnvRemoveResult
			if res, err = cl.RemoveEnv(ctx, id); err != nil {
				break
			}
			all.Removed = append(all.Removed, res.Removed...)
			all.FreedBytes += res.FreedBytes
			if !*asJSON {
				fmt.Fprintln(inv.stdout, id)
			}
		}
		answer = all
	case "prune":
		if fs.NArg() > 0 {
			return inv.usageError(c, "env prune takes no arguments")
		}
		var res *api.EnvRemoveResult
		if res, err = cl.PruneEnvs(ctx); err == nil {
			answer = res
			if !*asJSON {
				for _, e := range res.Removed {
					fmt.Fprintln(inv.stdout, e.ID)
				}
				fmt.Fprintf(inv.stderr, "cellblock: removed %d environment(s), freed %s\n", len(res.Removed), formatSize(res.FreedBytes))
			}
		}
	}
	if err != nil {
		return inv.failure(ctx, err)
	}
	if *asJSON {
		enc := json.NewEncoder(inv.stdout)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(answer); err != nil {
			fmt.Fprintf(inv.stderr, "cellblock: write answer: %v\n", err)
			return exitFailed
		}
	}
	return exitOK
}

// writeEnvList prints the environments as a table.
func writeEnvList(w io.Writer, list *api.EnvList) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "ID\tPYTHON\tSIZE\tLAST USED\tIN USE\tPRELOAD\tPACKAGES\n")
	for _, e := range list.Envs {
		preload := "-"
		if len(e.Preload) > 0 {
			preload = strings.Join(e.Preload, ",")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", e.ID, e.Python, formatSize(e.SizeBytes),
			e.LastUsed.Local().Format(time.DateTime), e.InUse, preload, packageList(e.Packages))
	}
	tw.Flush()
	fmt.Fprintf(w, "%d environment(s), %s of %s\n", len(list.Envs), formatSize(list.TotalBytes), formatSize(list.BudgetBytes))
}

// packageList is "name==version, ..." or "-".
func packageList(pkgs []api.Package) string {
	if len(pkgs) == 0 {
		return "-"
	}
	s := make([]string, len(pkgs))
	for i, p := range pkgs {
		s[i] = p.Name + "==" + p.Version
	}
	return strings.Join(s, ", ")
}

// moduleListValue collects --preload: comma lists, repeatable. Empty
// entries are kept, for validation to name.
type moduleListValue struct{ list *[]string }

func (v moduleListValue) String() string {
	if v.list == nil {
		return ""
	}
	return strings.Join(*v.list, ",")
}

func (v moduleListValue) Set(s string) error {
	for _, m := range strings.Split(s, ",") {
		*v.list = append(*v.list, strings.TrimSpace(m))
	}
	return nil
}

// describePreloadInvalid is describeInvalid for env build, which also
// names a bad --preload entry.
func describePreloadInvalid(e *api.Error, req *api.EnvBuildRequest) string {
	if base, rest, ok := strings.Cut(e.Field, "["); ok && base == "preload" {
		what := "--preload"
		if i, err := strconv.Atoi(strings.TrimSuffix(rest, "]")); err == nil && i >= 0 && i < len(req.Preload) {
			what = fmt.Sprintf("--preload %q", req.Preload[i])
		}
		return what + ": " + e.Message
	}
	if e.Field == "preload" {
		return "--preload: " + e.Message
	}
	return describeInvalid(e, &api.RunRequest{Dependencies: req.Dependencies}, "")
}
