package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/client"
	"github.com/cellblock/cellblock/internal/flagvalue"
)

// replCmd is "cellblock repl": an interactive Python console whose code
// runs in a session.
type replCmd struct{}

func (replCmd) name() string     { return "repl" }
func (replCmd) synopsis() string { return "an interactive Python console backed by a session" }
func (replCmd) usage() string {
	return `Usage:
  cellblock repl [--keep] [--timeout DURATION] [session flags]
  cellblock repl --session ID [--timeout DURATION]

An interactive Python console, like python's own, whose code runs in a
session of cellblockd (see 'cellblock session'): variables and imports
stay from one input to the next. Without --session, repl creates a
session, with the flags of 'cellblock session new', prints its id, and
deletes it at exit unless --keep is given. A session given with
--session is kept.

">>> " asks for an input and "... " for more of it. As in Python's REPL,
an input is complete at the end of its line unless a bracket, a
triple-quoted string or a line-ending backslash is open; a compound
statement (if, for, while, def, class, with, try, async, a decorator, or
a first line ending in ':') goes on until an empty line. repl decides
this itself, without Python; Python then judges what is sent, and a
syntax error is Python's own.

Each input runs as a cell: its output is shown as it comes, the value of
a final expression as its repr (unless None), an uncaught exception as
its traceback. Its standard input is empty. The console ends with its
session: expired, deleted or lost (its interpreter died).

  Ctrl-D          leave (a block half typed is dropped; at the end of
                  input that is not a terminal, the last block runs first)
  exit(), quit()  leave, when typed alone as an input (exit and quit too);
                  code that raises SystemExit runs in the session like any
  Ctrl-C          stop the run in progress (the session stays), or drop
                  the input being typed

On a terminal, the line can be edited (arrows, Home, End, Ctrl-A, -E, -K,
-U, -W) and Up and Down recall earlier lines of this console. Otherwise
lines are read as they come; prompts go to standard error, as python -i
does.

Flags:
  --session ID         use this existing session
  --keep               keep the session repl creates at exit
  --timeout DURATION   wall-clock limit of each input's run (else the
                       daemon's default)
  -q                   print no banner
  --python VERSION, --with REQUIREMENT, --env KEY=VALUE, --memory SIZE,
  --pids N, --cpus N, --tmp SIZE, --allow-net HOST:PORT, --secret NAME,
  --idle-timeout DURATION
                       for the session repl creates, as in 'cellblock
                       session new'; not with --session
  --socket PATH        the daemon's socket (else $CELLBLOCK_SOCKET, else
                       /run/cellblock/cellblockd.sock)

Exit status: 0 when left with Ctrl-D or exit(); 125 when the session
could not be created or used, or ended; 143 for SIGTERM; 2 for a bad
command line.
`
}

// Console prompts, Python's.
const (
	ps1 = ">>> "
	ps2 = "... "
)

// settleTimeout bounds the wait, after Ctrl-C stopped a run, for the
// session to be free for the next.
const settleTimeout = 5 * time.Second

// exitInput is an input that leaves the console: exit() and quit() typed
// alone, and bare exit and quit, as Python 3.13's REPL takes them.
var exitInput = regexp.MustCompile(`^(exit|quit)(\(\s*\))?$`)

func (c replCmd) main(ctx context.Context, inv *invocation, args []string) int {
	fs := inv.newFlagSet("repl")
	var req api.SessionRequest
	inv.sessionFlags(fs, &req)
	id := fs.String("session", "", "")
	keep := fs.Bool("keep", false, "")
	quiet := fs.Bool("q", false, "")
	var timeoutMs int64
	fs.Var(flagvalue.Duration{P: &timeoutMs}, "timeout", "")
	if st := inv.parse(c, fs, args); st >= 0 {
		return st
	}
	if fs.NArg() > 0 {
		return inv.usageError(c, "unexpected argument %q", fs.Arg(0))
	}
	if err := checkSessionFlag(fs, *id, sessionFlagNames); err != nil {
		return inv.usageError(c, "%v", err)
	}
	if *id == "" {
		if err := checkSessionRequest(&req); err != nil {
			return inv.usageError(c, "%v", err)
		}
	}

	cl := inv.newClient()
	var s *api.Session
	var err error
	if *id != "" {
		s, err = cl.Session(ctx, *id)
	} else {
		s, err = cl.CreateSession(ctx, &req)
	}
	if err != nil {
		return inv.failure(ctx, err)
	}
	created := *id == ""
	if created {
		defer func() {
			if *keep {
				fmt.Fprintf(inv.stderr, "cellblock: session %s is kept: cellblock repl --session %s\n", s.ID, s.ID)
				return
			}
			// Also after SIGTERM cancelled ctx.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if err := cl.DeleteSession(dctx, s.ID); err != nil && !errors.Is(err, api.ErrSessionNotFound) {
				fmt.Fprintf(inv.stderr, "cellblock: delete session %s: %v\n", s.ID, err)
			}
		}()
	}
	if s.State == api.SessionLost {
		fmt.Fprintf(inv.stderr, "cellblock: session %s lost its interpreter; delete it (cellblock session rm %s) and start another\n", s.ID, s.ID)
		return exitFailed
	}

	con := &console{inv: inv, cl: cl, id: s.ID, timeoutMs: timeoutMs}
	if inv.takeInterrupts != nil {
		ints, release := inv.takeInterrupts()
		defer release()
		con.interrupts = ints
	}
	if f, ok := inv.stdin.(*os.File); ok {
		con.terminal = isTerminal(f.Fd())
	}
	in := startInput(inv.stdin)
	defer in.stop()
	con.lines = inv.lineReader(in)
	if !*quiet {
		con.banner(s, created, *keep)
	}
	return con.loop(ctx)
}

// lineReader picks how to read the console's lines: with the line
// editor when both standard input and standard error (the prompts) are a
// terminal that can be put in raw mode, else plainly.
func (inv *invocation) lineReader(in *consoleInput) lineReader {
	plain := &plainReader{in: in, out: inv.stderr}
	fin, ok1 := inv.stdin.(*os.File)
	ferr, ok2 := inv.stderr.(*os.File)
	if term, _ := inv.lookupEnv("TERM"); !ok1 || !ok2 || term == "dumb" {
		return plain
	}
	fd := fin.Fd()
	if !isTerminal(fd) || !isTerminal(ferr.Fd()) {
		return plain
	}
	restore, err := rawMode(fd)
	if err != nil {
		return plain
	}
	restore()
	return &lineEditor{in: in, out: inv.stderr, raw: func() (func(), error) { return rawMode(fd) }}
}

// console is one cellblock repl, working in one session.
type console struct {
	inv       *invocation
	cl        *client.Client
	id        string
	timeoutMs int64
	lines     lineReader
	// interrupts receives Ctrl-C; nil when the console has no signals.
	interrupts <-chan struct{}
	// terminal: standard input is a terminal, where a person types.
	terminal bool
}

func (c *console) banner(s *api.Session, created, keep bool) {
	python := "Python"
	if s.Python != "" {
		python += " " + s.Python
	}
	fate := "deleted at exit; --keep keeps it"
	switch {
	case !created:
		fate = fmt.Sprintf("%d runs so far; kept at exit", s.ExecutionCount)
	case keep:
		fate = "kept at exit"
	}
	fmt.Fprintf(c.inv.stderr, "cellblock repl: %s in session %s (%s)\n", python, s.ID, fate)
	fmt.Fprintf(c.inv.stderr, "Ctrl-D or exit() leaves; Ctrl-C stops a run.\n")
}

// loop reads inputs and runs them until the input ends, exit(), the
// session ends or ctx does, and returns the exit status.
func (c *console) loop(ctx context.Context) int {
	var buf []string
	for {
		prompt := ps1
		if len(buf) > 0 {
			prompt = ps2
		}
		line, err := c.lines.readLine(ctx, c.interrupts, prompt)
		switch {
		case errors.Is(err, errInterrupted):
			fmt.Fprint(c.inv.stderr, "\nKeyboardInterrupt\n")
			buf = nil
			continue
		case ctx.Err() != nil:
			fmt.Fprintln(c.inv.stderr)
			return interruptedStatus(ctx)
		case err != nil:
			// Ctrl-D, or the end of piped input: Python's REPL
			// moves to a new line. Piped input's last block, which
			// needs no empty line after it, runs first; one half
			// typed on a terminal is dropped, as Python does.
			fmt.Fprintln(c.inv.stderr)
			if src := strings.Join(buf, "\n"); !c.terminal && hasCode(src) && !exitInput.MatchString(strings.TrimSpace(src)) {
				if c.run(ctx, src) {
					return c.endStatus(ctx)
				}
			}
			return exitOK
		}
		if !utf8.ValidString(line) {
			fmt.Fprintln(c.inv.stderr, "cellblock: the input is not UTF-8 text; it is dropped")
			buf = nil
			continue
		}
		buf = append(buf, line)
		if !inputComplete(buf) {
			continue
		}
		// The empty line that ended a block is not part of it.
		for len(buf) > 1 && strings.TrimSpace(buf[len(buf)-1]) == "" {
			buf = buf[:len(buf)-1]
		}
		src := strings.Join(buf, "\n")
		buf = nil
		switch {
		case !hasCode(src):
			continue
		case exitInput.MatchString(strings.TrimSpace(src)):
			return exitOK
		}
		if c.run(ctx, src) {
			return c.endStatus(ctx)
		}
	}
}

// endStatus is the exit status when a run ended the console: the session
// ended, or ctx did.
func (c *console) endStatus(ctx context.Context) int {
	if ctx.Err() != nil {
		return interruptedStatus(ctx)
	}
	fmt.Fprintf(c.inv.stderr, "cellblock: the console ends with session %s\n", c.id)
	return exitFailed
}

// run runs one input in the session as a cell and shows what came of it.
// It reports whether the console must end: the session is gone or lost,
// or ctx ended.
func (c *console) run(ctx context.Context, code string) (end bool) {
	inv := c.inv
	// A Ctrl-C pressed before the run is not for it.
	select {
	case <-c.interrupts:
	default:
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var stopped atomic.Bool
	finished := make(chan struct{})
	go func() {
		select {
		case <-c.interrupts:
			stopped.Store(true)
			cancel()
		case <-finished:
		}
	}()
	req := &api.RunRequest{Code: code + "\n", Filename: "-", Mode: api.ModeCell, Session: c.id, TimeoutMs: c.timeoutMs}
	out := &liveOutput{stdout: inv.stdout, stderr: inv.stderr}
	res, err := c.cl.RunStream(runCtx, req, out.write)
	close(finished)
	switch {
	case ctx.Err() != nil:
		return true
	case err != nil && stopped.Load():
		// After the terminal's ^C, as at the prompt.
		fmt.Fprint(inv.stderr, "\nKeyboardInterrupt\n")
		return c.settle(ctx)
	case err != nil:
		inv.failure(ctx, err)
		return false
	}

	// A daemon that answered with one result sent no chunks.
	traceback := res.Exception != nil && res.Stderr == "" && !out.seen["stderr"]
	if !out.seen["stdout"] {
		out.write("stdout", res.Stdout)
	}
	if !out.seen["stderr"] {
		out.write("stderr", res.Stderr)
	}
	if traceback {
		out.write("stderr", res.Exception.Traceback)
	}
	if res.Value != nil {
		out.write("stdout", res.Value.Repr+"\n")
	}
	shown := *res
	shown.Display = nil
	ns := notes(&shown, req)
	for i, d := range res.Display {
		ns = append(ns, "cellblock: "+describeDisplay(i, d, "not shown here; cellblock run --json returns it"))
	}
	for _, n := range ns {
		if out.last != 0 && out.last != '\n' {
			n = "\n" + n
		}
		out.last = '\n'
		fmt.Fprintln(inv.stderr, n)
	}
	// The next prompt starts a line of its own.
	if out.last != 0 && out.last != '\n' {
		fmt.Fprintln(inv.stderr)
	}
	switch {
	case res.Error != nil:
		return errors.Is(res.Error, api.ErrSessionNotFound) || errors.Is(res.Error, api.ErrSessionLost)
	case res.Session != nil:
		return res.Session.State == api.SessionLost
	}
	return false
}

// settle waits, after Ctrl-C stopped a run, until the session is free for
// the next input, and reports whether the console must end because the
// session did not survive.
func (c *console) settle(ctx context.Context) (end bool) {
	deadline := time.Now().Add(settleTimeout)
	for {
		s, err := c.cl.Session(ctx, c.id)
		switch {
		case ctx.Err() != nil:
			return true
		case errors.Is(err, api.ErrSessionNotFound):
			c.inv.failure(ctx, err)
			return true
		case err != nil:
			c.inv.failure(ctx, err)
			return false
		case s.State == api.SessionLost:
			fmt.Fprintf(c.inv.stderr, "cellblock: session %s lost its interpreter when the run was stopped: its state is gone\n", c.id)
			return true
		case !s.Busy:
			return false
		case time.Now().After(deadline):
			fmt.Fprintf(c.inv.stderr, "cellblock: the stopped run has not ended after %s; the next input may find the session busy\n", formatAge(settleTimeout))
			return false
		}
		select {
		case <-ctx.Done():
			return true
		case <-time.After(20 * time.Millisecond):
		}
	}
}
