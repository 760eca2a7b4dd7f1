package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/flagvalue"
)

// sessionCmd is "cellblock session": interpreters that keep their state
// between runs.
type sessionCmd struct{}

func (sessionCmd) name() string { return "session" }
func (sessionCmd) synopsis() string {
	return "create, list, show and delete sessions: interpreters that keep their state"
}
func (sessionCmd) usage() string {
	return `Usage:
  cellblock session new [flags]
  cellblock session ls [--json]
  cellblock session show [--json] ID
  cellblock session rm ID [ID...]
  cellblock session cp LOCAL ID:PATH
  cellblock session cp ID:PATH LOCAL

A session is a sandbox whose Python interpreter stays alive between runs,
keeping its globals, its imports and the files in /work. Run code in it
with 'cellblock run --session ID' (--cell shows values) or interactively
with 'cellblock repl --session ID'. It ends after its idle timeout without
a run, when deleted, or when cellblockd restarts. A run that kills its
interpreter (out of memory, a crash) leaves it "lost": it refuses runs
until it is deleted. A session is private to the user who created it.

  new   create a session and print its id alone on standard output
  ls    list your sessions
  show  describe one: state, runs, times, limits and its variables
  rm    delete sessions, stopping a run in progress in them
  cp    copy a file into a session's /work (between its runs) or out of
        it; PATH is relative to /work, LOCAL "-" is standard input or
        output, and a LOCAL directory gets the file's name:
          cellblock session cp sales.csv $id:data/sales.csv
          cellblock session cp $id:out/chart.png .

Flags of new (they fix the session for all its runs; unset ones take the
daemon's defaults, see 'cellblock info'):
  --python VERSION         interpreter to use, by version prefix: 3.12
  --with REQUIREMENT       add a dependency (repeatable): --with pandas
  --env KEY=VALUE          set a variable (repeatable); a bare KEY copies
                           its value from this environment
  --memory SIZE            memory limit of the whole session: 512M, 1.5G
  --pids N                 most processes and threads at once
  --cpus N                 CPU quota in cores: 0.5, 2
  --tmp SIZE               size of each of /tmp, /work and /dev/shm
  --allow-net HOST:PORT    let its runs reach HOST:PORT through cellblockd's
                           network proxy (repeatable), as in 'cellblock run'
  --secret NAME            let its runs use the daemon's secret NAME
                           (repeatable), as in 'cellblock run'
  --idle-timeout DURATION  end the session after this long without a run:
                           30m, 1h (default 10m, at most the daemon's
                           maximum)

Flags of every subcommand:
  --json           print the daemon's answer as one JSON object (new: the
                   whole session, not just its id)
  --socket PATH    the daemon's socket (else $CELLBLOCK_SOCKET, else
                   /run/cellblock/cellblockd.sock)

Exit status: 0 when done; 125 when cellblockd refused (an unknown or
expired session: session_not_found) or could not be reached; 2 for a bad
command line.
`
}

func (c sessionCmd) main(ctx context.Context, inv *invocation, args []string) int {
	if len(args) == 0 {
		return inv.usageError(c, "missing subcommand: new, ls, show, rm or cp")
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "new":
		return c.create(ctx, inv, args)
	case "ls", "list":
		return c.list(ctx, inv, args)
	case "show":
		return c.show(ctx, inv, args)
	case "rm":
		return c.remove(ctx, inv, args)
	case "cp":
		return c.copy(ctx, inv, args)
	case "-h", "--help", "help":
		fmt.Fprint(inv.stdout, c.usage())
		return exitOK
	default:
		return inv.usageError(c, "unknown subcommand %q: want new, ls, show, rm or cp", sub)
	}
}

// sessionFlagNames are the flags sessionFlags defines.
var sessionFlagNames = append(slices.Clone(jailFlagNames), "idle-timeout")

// sessionFlags defines the flags of session new (and of repl without
// --session) on fs, storing into req.
func (inv *invocation) sessionFlags(fs *flag.FlagSet, req *api.SessionRequest) {
	inv.addJailFlags(fs, sessionJail(req))
	fs.Var(flagvalue.Duration{P: &req.IdleTimeoutMs}, "idle-timeout", "")
}

// checkSessionRequest validates req before it is sent, in the terms of
// the command line.
func checkSessionRequest(req *api.SessionRequest) error {
	e := req.Validate()
	if e == nil {
		return nil
	}
	if e.Field == "idle_timeout_ms" {
		return fmt.Errorf("--idle-timeout: %s", e.Message)
	}
	return fmt.Errorf("%s", describeInvalid(e, req.AsRun(), ""))
}

func (c sessionCmd) create(ctx context.Context, inv *invocation, args []string) int {
	fs := inv.newFlagSet("session new")
	var req api.SessionRequest
	inv.sessionFlags(fs, &req)
	asJSON := fs.Bool("json", false, "")
	if st := inv.parse(c, fs, args); st >= 0 {
		return st
	}
	if fs.NArg() > 0 {
		return inv.usageError(c, "session new takes no arguments, only flags: unexpected %q", fs.Arg(0))
	}
	if err := checkSessionRequest(&req); err != nil {
		return inv.usageError(c, "%v", err)
	}
	s, err := inv.newClient().CreateSession(ctx, &req)
	if err != nil {
		return inv.failure(ctx, err)
	}
	if *asJSON {
		return inv.printJSON(s)
	}
	fmt.Fprintln(inv.stdout, s.ID)
	return exitOK
}

func (c sessionCmd) list(ctx context.Context, inv *invocation, args []string) int {
	fs := inv.newFlagSet("session ls")
	asJSON := fs.Bool("json", false, "")
	if st := inv.parse(c, fs, args); st >= 0 {
		return st
	}
	if fs.NArg() > 0 {
		return inv.usageError(c, "session ls takes no arguments")
	}
	list, err := inv.newClient().Sessions(ctx)
	if err != nil {
		return inv.failure(ctx, err)
	}
	if *asJSON {
		return inv.printJSON(list)
	}
	writeSessionList(inv.stdout, list, time.Now())
	return exitOK
}

func (c sessionCmd) show(ctx context.Context, inv *invocation, args []string) int {
	fs := inv.newFlagSet("session show")
	asJSON := fs.Bool("json", false, "")
	if st := inv.parse(c, fs, args); st >= 0 {
		return st
	}
	if fs.NArg() != 1 {
		return inv.usageError(c, "session show needs one session ID (see 'cellblock session ls')")
	}
	s, err := inv.newClient().Session(ctx, fs.Arg(0))
	if err != nil {
		return inv.failure(ctx, err)
	}
	if *asJSON {
		return inv.printJSON(s)
	}
	writeSession(inv.stdout, s, time.Now())
	return exitOK
}

// remove deletes every session named, going on past one that fails, and
// prints the id of each one deleted.
func (c sessionCmd) remove(ctx context.Context, inv *invocation, args []string) int {
	fs := inv.newFlagSet("session rm")
	if st := inv.parse(c, fs, args); st >= 0 {
		return st
	}
	if fs.NArg() == 0 {
		return inv.usageError(c, "session rm needs a session ID (see 'cellblock session ls')")
	}
	cl := inv.newClient()
	status := exitOK
	for _, id := range fs.Args() {
		if err := cl.DeleteSession(ctx, id); err != nil {
			if st := inv.failure(ctx, err); ctx.Err() != nil {
				return st
			}
			status = exitFailed
			continue
		}
		fmt.Fprintln(inv.stdout, id)
	}
	return status
}

// printJSON writes v as one line of JSON on stdout.
func (inv *invocation) printJSON(v any) int {
	enc := json.NewEncoder(inv.stdout)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		fmt.Fprintf(inv.stderr, "cellblock: write answer: %v\n", err)
		return exitFailed
	}
	return exitOK
}

// writeSessionList prints the sessions as a table, as of now.
func writeSessionList(w io.Writer, list *api.SessionList, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "ID\tSTATE\tRUNS\tEXPIRES IN\tMEMORY\tPYTHON\n")
	for i := range list.Sessions {
		s := &list.Sessions[i]
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", s.ID, sessionState(s), s.ExecutionCount,
			formatUntil(s.ExpiresAt.Sub(now)), sessionMemory(s), orDash(s.Python))
	}
	tw.Flush()
	fmt.Fprintf(w, "%d session(s)\n", len(list.Sessions))
}

// writeSession prints one session, as of now.
func writeSession(w io.Writer, s *api.Session, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	when := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.Local().Format(time.DateTime)
	}
	fmt.Fprintf(tw, "id\t%s\n", s.ID)
	fmt.Fprintf(tw, "state\t%s\n", sessionState(s))
	fmt.Fprintf(tw, "runs\t%d\n", s.ExecutionCount)
	fmt.Fprintf(tw, "python\t%s\n", orDash(s.Python))
	fmt.Fprintf(tw, "created\t%s (%s ago)\n", when(s.CreatedAt), formatAge(now.Sub(s.CreatedAt)))
	if s.ExecutionCount > 0 {
		fmt.Fprintf(tw, "last used\t%s (%s ago)\n", when(s.LastUsedAt), formatAge(now.Sub(s.LastUsedAt)))
	} else {
		fmt.Fprintf(tw, "last used\tnever\n")
	}
	fmt.Fprintf(tw, "expires\t%s (%s)\n", when(s.ExpiresAt), formatExpiry(s.ExpiresAt.Sub(now)))
	fmt.Fprintf(tw, "idle timeout\t%s\n", formatMillis(s.IdleTimeoutMs))
	fmt.Fprintf(tw, "memory\t%s\n", sessionMemory(s))
	if l := s.Limits; l != nil {
		fmt.Fprintf(tw, "limits\tmemory %s, pids %d, cpus %s, tmp %s\n",
			formatSize(l.MemoryBytes), l.Pids, formatCPUs(l.CPUs), formatSize(l.TmpBytes))
	}
	if s.Environment != nil {
		fmt.Fprintf(tw, "dependencies\t%s\n", packageList(s.Environment.Packages))
	}
	if s.Network.Wants() {
		fmt.Fprintf(tw, "network\t%s\n", strings.Join(s.Network.Allow, ", "))
	}
	fmt.Fprintf(tw, "owner\tuid %d\n", s.OwnerUID)
	tw.Flush()

	if len(s.Variables) == 0 {
		fmt.Fprintf(w, "\nvariables: none\n")
		return
	}
	more := ""
	if s.VariablesTruncated {
		more = fmt.Sprintf("; more not shown, past the first %d", api.MaxSessionVariables)
	}
	fmt.Fprintf(w, "\nvariables (%d%s):\n", len(s.Variables), more)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "NAME\tTYPE\tREPR\n")
	for _, v := range s.Variables {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", printable(v.Name), printable(v.Type), printable(v.Repr))
	}
	tw.Flush()
}

// sessionState is a session's state, and "busy" while a run is in it.
func sessionState(s *api.Session) string {
	if s.Busy {
		return s.State + ", busy"
	}
	return s.State
}

// sessionMemory is the memory a session holds, and its limit when known.
func sessionMemory(s *api.Session) string {
	if s.Limits != nil && s.Limits.MemoryBytes > 0 {
		return formatSize(s.MemoryBytes) + " of " + formatSize(s.Limits.MemoryBytes)
	}
	return formatSize(s.MemoryBytes)
}

// formatUntil renders the time left until an expiry: "9m58s", "expired".
func formatUntil(d time.Duration) string {
	if d <= 0 {
		return "expired"
	}
	return formatAge(d)
}

// formatExpiry is formatUntil in a sentence: "in 9m58s", "expired".
func formatExpiry(d time.Duration) string {
	if d <= 0 {
		return "expired"
	}
	return "in " + formatAge(d)
}

// formatAge renders a duration to the second, dropping zero trailing
// units: "10m", "1h2m3s", "0s".
func formatAge(d time.Duration) string {
	d = max(d.Round(time.Second), 0)
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printable escapes what would upset a table or a terminal in text that
// comes from the sandboxed code (a variable's repr): control characters,
// newlines and tabs are shown as Go escapes.
func printable(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) && r != ' ' }) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unicode.IsPrint(r) || r == ' ' {
			b.WriteRune(r)
			continue
		}
		q := strconv.QuoteRune(r)
		b.WriteString(q[1 : len(q)-1])
	}
	return b.String()
}
