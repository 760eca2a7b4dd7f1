// Package cli is the cellblock command-line client: it parses the command
// line, talks to cellblockd through package client and turns what comes back
// into output and an exit status.
//
// One file per subcommand; each file defines a *command and the commands
// table below lists them. The package never calls os.Exit (Main returns the
// status for cmd/cellblock to exit with), stays free of cgo and needs no
// privileges: everything privileged happens in the daemon.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// command is one subcommand of cellblock.
type command interface {
	// name is the word that selects the command.
	name() string
	// synopsis is the one-line description in the command list.
	synopsis() string
	// usage is the full help text printed by "cellblock help NAME" and -h.
	usage() string
	// main runs the command with the arguments after its name and returns
	// the exit status.
	main(ctx context.Context, inv *invocation, args []string) int
}

// commands lists the subcommands in the order help shows them. Adding one
// is a new file defining its command type plus its line here.
var commands = []command{
	runCmd{},
	sessionCmd{},
	replCmd{},
	envCmd{},
	infoCmd{},
	healthCmd{},
	versionCmd{},
	helpCmd{},
}

func lookupCommand(name string) command {
	for _, c := range commands {
		if c.name() == name {
			return c
		}
	}
	return nil
}

// invocation is what one execution of the command line works with: its
// standard streams, its environment and the flags common to all commands.
type invocation struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	// lookupEnv reads the client's environment (for --env KEY).
	lookupEnv func(string) (string, bool)
	// socket is the --socket flag, empty when not given.
	socket string
	// takeInterrupts, when set, hands Ctrl-C to an interactive command:
	// from the call until release, SIGINT no longer cancels the
	// command's context but is sent on ch (one at most waits there).
	// Main sets it; tests set their own or none.
	takeInterrupts func() (ch <-chan struct{}, release func())
}

// Main runs the cellblock command line. args excludes the program name.
// It returns the process exit status; see exitcode.go for the table.
//
// SIGINT and SIGTERM cancel the request in flight, which makes the daemon
// kill the run; a second signal gets the default behaviour.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	sig := watchSignals(context.Background())
	defer sig.stop()
	inv := &invocation{stdin: stdin, stdout: stdout, stderr: stderr, lookupEnv: os.LookupEnv,
		takeInterrupts: sig.takeInterrupts}
	return inv.main(sig.ctx, args)
}

// interrupted is the cancellation cause when a signal arrived.
type interrupted struct{ sig os.Signal }

func (e *interrupted) Error() string { return e.sig.String() + " received" }

// signals cancels ctx with an *interrupted cause on the first SIGINT or
// SIGTERM, except for the SIGINTs an interactive command takes for itself
// (takeInterrupts).
type signals struct {
	ctx  context.Context
	stop func()

	// ready is closed once the signals are watched.
	ready chan struct{}

	mu sync.Mutex
	// taken receives SIGINT while a command has taken it; nil otherwise.
	taken chan struct{}
}

// watchSignals starts watching for SIGINT and SIGTERM; stop ends it.
//
// The watching starts in a goroutine of its own: the first signal.Notify
// of a process sets up the runtime's signal handling (a locked thread),
// which took 0.2 ms of the command's start, and the command need not wait
// for it. Until then the two signals end the client as they would any
// program, which also ends a run it had started (the daemon sees its
// caller gone).
func watchSignals(parent context.Context) *signals {
	ctx, cancel := context.WithCancelCause(parent)
	s := &signals{ctx: ctx, ready: make(chan struct{})}
	go func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
		close(s.ready)
		// Restores the default actions, so that a second signal ends
		// the client at once.
		defer signal.Stop(ch)
		for {
			select {
			case sig := <-ch:
				if sig == os.Interrupt && s.handOver() {
					continue
				}
				cancel(&interrupted{sig: sig})
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	s.stop = func() { cancel(nil) }
	return s
}

// handOver passes a SIGINT to the command that took it, if one did.
func (s *signals) handOver() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.taken == nil {
		return false
	}
	select {
	case s.taken <- struct{}{}:
	default: // one is waiting already
	}
	return true
}

// takeInterrupts routes SIGINT to the returned channel instead of
// cancelling ctx, until release is called.
func (s *signals) takeInterrupts() (<-chan struct{}, func()) {
	<-s.ready // from here a SIGINT is the command's, never the default's
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	s.taken = ch
	s.mu.Unlock()
	return ch, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.taken == ch {
			s.taken = nil
		}
	}
}

func (inv *invocation) main(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("cellblock", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&inv.socket, "socket", "", "")
	showVersion := fs.Bool("version", false, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(inv.stdout, mainUsage())
			return exitOK
		}
		fmt.Fprintf(inv.stderr, "cellblock: %v\n%s", err, mainUsage())
		return exitUsage
	}
	if *showVersion {
		return versionCmd{}.main(ctx, inv, nil)
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fmt.Fprint(inv.stderr, mainUsage())
		return exitUsage
	}
	cmd := lookupCommand(rest[0])
	if cmd == nil {
		fmt.Fprintf(inv.stderr, "cellblock: unknown command %q\n\n%s", rest[0], mainUsage())
		return exitUsage
	}
	return cmd.main(ctx, inv, rest[1:])
}

// newFlagSet returns a flag set for a subcommand that reports nothing
// itself (parse reports) and accepts --socket after the command name too.
func (inv *invocation) newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("cellblock "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&inv.socket, "socket", inv.socket, "")
	return fs
}

// parse parses a subcommand's flags. It returns -1 to go on, or the exit
// status when help was asked for (0) or the flags were wrong (2), having
// printed what is needed.
func (inv *invocation) parse(cmd command, fs *flag.FlagSet, args []string) int {
	err := fs.Parse(args)
	switch {
	case err == nil:
		return -1
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(inv.stdout, cmd.usage())
		return exitOK
	default:
		return inv.usageError(cmd, "%v", err)
	}
}

// usageError reports a bad command line for cmd and returns exitUsage.
func (inv *invocation) usageError(cmd command, format string, args ...any) int {
	fmt.Fprintf(inv.stderr, "cellblock %s: %s\nRun 'cellblock %s -h' for usage.\n",
		cmd.name(), fmt.Sprintf(format, args...), cmd.name())
	return exitUsage
}

func mainUsage() string {
	s := `cellblock runs Python programs in cellblockd's sandbox.

Usage:
  cellblock [--socket PATH] COMMAND [ARGS...]

Commands:
`
	for _, c := range commands {
		s += fmt.Sprintf("  %-9s %s\n", c.name(), c.synopsis())
	}
	s += `
The daemon's socket is --socket PATH, else $CELLBLOCK_SOCKET, else
/run/cellblock/cellblockd.sock.

Run 'cellblock help COMMAND' or 'cellblock COMMAND -h' for a command's flags.
`
	return s
}

// helpCmd is "cellblock help [COMMAND]".
type helpCmd struct{}

func (helpCmd) name() string     { return "help" }
func (helpCmd) synopsis() string { return "show help for cellblock or one of its commands" }
func (helpCmd) usage() string {
	return `Usage:
  cellblock help [COMMAND]
`
}

func (h helpCmd) main(_ context.Context, inv *invocation, args []string) int {
	switch {
	case len(args) == 0:
		fmt.Fprint(inv.stdout, mainUsage())
		return exitOK
	case len(args) > 1:
		return inv.usageError(h, "want at most one COMMAND")
	}
	cmd := lookupCommand(args[0])
	if cmd == nil {
		fmt.Fprintf(inv.stderr, "cellblock help: unknown command %q\n\n%s", args[0], mainUsage())
		return exitUsage
	}
	fmt.Fprint(inv.stdout, cmd.usage())
	return exitOK
}
