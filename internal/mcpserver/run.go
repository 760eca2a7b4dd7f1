package mcpserver

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/cellblock/cellblock/internal/api"
)

// runPython is run_python's handler.
func (h *handler) runPython(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	h.refreshInfo(ctx)

	var args runArgs
	if err := decodeArgs(req, &args, h.runArgNames()...); err != nil {
		return textResult("Nothing was run: "+err.Error()+".", true), nil
	}
	rr, err := args.request(h.currentInfo())
	if err == nil {
		err = h.networkRequest(&args, rr)
	}
	if err == nil && len(h.secrets) > 0 {
		rr.Secrets = append([]string(nil), h.secrets...)
	}
	if err != nil {
		return textResult("Nothing was run: "+err.Error()+".", true), nil
	}
	// The daemon's own checks of the request's shape, done here too so
	// that a bad request costs no round trip and reads the same.
	if e := rr.Validate(); e != nil {
		return runResult(&api.Result{Error: e}, h.currentInfo()), nil
	}
	if args.Session != "" {
		return h.runInSession(ctx, req, &args, rr), nil
	}

	relay := newOutputRelay(ctx, h.srv, req)
	res, err := h.stream(ctx, rr, relay.Add)
	relay.Close()
	if err != nil {
		return h.daemonFailure(ctx, "run the program", err), nil
	}
	h.log.Debug("run finished", "run_id", res.RunID, "exit_code", res.ExitCode,
		"timed_out", res.TimedOut, "oom_killed", res.OOMKilled, "error", res.Error)
	out := runResult(res, h.currentInfo())
	h.addFiles(ctx, out, res)
	return out, nil
}

// runResult maps a daemon result onto the tool result: the text for the
// model, then the display items' images, resources and texts (see
// renderDisplay), and the result object as structured content, in which
// each image's base64 is replaced by a note saying where it went. Anything
// but a clean exit is isError; a cell that raised exits 1.
func runResult(res *api.Result, info *api.Info) *mcp.CallToolResult {
	failed := res.Error != nil || res.ExitCode != 0 || res.TimedOut || res.OOMKilled
	var b strings.Builder
	structured := res
	var rich []mcp.Content
	if res.Error != nil {
		b.WriteString(refusalText(res.Error, info))
	} else {
		b.WriteString(stopText(res))
		b.WriteString("\n")
		b.WriteString(usageText(res))
		b.WriteString(toolCallsText(res))
		writeStream(&b, "stdout", res.Stdout, res.StdoutTruncated, res)
		writeStream(&b, "stderr", res.Stderr, res.StderrTruncated, res)
		b.WriteString(denialsText(res.Denials))
		if exc := res.Exception; exc != nil && exc.Traceback != "" &&
			!strings.Contains(res.Stderr, strings.TrimSpace(exc.Traceback)) {
			b.WriteString("\n\n--- traceback ---\n")
			b.WriteString(elide(strings.TrimSuffix(exc.Traceback, "\n"), "exception.traceback"))
		}
		if len(res.Display) > 0 {
			out := renderDisplay(res.RunID, res.Display)
			fmt.Fprintf(&b, "\n\n--- display: %d item%s, in order (structuredContent.display has their data) ---\n",
				len(res.Display), plural(float64(len(res.Display))))
			b.WriteString(strings.Join(out.lines, "\n"))
			rich = out.content
			withNotes := *res
			withNotes.Display = out.items
			structured = &withNotes
		}
		if v := res.Value; v != nil {
			fmt.Fprintf(&b, "\n\n--- value of the last expression (%s) ---\n", v.Type)
			b.WriteString(elide(strings.TrimSuffix(v.Repr, "\n"), "value.repr"))
		}
	}
	return &mcp.CallToolResult{
		Content:           append([]mcp.Content{mcp.NewTextContent(b.String())}, rich...),
		StructuredContent: structured,
		IsError:           failed,
	}
}

// stopText says how the program ended, in one sentence.
func stopText(res *api.Result) string {
	switch {
	case res.TimedOut:
		limit := "its wall-clock timeout"
		if res.Limits != nil && res.Limits.TimeoutMs > 0 {
			limit += " of " + fmtMs(res.Limits.TimeoutMs)
		}
		return fmt.Sprintf("The program was killed because it ran past %s (exit code %d). "+
			"Make it faster, print progress so you can see where it stops, or ask for a longer timeout_seconds.", limit, res.ExitCode)
	case res.OOMKilled:
		limit := "its memory limit"
		if res.Limits != nil && res.Limits.MemoryBytes > 0 {
			limit += " of " + fmtBytes(res.Limits.MemoryBytes)
		}
		return fmt.Sprintf("The program was killed because it went over %s (exit code %d). "+
			"Use less memory (stream or chunk the data) or ask for a larger memory_mb.", limit, res.ExitCode)
	case res.Exception != nil:
		return exceptionText(res)
	case res.ExitCode == 0:
		return "The program exited normally (exit status 0)."
	}
	if exc := uncaughtException(res.Stderr); exc != "" && res.ExitCode == 1 {
		return fmt.Sprintf("The program raised an uncaught exception and exited with status 1: %s (the traceback is in stderr below).", exc)
	}
	if res.ExitCode > 128 && res.ExitCode <= 128+64 {
		sig := res.ExitCode - 128
		name := signalNames[sig]
		if name != "" {
			name = " (" + name + ")"
		}
		return fmt.Sprintf("The program was killed by signal %d%s (exit code %d).", sig, name, res.ExitCode)
	}
	return fmt.Sprintf("The program exited with status %d.", res.ExitCode)
}

// exceptionText says which exception ended the code, and where, from the
// exception the sandbox reported.
func exceptionText(res *api.Result) string {
	exc := res.Exception
	what := exc.Type
	if what == "" {
		what = "an exception"
	}
	if exc.Message != "" {
		msg := exc.Message
		if len(msg) > 300 {
			msg = strings.ToValidUTF8(msg[:300], "") + "..."
		}
		what += ": " + msg
	}
	where := ""
	if exc.Line != nil {
		where = fmt.Sprintf("line %d; ", *exc.Line)
	}
	return fmt.Sprintf("The code raised an uncaught exception and exited with status %d: %s (%sthe traceback is below).",
		res.ExitCode, what, where)
}

var signalNames = map[int]string{
	1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT", 7: "SIGBUS",
	8: "SIGFPE", 9: "SIGKILL", 11: "SIGSEGV", 13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM", 31: "SIGSYS",
}

// exceptionLine matches the last line of a Python traceback:
// "ValueError: bad value", "KeyboardInterrupt", "mod.CustomError: x".
var exceptionLine = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*(: .*)?$`)

// uncaughtException returns the exception line of a traceback at the end
// of stderr, or "" when stderr does not end with one.
func uncaughtException(stderr string) string {
	if !strings.Contains(stderr, "Traceback (most recent call last):") && !strings.Contains(stderr, "  File \"") {
		return ""
	}
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	if !exceptionLine.MatchString(last) {
		return ""
	}
	if len(last) > 300 {
		last = last[:300] + "..."
	}
	return last
}

// usageText is the line with the run's interpreter and resource use.
func usageText(res *api.Result) string {
	var parts []string
	if res.Python != "" {
		parts = append(parts, "Python "+res.Python)
	}
	parts = append(parts,
		fmtElapsed(res.DurationMs)+" wall",
		fmtElapsed(res.CPUMs)+" CPU",
		"peak memory "+fmtBytes(res.MemoryPeakBytes))
	if env := res.Environment; env != nil && len(env.Packages) > 0 {
		hit := "built for this run"
		if env.CacheHit {
			hit = "cached"
		}
		parts = append(parts, fmt.Sprintf("%d package(s) installed, environment %s", len(env.Packages), hit))
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// fmtElapsed formats a measured time in milliseconds.
func fmtElapsed(ms int64) string {
	if ms < 1000 {
		return fmt.Sprintf("%d ms", max(ms, 0))
	}
	return fmt.Sprintf("%.2f s", float64(ms)/1000)
}

func writeStream(b *strings.Builder, name, data string, truncated bool, res *api.Result) {
	b.WriteString("\n\n--- " + name)
	switch {
	case truncated:
		limit := "the output limit"
		if res.Limits != nil && res.Limits.OutputBytes > 0 {
			limit += " of " + fmtBytes(res.Limits.OutputBytes)
		}
		b.WriteString(" (cut off at " + limit + ")")
	case data == "":
		b.WriteString(" (empty)")
	}
	b.WriteString(" ---")
	if data != "" {
		b.WriteString("\n")
		b.WriteString(elide(strings.TrimSuffix(data, "\n"), name))
	}
}

// Bounds on how much of each stream the text content carries. The text is
// what a model reads; a megabyte of output would crowd out everything
// else, so the middle of a long stream is left out of the text (the
// structured content always has all of it). The end is kept longer than
// the start because that is where tracebacks are.
const (
	textHeadBytes = 8 << 10
	textTailBytes = 24 << 10
)

// elide shortens a long stream for the text content.
func elide(data, name string) string {
	return elideAt(data, textHeadBytes, textTailBytes, name)
}

// elideAt keeps about headBytes of the start of data and tailBytes of its
// end, cut at line breaks where that loses little, and says that
// structuredContent.name has the rest.
func elideAt(data string, headBytes, tailBytes int, name string) string {
	if len(data) <= headBytes+tailBytes {
		return data
	}
	head := data[:headBytes]
	if i := strings.LastIndexByte(head, '\n'); i > headBytes/2 {
		head = head[:i+1]
	}
	tail := data[len(data)-tailBytes:]
	if i := strings.IndexByte(tail, '\n'); i >= 0 && i < tailBytes/2 {
		tail = tail[i+1:]
	}
	head = strings.ToValidUTF8(head, "")
	tail = strings.ToValidUTF8(tail, "")
	return fmt.Sprintf("%s[... %d bytes left out here; structuredContent.%s has all of it ...]\n%s",
		head, len(data)-len(head)-len(tail), name, tail)
}

// paramOf maps a request field the daemon names onto the tool's argument.
var paramOf = map[string]string{
	"timeout_ms":   "timeout_seconds",
	"memory_bytes": "memory_mb",
}

// refusalText explains why the daemon did not carry out the run.
func refusalText(e *api.Error, info *api.Info) string {
	return refusalTextAs("The sandbox did not run the program: ", e, info)
}

// refusalTextAs is refusalText with another first sentence, which ends in
// ": ".
func refusalTextAs(lead string, e *api.Error, info *api.Info) string {
	var b strings.Builder
	b.WriteString(lead)
	if p, ok := paramOf[e.Field]; ok {
		fmt.Fprintf(&b, "%s (%s, given to the daemon as %s): %s.", e.Type, p, e.Field, strings.TrimSuffix(e.Message, "."))
	} else if e.Field != "" {
		fmt.Fprintf(&b, "%s (%s): %s.", e.Type, e.Field, strings.TrimSuffix(e.Message, "."))
	} else {
		fmt.Fprintf(&b, "%s: %s.", e.Type, strings.TrimSuffix(e.Message, "."))
	}
	switch e.Type {
	case api.ErrOverLimit:
		if info != nil {
			fmt.Fprintf(&b, " The most a run may ask for: timeout_seconds %g, memory_mb %d.",
				float64(info.Maxima.TimeoutMs)/1000, info.Maxima.MemoryBytes>>20)
		} else {
			b.WriteString(" check_environment reports the maxima.")
		}
	case api.ErrUnknownPython:
		if !strings.Contains(strings.ToLower(e.Message), "available") {
			b.WriteString(" Available: " + pythonsText(info))
		}
	case api.ErrDependency:
		b.WriteString(" Check the package names and version constraints; packages come only from the operator's configured source, and there is no network at run time.")
	case api.ErrBusy:
		b.WriteString(" The sandbox is at capacity; wait a moment and call again.")
	case api.ErrUnavailable:
		b.WriteString(" The daemon is shutting down; try again once it is back.")
	case api.ErrForbidden:
		b.WriteString(" The user cellblock-mcp runs as is not allowed to use the daemon; the operator must add it to the socket's group.")
	}
	return b.String()
}

// toolCallsText is the line of a result's text about its tool calls.
func toolCallsText(res *api.Result) string {
	if len(res.ToolCalls) == 0 && res.ToolCallsOverCap == 0 {
		return ""
	}
	failed := 0
	var first string
	for _, c := range res.ToolCalls {
		if !c.OK {
			failed++
			if first == "" {
				first = c.Name + ": " + c.Error
			}
		}
	}
	text := fmt.Sprintf("\n(%d tool call%s", len(res.ToolCalls), plural(float64(len(res.ToolCalls))))
	if failed > 0 {
		text += fmt.Sprintf(", %d failed; the first: %s", failed, cut(first, 300))
	}
	if res.ToolCallsOverCap > 0 {
		text += fmt.Sprintf("; %d more refused past the run's cap on calls", res.ToolCallsOverCap)
	}
	return text + ")"
}
