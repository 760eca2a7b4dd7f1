package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/client"
)

// cellblock run --tool NAME=COMMAND: the code's calls of NAME run COMMAND
// here, on the caller's side, with /bin/sh -c: the call's arguments as one
// JSON object on its standard input, its standard output as the result
// (JSON, or a string when it is not JSON), and a non-zero exit a failure
// whose message is the end of its standard error.

// Bounds of a tool command's output.
const (
	// toolStdoutBytes is the most of a command's standard output read;
	// the daemon's cap on an answer (8 MiB at most) is below it.
	toolStdoutBytes = 16 << 20
	// toolStderrBytes is how much of the end of its standard error a
	// failure's message keeps.
	toolStderrBytes = 4096
	// toolWaitDelay is how long a command's output is waited for after
	// it exited or was killed (a process it left may hold the pipes).
	toolWaitDelay = 2 * time.Second
	// toolCommands is how many tool commands run at once: the code may
	// make hundreds of calls at a time (up to the run's cap), each of
	// which would be a shell holding up to toolStdoutBytes. The others
	// wait for one to end, within their own time.
	toolCommands = 8
)

// EnvTool names, in a tool command's environment, the tool it carries
// out; EnvSocket (CELLBLOCK_SOCKET) is the daemon's socket, so that the
// command can run cellblock itself.
const EnvTool = "CELLBLOCK_TOOL"

// toolDescription is what the code's help(cellblock.tools.NAME) says of a
// --tool. The command itself is not sent: the jail need not see it.
const toolDescription = "A command on the caller's side (cellblock run --tool). Its keyword arguments are passed to it as one JSON object; it returns what the command printed, as JSON when it is JSON, else as a string."

// cliTool is one --tool.
type cliTool struct {
	name, command string
}

// toolValue is --tool NAME=COMMAND, repeatable.
type toolValue struct{ tools *[]cliTool }

func (v toolValue) String() string {
	if v.tools == nil {
		return ""
	}
	var s []string
	for _, t := range *v.tools {
		s = append(s, t.name+"="+t.command)
	}
	return strings.Join(s, " ")
}

func (v toolValue) Set(s string) error {
	name, command, ok := strings.Cut(s, "=")
	if !ok || strings.TrimSpace(command) == "" {
		return errors.New(`want NAME=COMMAND, such as add='python3 -c "import json,sys; a=json.load(sys.stdin); print(a[\"x\"] + a[\"y\"])"'`)
	}
	if !api.ValidToolName(name) {
		return fmt.Errorf("%q is not a tool name: an ASCII identifier that starts with a letter (the code calls cellblock.tools.NAME)", name)
	}
	if slices.ContainsFunc(*v.tools, func(t cliTool) bool { return t.name == name }) {
		return fmt.Errorf("tool %s is given twice", name)
	}
	*v.tools = append(*v.tools, cliTool{name: name, command: command})
	return nil
}

// declareTools puts the --tool flags into req.
func (o *runOptions) declareTools(req *api.RunRequest) {
	if o.toolTimeoutMs > 0 {
		req.ToolLimits = &api.ToolLimits{TimeoutMs: o.toolTimeoutMs}
	}
	for _, t := range o.tools {
		req.Tools = append(req.Tools, api.Tool{Name: t.name, Description: toolDescription})
	}
}

// carryOut runs req: streamed when onOutput is set or it has tools (whose
// calls it answers by running their commands), else as one request.
func (o *runOptions) carryOut(ctx context.Context, inv *invocation, cl *client.Client, req *api.RunRequest, onOutput func(stream, data string)) (*api.Result, error) {
	switch {
	case len(o.tools) > 0:
		socket, _ := inv.socketPath()
		running := make(chan struct{}, toolCommands)
		return cl.RunTools(ctx, req, onOutput, func(ctx context.Context, call api.ToolCall) (json.RawMessage, error) {
			for _, t := range o.tools {
				if t.name == call.Name {
					return runToolCommand(ctx, t, call, socket, running)
				}
			}
			return nil, fmt.Errorf("cellblock run has no --tool %s", call.Name)
		})
	case onOutput != nil:
		return cl.RunStream(ctx, req, onOutput)
	default:
		return cl.Run(ctx, req)
	}
}

// runToolCommand carries out one call of t: its command under /bin/sh -c
// in a process group of its own, killed with the group when ctx ends (the
// call's timeout, or the run's end), once one of running's slots is free.
func runToolCommand(ctx context.Context, t cliTool, call api.ToolCall, socket string, running chan struct{}) (json.RawMessage, error) {
	// Killed a little before the daemon gives up on the call, so that
	// the code hears why.
	limit := time.Duration(call.TimeoutMs) * time.Millisecond
	ctx, cancel := context.WithTimeout(ctx, limit-min(limit/4, time.Second))
	defer cancel()
	select {
	case running <- struct{}{}:
		defer func() { <-running }()
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("%s did not start within %s, the time a tool call may take: %d tool commands were running, the most cellblock run runs at once",
				t.name, formatMillis(call.TimeoutMs), cap(running))
		}
		return nil, ctx.Err()
	}
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", t.command)
	cmd.Stdin = bytes.NewReader(call.Arguments)
	cmd.Env = append(os.Environ(), EnvTool+"="+t.name, api.SocketEnv+"="+socket)
	stdout := &limitedBuffer{max: toolStdoutBytes}
	stderr := &limitedBuffer{max: 64 << 10, keepTail: true}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = toolWaitDelay
	err := cmd.Run()
	if ctx.Err() != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("%s did not finish within %s, the time a tool call may take; it was killed",
				t.name, formatMillis(call.TimeoutMs))
		}
		return nil, ctx.Err()
	}
	if err != nil {
		msg := strings.TrimSpace(lastBytes(stderr.String(), toolStderrBytes))
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee) && msg != "":
			return nil, errors.New(msg)
		case errors.As(err, &ee):
			return nil, fmt.Errorf("%s failed: %s", t.name, ee.ProcessState)
		default:
			return nil, fmt.Errorf("%s could not run: %v", t.name, err)
		}
	}
	if stdout.cut {
		return nil, fmt.Errorf("%s printed more than %s", t.name, formatSize(toolStdoutBytes))
	}
	return toolOutput(stdout.Bytes()), nil
}

// toolOutput is a command's standard output as a result: its JSON when it
// is JSON (surrounding space aside), else a string of it without its last
// line break. Bytes that are not UTF-8 become U+FFFD, inside JSON's
// strings too (the only place valid JSON can have them).
func toolOutput(out []byte) json.RawMessage {
	if trimmed := bytes.TrimSpace(out); len(trimmed) > 0 && json.Valid(trimmed) {
		return bytes.ToValidUTF8(trimmed, []byte("\ufffd"))
	}
	s := strings.TrimSuffix(strings.TrimSuffix(api.ValidUTF8(out), "\n"), "\r")
	b, _ := json.Marshal(s)
	return b
}

// limitedBuffer keeps at most max bytes written to it: the first ones, or
// with keepTail the last ones.
type limitedBuffer struct {
	bytes.Buffer
	max      int
	keepTail bool
	cut      bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if b.keepTail {
		b.Buffer.Write(p)
		if over := b.Len() - b.max; over > 0 {
			b.Next(over)
			b.cut = true
		}
		return n, nil
	}
	if room := b.max - b.Len(); len(p) > room {
		p = p[:max(room, 0)]
		b.cut = true
	}
	b.Buffer.Write(p)
	return n, nil
}

// lastBytes is the end of s, at most n bytes of it, from a line start
// when one is near.
func lastBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	if i := strings.IndexByte(s, '\n'); i >= 0 && i < n/4 {
		s = s[i+1:]
	}
	return strings.ToValidUTF8(s, "")
}

// writeToolCaps adds the caps on tool calls to cellblock info's table.
func writeToolCaps(w io.Writer, c *api.ToolCaps) {
	if c == nil {
		return
	}
	d, m := c.Defaults, c.Maxima
	fmt.Fprintf(w, "tool calls per run\t%d\t%d\n", d.Calls, m.Calls)
	fmt.Fprintf(w, "tool call time\t%s\t%s\n", formatMillis(d.TimeoutMs), formatMillis(m.TimeoutMs))
	fmt.Fprintf(w, "tool arguments\t%s\t%s\n", formatSize(d.ArgumentBytes), formatSize(m.ArgumentBytes))
	fmt.Fprintf(w, "tool answer\t%s\t%s\n", formatSize(d.ResultBytes), formatSize(m.ResultBytes))
}
