package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/flagvalue"
)

// runCmd is "cellblock run".
type runCmd struct{}

func (runCmd) name() string     { return "run" }
func (runCmd) synopsis() string { return "run a Python program in a fresh sandbox or a session" }
func (runCmd) usage() string {
	return `Usage:
  cellblock run [flags] FILE.py [ARGS...]
  cellblock run [flags] -c CODE [ARGS...]
  cellblock run [flags] - [ARGS...]            (code on standard input)

Runs a Python program in a fresh sandbox of cellblockd, or in a session's
interpreter with --session, and prints its standard output and error as
it runs. Flags come before FILE, -c CODE or -;
everything after those is the program's sys.argv[1:]. -- ends the flags.
Unset limits take the daemon's defaults (see 'cellblock info').
PEP 723 inline metadata (# /// script) in the code is honoured.

Flags:
  -c CODE              run CODE instead of a file
  --cell               run the code like a notebook cell: the value of its
                       last expression is printed (and returned in --json)
  --input NAME=JSON    bind NAME to a JSON value as a global before the code
                       runs (repeatable): --input n=3 --input 'cfg={"a": 1}'
  --timeout DURATION   wall-clock limit: 5s, 1m30s, 500ms, or seconds (2, 0.5)
  --memory SIZE        memory limit of the whole run: 128M, 1.5G, 512MiB
                       (units of 1024; a plain number is bytes)
  --pids N             most processes and threads at once
  --cpus N             CPU quota in cores: 0.5, 2
  --tmp SIZE           size of each of /tmp, /work (the working directory)
                       and /dev/shm: 256M
  --with REQUIREMENT   add a dependency, as in 'uv run --with' (repeatable):
                       --with requests --with 'rich>=13'
  --python VERSION     interpreter to use, by version prefix: 3.12
  --env KEY=VALUE      set a variable for the program (repeatable); a bare
                       KEY copies its value from this environment
  --allow-net HOST:PORT
                       let the program reach HOST:PORT over HTTP(S) through
                       cellblockd's proxy (repeatable): api.example.org:443,
                       *.example.org:443 for any name below example.org;
                       within what the daemon allows ('cellblock info').
                       Without it the program has no network at all
  --secret NAME        let the program use the daemon's secret NAME
                       (repeatable): os.environ["NAME"] holds a placeholder,
                       and cellblockd's proxy puts the real value in its
                       place in HTTPS requests to the secret's hosts (which
                       the program may then reach) and nowhere else; the
                       value never enters the sandbox. Which secrets exist
                       and who may use them is the operator's choice
  --session ID         run in that session's interpreter, which keeps its
                       globals, imports and /work from run to run (see
                       'cellblock session'); the session fixed --python,
                       --with, --env, --memory, --pids, --cpus, --tmp,
                       --allow-net and --secret when it was created: they
                       cannot be given here
  --tool NAME=COMMAND  let the code call cellblock.tools.NAME(**arguments)
                       (repeatable; with --session too): each call runs
                       COMMAND here, outside the sandbox, with /bin/sh -c,
                       the arguments as one JSON object on its standard
                       input; what it prints is the result (JSON, else a
                       string); a non-zero exit raises cellblock.ToolError
                       in the code with the end of its standard error. Its
                       environment is this one's, plus CELLBLOCK_TOOL=NAME
                       and CELLBLOCK_SOCKET; it is killed when the call's
                       time is up (the daemon's tool timeout, 30s by default)
  --tool-timeout DURATION  how long one tool call may take, within the
                       daemon's maximum (see 'cellblock info')
  --file SRC[:DEST]    put the local file SRC under /work before the code
                       runs, at DEST (default: SRC's name; a DEST ending
                       in / is a directory), text or binary (repeatable):
                       --file sales.csv --file img.png:data/
  --out DIR            save the files the program wrote under /work/out
                       into DIR (made if missing); without it they are
                       listed on stderr
  -i, --stdin          pass this command's standard input to the program
                       (read to the end before the run starts; at most 1 MiB)
  --json               print one JSON result object on stdout instead of the
                       output, and exit 0 whenever the run was carried out
  --socket PATH        the daemon's socket (else $CELLBLOCK_SOCKET, else
                       /run/cellblock/cellblockd.sock)

Exit status:
  the program's own exit status, or
  124  the timeout ended the run
  137  the memory limit ended the run
  125  the run could not be carried out: cellblockd refused it (with
       --session also: no such session, another run in it, or its
       interpreter lost), failed, or could not be reached
  130  interrupted by Ctrl-C (143 by SIGTERM); the run is stopped
    2  bad command line
  With --json: 0 when the run was carried out, 125 when not.
`
}

// defaultFilename is the script's name in the jail for files whose own
// name would not do.
const defaultFilename = "main.py"

// runOptions is cellblock run's parsed command line.
type runOptions struct {
	// req holds what the flags set: limits, dependencies, interpreter,
	// environment. Code, filename, args and stdin are filled in later.
	req api.RunRequest
	// code is the -c argument; codeSet tells -c '' from no -c.
	code    string
	codeSet bool
	// script is FILE, or "-" for code on stdin; empty with -c.
	script string
	// args are the program's arguments.
	args []string
	// json asks for the result object instead of the output.
	json bool
	// stdin passes the client's standard input to the program.
	stdin bool
	// tools are the --tool flags; toolTimeoutMs is --tool-timeout.
	tools         []cliTool
	toolTimeoutMs int64
	// files are the --file flags; out is --out DIR.
	files []fileSpec
	out   string
}

func (inv *invocation) runFlags(o *runOptions) *flag.FlagSet {
	fs := inv.newFlagSet("run")
	fs.Var(&codeValue{o}, "c", "")
	fs.Var(flagvalue.Duration{P: &o.req.TimeoutMs}, "timeout", "")
	inv.addJailFlags(fs, runJail(&o.req))
	fs.StringVar(&o.req.Session, "session", "", "")
	fs.BoolVar(&o.stdin, "i", false, "")
	fs.BoolVar(&o.stdin, "stdin", false, "")
	fs.BoolVar(&o.json, "json", false, "")
	fs.Var(modeValue{&o.req.Mode}, "cell", "")
	fs.Var(inputValue{&o.req.Inputs}, "input", "")
	fs.Var(toolValue{&o.tools}, "tool", "")
	fs.Var(flagvalue.Duration{P: &o.toolTimeoutMs}, "tool-timeout", "")
	fs.Var(fileValue{&o.files}, "file", "")
	fs.StringVar(&o.out, "out", "", "")
	return fs
}

var errNoProgram = errors.New("missing FILE, -c CODE or -")

// parseRun parses cellblock run's arguments. It returns flag.ErrHelp when
// help was asked for; other errors are a bad command line.
func (inv *invocation) parseRun(args []string) (*runOptions, error) {
	o := &runOptions{}
	fs := inv.runFlags(o)
	// As in python, -c CODE ends the flags: what follows is argv even
	// when it looks like a flag. The flag package would go on parsing,
	// so the arguments are cut after CODE first.
	head, rest := args, []string(nil)
	if n := endOfCode(fs, args); n >= 0 {
		head, rest = args[:n], args[n:]
	}
	if err := fs.Parse(head); err != nil {
		return nil, err
	}
	if err := checkSessionFlag(fs, o.req.Session, jailFlagNames); err != nil {
		return nil, err
	}
	if o.codeSet {
		o.args = rest
		return o, nil
	}
	pos := fs.Args()
	if len(pos) == 0 {
		return nil, errNoProgram
	}
	o.script, o.args = pos[0], pos[1:]
	return o, nil
}

// endOfCode returns the index just past "-c CODE" when -c is among the
// leading flags of args, or -1. It walks the flags as the flag package
// does and stops where that would stop.
func endOfCode(fs *flag.FlagSet, args []string) int {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || len(a) < 2 || a[0] != '-' {
			return -1
		}
		name := strings.TrimPrefix(a[1:], "-")
		name, _, hasValue := strings.Cut(name, "=")
		if name == "c" {
			if hasValue {
				return i + 1
			}
			return min(i+2, len(args))
		}
		f := fs.Lookup(name)
		if f == nil {
			return -1 // Parse reports it.
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); hasValue || ok && b.IsBoolFlag() {
			continue
		}
		i++ // the flag's value
	}
	return -1
}

func (c runCmd) main(ctx context.Context, inv *invocation, args []string) int {
	o, err := inv.parseRun(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(inv.stdout, c.usage())
		return exitOK
	case err != nil:
		return inv.usageError(c, "%v", err)
	}
	req, err := o.request(ctx, inv)
	if err != nil {
		if ctx.Err() != nil {
			return inv.failure(ctx, err)
		}
		return inv.usageError(c, "%v", err)
	}
	cl := inv.newClient()

	if o.json {
		res, err := o.carryOut(ctx, inv, cl, req, nil)
		if err != nil {
			return inv.failure(ctx, err)
		}
		if ctx.Err() != nil {
			return inv.failure(ctx, ctx.Err())
		}
		enc := json.NewEncoder(inv.stdout)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(res); err != nil {
			fmt.Fprintf(inv.stderr, "cellblock: write result: %v\n", err)
			return exitFailed
		}
		if st := o.saveOut(ctx, inv, cl, res); st >= 0 {
			return st
		}
		return exitStatus(res, true)
	}

	out := &liveOutput{stdout: inv.stdout, stderr: inv.stderr}
	res, err := o.carryOut(ctx, inv, cl, req, out.write)
	if err != nil {
		return inv.failure(ctx, err)
	}
	if ctx.Err() != nil {
		return inv.failure(ctx, ctx.Err())
	}
	// A daemon that answered with one result instead of a stream sent
	// no chunks: the output is in the result.
	if !out.seen["stdout"] {
		out.write("stdout", res.Stdout)
	}
	if !out.seen["stderr"] {
		out.write("stderr", res.Stderr)
	}
	// A cell's value, as Python's REPL would show it, after the output.
	if res.Value != nil {
		out.write("stdout", res.Value.Repr+"\n")
	}
	for _, note := range append(notes(res, req), fileNotes(res, o.out != "")...) {
		if out.last != 0 && out.last != '\n' {
			note = "\n" + note
			out.last = '\n'
		}
		fmt.Fprintln(inv.stderr, note)
	}
	if st := o.saveOut(ctx, inv, cl, res); st >= 0 {
		return st
	}
	return exitStatus(res, false)
}

// request builds the run request: the code from -c, FILE or stdin, the
// arguments, and stdin with -i. Errors are the user's to fix.
func (o *runOptions) request(ctx context.Context, inv *invocation) (*api.RunRequest, error) {
	req := o.req
	req.Args = o.args
	// As python names them: sys.argv[0] is "-c" or "-", and no file.
	req.Filename = "-c"
	source := "-c"
	switch {
	case o.codeSet:
		req.Code = o.code
	case o.script == "-":
		req.Filename = "-"
		source = "standard input"
		if o.stdin {
			return nil, errors.New("-i/--stdin cannot be used with -: standard input holds the code")
		}
		b, err := readLimited(ctx, inv.stdin, api.MaxCodeBytes)
		if err != nil {
			return nil, fmt.Errorf("read code from standard input: %w", err)
		}
		req.Code = string(b)
	default:
		source = o.script
		b, err := readFile(ctx, o.script, api.MaxCodeBytes)
		if err != nil {
			return nil, err
		}
		req.Code = string(b)
		req.Filename = scriptFilename(o.script)
	}
	if !utf8.ValidString(req.Code) {
		return nil, fmt.Errorf("%s: the code is not UTF-8 text, which is all cellblockd takes", source)
	}
	if req.Code == "" {
		// python runs an empty program and exits 0; the daemon
		// wants some code.
		req.Code = "\n"
	}
	files, err := readInputs(ctx, o.files)
	if err != nil {
		return nil, err
	}
	req.Files = files
	if o.stdin {
		b, err := readLimited(ctx, inv.stdin, api.MaxStdinBytes)
		if err != nil {
			return nil, fmt.Errorf("read standard input for the program: %w", err)
		}
		if !utf8.Valid(b) {
			return nil, errors.New("--stdin: standard input is not UTF-8 text, which is all cellblockd passes on")
		}
		req.Stdin = string(b)
	}
	for i, a := range req.Args {
		if !utf8.ValidString(a) {
			return nil, fmt.Errorf("argument %d (%q) is not UTF-8 text, which is all cellblockd passes on", i+1, a)
		}
	}
	o.declareTools(&req)
	if e := req.Validate(); e != nil {
		return nil, errors.New(describeInvalid(e, &req, source))
	}
	return &req, nil
}

// describeInvalid words a validation error in terms of the command line.
func describeInvalid(e *api.Error, req *api.RunRequest, source string) string {
	field, index := e.Field, -1
	if base, rest, ok := strings.Cut(field, "["); ok {
		if i, err := strconv.Atoi(strings.TrimSuffix(rest, "]")); err == nil {
			field, index = base, i
		}
	}
	what := e.Field
	if name, ok := strings.CutPrefix(field, "inputs."); ok {
		field, what = "", "--input "+name
	}
	if strings.HasPrefix(field, "tool") {
		field, what = "", "--tool"
	}
	switch field {
	case "code":
		what = source
	case "args":
		what = "ARGS"
		if index >= 0 {
			what = fmt.Sprintf("argument %d", index+1)
		}
	case "stdin":
		what = "--stdin"
	case "python":
		what = "--python"
	case "env":
		what = "--env"
	case "dependencies":
		what = "--with"
		if index >= 0 && index < len(req.Dependencies) {
			what = fmt.Sprintf("--with %q", req.Dependencies[index])
		}
	case "mode":
		what = "--cell"
	case "inputs":
		what = "--input"
	case "timeout_ms":
		what = "--timeout"
	case "memory_bytes":
		what = "--memory"
	case "pids":
		what = "--pids"
	case "cpus":
		what = "--cpus"
	case "tmp_bytes":
		what = "--tmp"
	case "session":
		what = "--session"
	case "network", "network.allow":
		what = "--allow-net"
		if index >= 0 && req.Network != nil && index < len(req.Network.Allow) {
			what = fmt.Sprintf("--allow-net %q", req.Network.Allow[index])
		}
	case "files":
		what = "--file"
	case "secrets":
		what = "--secret"
		if index >= 0 && index < len(req.Secrets) {
			what = "--secret " + req.Secrets[index]
		}
	}
	return what + ": " + e.Message
}

// scriptFilename is the name the script gets in the jail: FILE's base
// name when it is a plain, sensible file name, else main.py.
func scriptFilename(path string) string {
	name := filepath.Base(path)
	if name == "" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "-") ||
		len(name) > api.MaxFilenameLen || !utf8.ValidString(name) ||
		strings.ContainsFunc(name, func(r rune) bool { return r == '/' || !unicode.IsPrint(r) && r != ' ' }) {
		return defaultFilename
	}
	if (&api.RunRequest{Code: "\n", Filename: name}).Validate() != nil {
		return defaultFilename
	}
	return name
}

// readFile reads at most limit bytes of the file at path.
func readFile(ctx context.Context, path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := readLimited(ctx, f, limit)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return b, nil
}

// readLimited reads r to its end, refusing more than limit bytes. It
// gives up when ctx is cancelled (a terminal may never send EOF); the
// reading goroutine is then left behind, which is fine as cellblock is
// about to exit.
func readLimited(ctx context.Context, r io.Reader, limit int64) ([]byte, error) {
	type read struct {
		b   []byte
		err error
	}
	done := make(chan read, 1)
	go func() {
		b, err := io.ReadAll(io.LimitReader(r, limit+1))
		done <- read{b, err}
	}()
	select {
	case rd := <-done:
		if rd.err != nil {
			return nil, rd.err
		}
		if int64(len(rd.b)) > limit {
			return nil, fmt.Errorf("more than %s, the most cellblockd takes", formatSize(limit))
		}
		return rd.b, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}
