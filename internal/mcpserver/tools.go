package mcpserver

import (
	"fmt"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/cellblock/cellblock/internal/api"
)

// The tool definitions. Descriptions are written for a language model: what
// the tool does, what the sandbox allows and forbids, the limits in force
// and a short example. Limits and Python versions come from the daemon's
// /v1/info; with no info the text says where to find them instead.

func runPythonTool(info *api.Info, warm *WarmEnv) mcp.Tool {
	var b strings.Builder
	b.WriteString(`Run Python code in an isolated sandbox, in a fresh interpreter or in a named session that keeps its variables between calls, and get back the value of its last expression, its stdout and stderr, any exception, its plots and rich output, its exit status and resource use.

The code runs like a notebook cell: when it ends with an expression, that value comes back (no need to print it). Each entry of "inputs" becomes a variable before the code runs: pass data there rather than in the code. An uncaught exception comes back as data (type, message, line, traceback). Plots are shown: matplotlib figures (after plt.show() or left open at the end) come back as images, and objects with rich representations, such as pandas DataFrames, as HTML; cellblock.display(obj) (import cellblock, always there) shows any object explicitly.

Without "session", every call starts from a clean slate: nothing (files, variables, installed packages) carries over from one call to the next, so put everything the code needs in "code" and "inputs". Standard input is empty.

`)
	b.WriteString(sessionText())
	b.WriteString("\n\n" + filesText())
	b.WriteString(`

What the sandbox allows and forbids:
`)
	b.WriteString("- " + networkText(info) + "\n")
	b.WriteString("- " + filesystemText(info) + "\n")
	b.WriteString("- Third-party packages only through \"dependencies\" or a PEP 723 \"# /// script\" block at the top of the code. " +
		dependencySourceText(info) + " Nothing can be installed while the program runs (no pip, no network).\n")
	b.WriteString(warmText(warm))
	b.WriteString("- Python: " + pythonsText(info) + "\n")
	b.WriteString("- Limits: " + limitsText(info) + "\n")
	if info != nil && info.MaxConcurrent > 0 {
		fmt.Fprintf(&b, "- Up to %d runs execute at once and %d more may wait; beyond that a call is refused as busy (try again shortly).\n",
			info.MaxConcurrent, info.QueueSize)
	}
	b.WriteString(`- PYTHONUNBUFFERED=1 is set unless "env" sets it, so output is sent as it is written.

The result: the text says how the code ended (exit status, uncaught exception, timeout or memory limit), then stdout and stderr, a line for each display item saying how it was sent, and the value of the last expression. After the text come the display items: images as image content, HTML and SVG as embedded resources (cellblock://runs/RUN_ID/display/N.html), Markdown and JSON as text. So that one plot cannot flood the context, an image may be at most ` + fmtBytes(maxImageBase64) + ` of base64, the images of one result ` + fmtBytes(maxImagesBase64) + ` and ` + fmt.Sprint(maxImages) + ` in all, an HTML or SVG item ` + fmtBytes(maxResourceBytes) + `; what is over a cap is left out, and the text says what and why. structuredContent holds the full result object (exit_code, stdout, stderr, value, exception, display, timed_out, oom_killed, duration_ms, cpu_ms, memory_peak_bytes, error, session, ...), except that each image's base64 in display is replaced by a note such as "(sent as image content 1)" or why it was left out, so the same bytes are not sent twice. Very long output is shortened in the text (the middle is left out); structuredContent always has all of it, up to the output limit. Code that raises (exit status 1), exits non-zero, times out or is killed for memory comes back with isError true and the exception and traceback: read them, fix the code and call again. A request the sandbox refuses (over a limit, unknown Python, packages that cannot be installed, a session that expired, was lost or is busy) also has isError true, with the reason in "error".

While a long run goes on, its output is sent as notifications/progress (when the call carries a progressToken) and as notifications/message log entries (logger "stdout" or "stderr", level info).

Example arguments:
{"code": "import statistics\nprint('n =', len(data))\nstatistics.mean(data)", "inputs": {"data": [2, 4, 4, 5]}, "timeout_seconds": 10}
With packages and a plot:
{"code": "import numpy as np\nimport matplotlib.pyplot as plt\nx = np.linspace(0, 6, 100)\nplt.plot(x, np.sin(x))\nnp.sin(x).max()", "dependencies": ["numpy", "matplotlib"]}
Loading data once in a session, then asking about it in later calls:
{"code": "import pandas as pd\ndf = pd.DataFrame(rows)\ndf.shape", "inputs": {"rows": [{"region": "north", "amount": 3}, {"region": "south", "amount": 5}]}, "dependencies": ["pandas"], "session": "sales"}
{"code": "df.groupby('region')['amount'].sum()", "session": "sales"}`)

	return mcp.Tool{
		Name:            ToolRunPython,
		Title:           "Run Python in the cellblock sandbox",
		Description:     b.String(),
		RawInputSchema:  mustJSON(runPythonInput(info, nil)),
		RawOutputSchema: mustJSON(resultOutput()),
		Annotations: mcp.ToolAnnotation{
			Title:           "Run Python in the cellblock sandbox",
			ReadOnlyHint:    mcp.ToBoolPtr(false),
			DestructiveHint: mcp.ToBoolPtr(false),
			IdempotentHint:  mcp.ToBoolPtr(false),
			OpenWorldHint:   mcp.ToBoolPtr(false),
		},
	}
}

func checkEnvironmentTool(info *api.Info) mcp.Tool {
	desc := `Describe the Python sandbox behind run_python and validate_python, without running any code: whether the cellblock daemon is reachable, the Python versions available, the default and maximum limits (timeout, memory, processes, CPU, output size, /tmp size), the network policy, the filesystem policy, the isolation in use (cgroup mode, user namespace, seccomp), how many runs may execute at once and how many are running now, and how dependencies are installed and cached.

Call it first when you need to know what the sandbox can do, or when run_python reports that the daemon cannot be reached. It takes no arguments.

Example arguments: {}`
	if info == nil {
		desc += "\n\nNote: the daemon was not reachable when this server started, so the other tools' descriptions do not state the limits yet; this tool reports them once the daemon is up."
	}
	return mcp.Tool{
		Name:            ToolCheckEnvironment,
		Title:           "Check the cellblock sandbox",
		Description:     desc,
		RawInputSchema:  mustJSON(checkEnvironmentInput()),
		RawOutputSchema: mustJSON(infoOutput()),
		Annotations: mcp.ToolAnnotation{
			Title:           "Check the cellblock sandbox",
			ReadOnlyHint:    mcp.ToBoolPtr(true),
			DestructiveHint: mcp.ToBoolPtr(false),
			IdempotentHint:  mcp.ToBoolPtr(true),
			OpenWorldHint:   mcp.ToBoolPtr(false),
		},
	}
}

func validatePythonTool(info *api.Info) mcp.Tool {
	desc := `Check a Python program without running it: a syntax check (the code is compiled, never executed, by the same Python the sandbox would run it with) and a check of its PEP 723 inline metadata (the "# /// script" block with dependencies and requires-python).

Use it before run_python for long or expensive programs, or to find the exact line and column of a syntax error. It reports each syntax error with its line, column and message, compiler warnings (such as invalid escape sequences), and the dependencies and requires-python the metadata asks for, or what is wrong with the block. isError is true only when the check itself could not be carried out (for example the daemon is unreachable); invalid code is reported with "valid": false.

Python: ` + pythonsText(info) + `

Example arguments:
{"code": "# /// script\n# dependencies = [\"requests\"]\n# ///\nimport requests\nprint(requests.__version__)"}`
	return mcp.Tool{
		Name:            ToolValidatePython,
		Title:           "Validate Python without running it",
		Description:     desc,
		RawInputSchema:  mustJSON(validatePythonInput(info)),
		RawOutputSchema: mustJSON(validationOutput()),
		Annotations: mcp.ToolAnnotation{
			Title:           "Validate Python without running it",
			ReadOnlyHint:    mcp.ToBoolPtr(true),
			DestructiveHint: mcp.ToBoolPtr(false),
			IdempotentHint:  mcp.ToBoolPtr(true),
			OpenWorldHint:   mcp.ToBoolPtr(false),
		},
	}
}

func resetSessionTool() mcp.Tool {
	desc := fmt.Sprintf(`Start a named Python session of run_python afresh: end the session that has this name on this connection, if any, and free the name, so that the next run_python call with "session" set to it starts a new, empty interpreter (created with that call's python, dependencies, env and memory_mb).

Call it when run_python says a session expired (after %s without a call) or was lost (its interpreter died), since such a session is never recreated without you asking; when you want a clean interpreter under the same name; to change a session's python, dependencies, env or memory_mb; or to free one of the %d sessions a connection may hold. Everything the session held (variables, imports, files in /work) is gone afterwards, and a run still going on in it is stopped.

Example arguments: {"session": "analysis"}`, idleText(0), maxSessionsPerConn)
	return mcp.Tool{
		Name:            ToolResetSession,
		Title:           "Reset a named Python session",
		Description:     desc,
		RawInputSchema:  mustJSON(resetSessionInput()),
		RawOutputSchema: mustJSON(resetOutput()),
		Annotations: mcp.ToolAnnotation{
			Title:           "Reset a named Python session",
			ReadOnlyHint:    mcp.ToBoolPtr(false),
			DestructiveHint: mcp.ToBoolPtr(true),
			IdempotentHint:  mcp.ToBoolPtr(true),
			OpenWorldHint:   mcp.ToBoolPtr(false),
		},
	}
}

// sessionText is run_python's paragraph on sessions.
func sessionText() string {
	return fmt.Sprintf(`With "session": "NAME" (a name you choose, such as "analysis"), the code runs in a Python session that keeps its state: variables, functions, imports and files in /work persist across calls with the same name, so load data or do slow set-up once and use it in the calls that follow. `+
		`The first call with a name creates the session with that call's python, dependencies, env and memory_mb, which then stay fixed (later calls may leave them out; a call asking for others is refused); timeout_seconds applies to each call. `+
		`A session runs one call at a time (a second call while one runs is refused as busy), is private to this MCP connection and ends when it closes; a connection may hold %d at once. `+
		`A session expires after %s without a call, or is lost when its interpreter dies (for example killed for memory): its variables are then gone, and calls with its name fail saying so rather than silently starting over. `+
		`Call reset_session to start afresh under that name, or whenever you want a clean interpreter.`,
		maxSessionsPerConn, idleText(0))
}

// Descriptions of the sandbox's policies.

func networkText(info *api.Info) string {
	const none = "No network: the program cannot resolve names, open connections or reach the internet"
	switch {
	case info == nil || info.Network == "" || info.Network == "none":
		return none + "."
	case strings.HasPrefix(info.Network, "none"):
		detail := strings.TrimSpace(strings.TrimLeft(strings.TrimPrefix(info.Network, "none"), ":;,-"))
		if detail == "" {
			return none + "."
		}
		return none + " (" + strings.TrimSuffix(detail, ".") + ")."
	default:
		return "Network: " + strings.TrimSuffix(info.Network, ".") + "."
	}
}

func filesystemText(info *api.Info) string {
	var b strings.Builder
	b.WriteString("A read-only filesystem except /tmp and the working directory (where main.py is), which are writable scratch space")
	if info != nil && info.Defaults.TmpBytes > 0 {
		fmt.Fprintf(&b, " of %s each", fmtBytes(info.Defaults.TmpBytes))
	}
	b.WriteString(" and are discarded when the run ends (in a session, when the session ends).")
	if info != nil && info.Filesystem != "" {
		b.WriteString(" In the daemon's words: " + strings.TrimSuffix(info.Filesystem, ".") + ".")
	}
	return b.String()
}

func dependencySourceText(info *api.Info) string {
	const ignored = " Index settings inside the script (such as [tool.uv]) are ignored."
	switch {
	case info == nil:
		return "Packages are installed from the source the operator configured and cached, so repeat runs with the same packages start fast." + ignored
	case info.Dependencies == nil:
		return "This daemon does not report dependency support, so a run that asks for packages may be refused with dependency_error; check_environment tells more." + ignored
	}
	d := info.Dependencies
	var b strings.Builder
	switch {
	case d.NoIndex:
		b.WriteString("Packages come only from the operator's local wheel directory (no package index), so only what is there can be installed")
	case d.IndexURL != "":
		b.WriteString("Packages come from the package index the operator configured")
	default:
		b.WriteString("Packages come from the default package index")
	}
	if d.OnlyBinary {
		b.WriteString(", as pre-built wheels only (no source builds)")
	}
	b.WriteString("; environments are cached, so repeat runs with the same packages start fast." + ignored)
	return b.String()
}

func pythonsText(info *api.Info) string {
	if info == nil || len(info.Pythons) == 0 {
		return "the versions the daemon has (see check_environment)."
	}
	return api.PythonList(info.Pythons) + "."
}

func limitsText(info *api.Info) string {
	if info == nil || info.Maxima.TimeoutMs == 0 {
		return "a wall-clock timeout, a memory limit, a cap on processes and threads, a CPU quota and a cap on captured output, set by the daemon; check_environment reports them."
	}
	d, m := info.Defaults, info.Maxima
	return fmt.Sprintf("timeout %s by default (at most %s); memory %s by default (at most %s); "+
		"at most %d processes and threads; %g CPU core%s; stdout and stderr are each cut off after %s.",
		fmtMs(d.TimeoutMs), fmtMs(m.TimeoutMs), fmtBytes(d.MemoryBytes), fmtBytes(m.MemoryBytes),
		d.Pids, d.CPUs, plural(d.CPUs), fmtBytes(d.OutputBytes))
}

func plural(n float64) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// fmtMs formats milliseconds for people.
func fmtMs(ms int64) string {
	switch {
	case ms <= 0:
		return "none"
	case ms%1000 == 0:
		return fmt.Sprintf("%d s", ms/1000)
	case ms < 1000:
		return fmt.Sprintf("%d ms", ms)
	default:
		return fmt.Sprintf("%.1f s", float64(ms)/1000)
	}
}

// fmtBytes formats a size in bytes for people, in binary units.
func fmtBytes(n int64) string {
	const (
		kib = 1 << 10
		mib = 1 << 20
		gib = 1 << 30
	)
	switch {
	case n <= 0:
		return "0 B"
	case n >= gib && n%gib == 0:
		return fmt.Sprintf("%d GiB", n/gib)
	case n >= gib:
		return fmt.Sprintf("%.1f GiB", float64(n)/gib)
	case n >= mib && n%mib == 0:
		return fmt.Sprintf("%d MiB", n/mib)
	case n >= mib:
		return fmt.Sprintf("%.1f MiB", float64(n)/mib)
	case n >= kib && n%kib == 0:
		return fmt.Sprintf("%d KiB", n/kib)
	case n >= kib:
		return fmt.Sprintf("%.1f KiB", float64(n)/kib)
	default:
		return fmt.Sprintf("%d B", n)
	}
}
