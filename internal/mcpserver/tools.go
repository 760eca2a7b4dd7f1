package mcpserver

import (
	"encoding/json"
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
		Name:        ToolRunPython,
		Title:       "Run Python in the cellblock sandbox",
		Description: b.String(),
		RawInputSchema: mustJSON(object(map[string]any{
			"code": map[string]any{
				"type": "string",
				"description": "The complete Python code to run, as a notebook cell in the working directory: the value of a final expression comes back. " +
					"It may start with a PEP 723 '# /// script' block listing dependencies and requires-python. " +
					fmt.Sprintf("At most %d bytes.", api.MaxCodeBytes),
				"minLength": 1,
			},
			"dependencies": map[string]any{
				"type": "array",
				"description": "Packages the program needs, as PEP 508 requirement strings such as \"requests\" or \"pandas>=2,<3\". " +
					"Merged with the code's PEP 723 dependencies. " + dependencySourceText(info),
				"items":    map[string]any{"type": "string", "minLength": 1, "maxLength": 512},
				"maxItems": api.MaxDeps,
			},
			"timeout_seconds": timeoutSchema(info),
			"python":          pythonSchema(info),
			"env": map[string]any{
				"type": "object",
				"description": "Extra environment variables for the program, name to value. " +
					"PATH, HOME, PYTHONHOME, PYTHONPATH and LD_* are set by the sandbox and cannot be overridden; " +
					"PYTHONUNBUFFERED is 1 unless set here. " +
					fmt.Sprintf("At most %d variables.", api.MaxEnv),
				"additionalProperties": map[string]any{"type": "string"},
				"propertyNames":        map[string]any{"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
				"maxProperties":        api.MaxEnv,
			},
			"memory_mb": memorySchema(info),
			"inputs": map[string]any{
				"type": "object",
				"description": "Data for the code: each name becomes a global variable holding its JSON value " +
					"(objects as dicts, arrays as lists, null as None) before the code runs, and cellblock.inputs holds them all. " +
					"Pass data here rather than pasting it into the code. Names are Python identifiers, not keywords, not starting with __; " +
					fmt.Sprintf("at most %d names and %s of JSON in all.", api.MaxInputs, fmtBytes(api.MaxInputsBytes)),
				"propertyNames": map[string]any{"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
				"maxProperties": api.MaxInputs,
			},
			"session": sessionSchema(),
			"files":   filesSchema(info),
		}, "code")),
		RawOutputSchema: mustJSON(resultSchema()),
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
		RawInputSchema:  mustJSON(object(map[string]any{})),
		RawOutputSchema: mustJSON(infoSchema()),
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
		Name:        ToolValidatePython,
		Title:       "Validate Python without running it",
		Description: desc,
		RawInputSchema: mustJSON(object(map[string]any{
			"code": map[string]any{
				"type":        "string",
				"description": fmt.Sprintf("The Python program to check. At most %d bytes.", api.MaxStdinBytes),
				"minLength":   1,
			},
			"python": pythonSchema(info),
		}, "code")),
		RawOutputSchema: mustJSON(validationSchema()),
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
		Name:        ToolResetSession,
		Title:       "Reset a named Python session",
		Description: desc,
		RawInputSchema: mustJSON(object(map[string]any{
			"session": map[string]any{
				"type":        "string",
				"description": "The session's name, as given to run_python.",
				"pattern":     sessionNamePattern.String(),
				"maxLength":   maxSessionName,
			},
		}, "session")),
		RawOutputSchema: mustJSON(resetSchema()),
		Annotations: mcp.ToolAnnotation{
			Title:           "Reset a named Python session",
			ReadOnlyHint:    mcp.ToBoolPtr(false),
			DestructiveHint: mcp.ToBoolPtr(true),
			IdempotentHint:  mcp.ToBoolPtr(true),
			OpenWorldHint:   mcp.ToBoolPtr(false),
		},
	}
}

// resetSchema describes resetReport, reset_session's structured content.
func resetSchema() map[string]any {
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"session": typed("string", "the session's name"),
			"outcome": typed("string", "what became of the session that had the name: ended, already_ended (it had expired or been lost), not_confirmed (the sandbox could not be asked; it ends when idle), or none (no session had the name)"),
			"id":      typed("string", "the sandbox's id of the session that had the name"),
		},
		"required": []string{"session", "outcome"},
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

// sessionSchema is run_python's "session" parameter.
func sessionSchema() map[string]any {
	return map[string]any{
		"type": "string",
		"description": "A name you choose, such as \"analysis\", for a Python session that keeps its state: variables, functions, imports and files in /work " +
			"persist across calls with the same name, so load data or do slow set-up once and use it in later calls. " +
			"The first call with a name creates the session with that call's python, dependencies, env and memory_mb, which are then fixed: " +
			"later calls may leave them out (or repeat them), and a call asking for others is refused. timeout_seconds applies to each call. " +
			"Leave it out and every call is a fresh interpreter. " +
			fmt.Sprintf("A session is private to this MCP connection and ends with it (at most %d at once); ", maxSessionsPerConn) +
			fmt.Sprintf("it expires after %s without a call, and then calls with its name fail until reset_session is called. ", idleText(0)) +
			"One call at a time per session. " +
			fmt.Sprintf("1 to %d letters, digits, '_', '.' or '-'.", maxSessionName),
		"pattern":   sessionNamePattern.String(),
		"maxLength": maxSessionName,
	}
}

// Parameter schemas whose bounds come from the daemon.

func timeoutSchema(info *api.Info) map[string]any {
	s := map[string]any{
		"type":             "number",
		"exclusiveMinimum": 0,
	}
	if info != nil && info.Maxima.TimeoutMs > 0 {
		s["description"] = fmt.Sprintf("Wall-clock limit for the program in seconds, from start to exit. Default %s, at most %s. "+
			"When it is hit the program is killed and the result says timed_out.",
			fmtMs(info.Defaults.TimeoutMs), fmtMs(info.Maxima.TimeoutMs))
		s["maximum"] = float64(info.Maxima.TimeoutMs) / 1000
	} else {
		s["description"] = "Wall-clock limit for the program in seconds, from start to exit. " +
			"The default and the maximum are set by the daemon (see check_environment). When it is hit the program is killed and the result says timed_out."
	}
	return s
}

func memorySchema(info *api.Info) map[string]any {
	s := map[string]any{
		"type":    "number",
		"minimum": 16,
	}
	if info != nil && info.Maxima.MemoryBytes > 0 {
		s["description"] = fmt.Sprintf("Memory limit for the whole run in MiB (all processes, no swap). Default %s, at most %s. "+
			"A program that goes over it is killed and the result says oom_killed.",
			fmtBytes(info.Defaults.MemoryBytes), fmtBytes(info.Maxima.MemoryBytes))
		s["maximum"] = info.Maxima.MemoryBytes >> 20
	} else {
		s["description"] = "Memory limit for the whole run in MiB (all processes, no swap). " +
			"The default and the maximum are set by the daemon (see check_environment). A program that goes over it is killed and the result says oom_killed."
	}
	return s
}

func pythonSchema(info *api.Info) map[string]any {
	return map[string]any{
		"type": "string",
		"description": "Python version to use, by version prefix such as \"3.12\". Empty or absent means the default " +
			"(or the one the code's PEP 723 requires-python asks for). Available: " + pythonsText(info),
		"pattern": `^[0-9]+(\.[0-9]+){0,2}$`,
	}
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
	var parts []string
	for _, p := range info.Pythons {
		s := p.Version
		if s == "" {
			s = p.ID
		}
		if p.Default {
			s += " (default)"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ") + "."
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

// JSON Schema helpers.

// object is an object schema with the given properties that refuses
// unknown ones, so a misspelt argument is reported rather than ignored.
func object(props map[string]any, required ...string) map[string]any {
	s := map[string]any{
		"type":                 "object",
		"properties":           props,
		"additionalProperties": false,
	}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

func mustJSON(v any) json.RawMessage {
	data, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("mcpserver: encode schema: %v", err))
	}
	return data
}

func typed(t, desc string) map[string]any {
	return map[string]any{"type": t, "description": desc}
}

func limitsSchema(desc string) map[string]any {
	return map[string]any{
		"type":        "object",
		"description": desc,
		"properties": map[string]any{
			"timeout_ms":   typed("integer", "wall-clock timeout in milliseconds"),
			"memory_bytes": typed("integer", "memory limit in bytes"),
			"pids":         typed("integer", "maximum number of processes and threads"),
			"cpus":         typed("number", "CPU quota in cores"),
			"output_bytes": typed("integer", "cap on each of stdout and stderr in bytes"),
			"tmp_bytes":    typed("integer", "size of /tmp and of the working directory in bytes"),
		},
	}
}

// resultSchema describes the contract's result object (api.Result). The
// contract's fields are required; the extensions are optional.
func resultSchema() map[string]any {
	filesOut, filesSkipped := resultFilesSchema()
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"exit_code":         typed("integer", "the program's exit status; 128+N when it was killed by signal N"),
			"stdout":            typed("string", "captured standard output (UTF-8, invalid bytes replaced)"),
			"stderr":            typed("string", "captured standard error, where tracebacks go"),
			"stdout_truncated":  typed("boolean", "stdout went past the output limit and was cut off"),
			"stderr_truncated":  typed("boolean", "stderr went past the output limit and was cut off"),
			"timed_out":         typed("boolean", "the wall-clock timeout ended the program"),
			"oom_killed":        typed("boolean", "the memory limit ended the program"),
			"duration_ms":       typed("integer", "wall time of the program in milliseconds"),
			"cpu_ms":            typed("integer", "CPU time of the whole run in milliseconds"),
			"memory_peak_bytes": typed("integer", "peak memory of the whole run in bytes"),
			"error": map[string]any{
				"type":        []string{"object", "null"},
				"description": "set when the run could not be carried out as asked (bad request, over a limit, unknown Python, dependencies that cannot be installed, busy, ...); null otherwise",
				"properties": map[string]any{
					"type":    typed("string", "error class: bad_request, too_large, over_limit, unknown_python, dependency_error, forbidden, busy, unavailable, internal, canceled"),
					"message": typed("string", "what went wrong"),
					"field":   typed("string", "the request field at fault, when there is one"),
				},
				"required": []string{"type", "message"},
			},
			"run_id": typed("string", "identifies the run in the daemon's logs"),
			"python": typed("string", "the Python version the run used"),
			"limits": limitsSchema("the limits that applied to the run"),
			"environment": map[string]any{
				"type":        "object",
				"description": "the dependency environment attached to the run, if any",
				"properties": map[string]any{
					"id":        typed("string", "environment id"),
					"cache_hit": typed("boolean", "the environment was already built"),
					"policy":    typed("string", "install policy"),
					"packages": map[string]any{
						"type": "array",
						"items": map[string]any{
							"type": "object",
							"properties": map[string]any{
								"name":    typed("string", "distribution name"),
								"version": typed("string", "installed version"),
								"hash":    typed("string", "hash of the installed distribution"),
							},
						},
					},
				},
			},
			"phases": map[string]any{
				"type":        "object",
				"description": "where the daemon spent the run's time, in microseconds",
				"properties": map[string]any{
					"queue_us":    typed("integer", "waiting for a free slot"),
					"create_us":   typed("integer", "creating the cgroup and the container (0 for a prestarted jail)"),
					"start_us":    typed("integer", "namespaces, mounts, seccomp and launch (only the launch for a prestarted jail)"),
					"program_us":  typed("integer", "the program running (wall clock)"),
					"handover_us": typed("integer", "the part of program_us before the code ran: handing it to the interpreter already running in the jail"),
					"collect_us":  typed("integer", "draining the output and reading the statistics"),
					"teardown_us": typed("integer", "removing the cgroup and the container"),
					"env_us":      typed("integer", "getting the dependency environment: a few microseconds for a cached one, the whole build otherwise"),
					"prestarted":  typed("boolean", "the jail was built and started before the request arrived (new and unused all the same)"),
					"tools_us":    typed("integer", "the part of program_us during which the code waited for tool calls"),
				},
			},
			"tool_calls":          toolCallsSchema(),
			"tool_calls_over_cap": typed("integer", "tool calls refused, unlisted, because the run had made as many as it may"),
			"value": map[string]any{
				"type":        "object",
				"description": "the value of the code's last expression, when it is one and not None",
				"properties": map[string]any{
					"type": typed("string", "the value's type name, such as int or DataFrame"),
					"repr": typed("string", "repr() of the value, capped"),
					"json": map[string]any{"description": "the value itself, when it is JSON-serialisable and small enough"},
				},
				"required": []string{"type", "repr"},
			},
			"exception": map[string]any{
				"type":        "object",
				"description": "the uncaught exception that ended the code, as data",
				"properties": map[string]any{
					"type":      typed("string", "the exception's class, such as ZeroDivisionError or json.decoder.JSONDecodeError"),
					"message":   typed("string", "str() of the exception"),
					"traceback": typed("string", "the traceback Python printed (also in stderr), capped"),
					"line": map[string]any{
						"type":        []string{"integer", "null"},
						"description": "the line of the code it was raised on, when known",
					},
				},
				"required": []string{"type", "message", "traceback", "line"},
			},
			"session": map[string]any{
				"type":        "object",
				"description": "the session the code ran in, after the run: its id, how many runs it has carried out, its state (alive, or lost when its interpreter died and its variables are gone) and when it expires unless used again",
				"properties": map[string]any{
					"id":              typed("string", "the session's id"),
					"execution_count": typed("integer", "runs carried out in the session so far"),
					"state":           typed("string", "alive or lost"),
					"expires_at":      typed("string", "when the session ends unless another run comes first (RFC 3339)"),
				},
			},
			"denials":       denialsSchema(),
			"secret_uses":   secretUsesSchema(),
			"files":         filesOut,
			"files_skipped": filesSkipped,
			"display": map[string]any{
				"type":        "array",
				"description": "rich output in order: plots and objects shown with cellblock.display or left as the last expression",
				"items": map[string]any{
					"type": "object",
					"properties": map[string]any{
						"data": map[string]any{
							"type":                 "object",
							"description":          "MIME type to content: text/plain always; text/html, image/svg+xml, text/markdown as text; application/json as JSON; image/png and image/jpeg as a note in place of their base64, \"(sent as image content N)\" or why the image was left out",
							"additionalProperties": map[string]any{},
						},
						"metadata": map[string]any{
							"type":                 "object",
							"description":          "under cellblock.dropped: a list of {mime, bytes, reason}, the content the sandbox left out of this item and why (over a size cap, not a valid image); the item keeps its text/plain",
							"additionalProperties": map[string]any{},
						},
					},
					"required": []string{"data"},
				},
			},
		},
		"required": []string{
			"exit_code", "stdout", "stderr", "stdout_truncated", "stderr_truncated",
			"timed_out", "oom_killed", "duration_ms", "cpu_ms", "memory_peak_bytes", "error",
		},
	}
}

// infoSchema describes api.Info, check_environment's structured content.
func infoSchema() map[string]any {
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"version": typed("string", "cellblockd's version"),
			"pythons": map[string]any{
				"type":        "array",
				"description": "the Python interpreters runs can use",
				"items": map[string]any{
					"type": "object",
					"properties": map[string]any{
						"id":      typed("string", "interpreter id"),
						"version": typed("string", "full version, such as 3.12.3"),
						"default": typed("boolean", "used when a run names no version"),
					},
				},
			},
			"cgroup_mode":           typed("string", "how runs are put in cgroups"),
			"user_namespace":        typed("boolean", "runs are in a user namespace"),
			"seccomp":               typed("boolean", "runs are under a seccomp filter"),
			"network":               typed("string", "the network policy of runs"),
			"defaults":              limitsSchema("limits a run gets when it asks for none"),
			"maxima":                limitsSchema("the most a run may ask for"),
			"max_concurrent":        typed("integer", "runs that execute at once"),
			"queue_size":            typed("integer", "runs that may wait for a slot"),
			"running":               typed("integer", "runs executing now"),
			"queued":                typed("integer", "runs waiting now"),
			"prestart":              typed("integer", "jails kept started ahead of requests for runs on the default Python without dependencies"),
			"prestart_ready":        typed("integer", "of those, how many wait now"),
			"prestart_shapes":       typed("integer", "how many other kinds of run (dependencies, another Python, another tmp size) keep one started jail each once used; a repeated run of the same script with dependencies starts as fast as one without"),
			"prestart_shapes_ready": typed("integer", "of those, how many wait now"),
			"filesystem":            typed("string", "what a run may write"),
			"tools":                 toolCapsSchema(),
			"files":                 fileCapsSchema(),
			"display": map[string]any{
				"type":        "object",
				"description": "caps on a run's rich output (plots, HTML), value and exception",
				"properties": map[string]any{
					"items":           typed("integer", "most display items a run keeps"),
					"item_bytes":      typed("integer", "cap on one display item; over it only its text/plain is kept"),
					"total_bytes":     typed("integer", "cap on all of a run's display items together"),
					"repr_bytes":      typed("integer", "cap on a value's repr and each text/plain"),
					"traceback_bytes": typed("integer", "cap on an exception's traceback"),
				},
			},
			"dependencies": map[string]any{
				"type":        "object",
				"description": "how dependency environments are built and cached",
				"properties": map[string]any{
					"installer":          typed("string", "the installer used (uv or pip)"),
					"index_url":          typed("string", "the package index"),
					"find_links":         map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
					"no_index":           typed("boolean", "no package index is used"),
					"only_binary":        typed("boolean", "only pre-built wheels are installed"),
					"cache_entries":      typed("integer", "environments in the cache"),
					"cache_bytes":        typed("integer", "size of the cache in bytes"),
					"cache_budget_bytes": typed("integer", "the cache's size budget in bytes"),
					"policy":             typed("string", "the install policy: wheels-only or allow-sdist"),
					"builds":             typed("integer", "environments built since the daemon started"),
				},
			},
			"network_policy": networkPolicySchema(),
			"secrets":        secretsInfoSchema(),
		},
		"required": []string{"version", "pythons", "defaults", "maxima"},
	}
}

// validationSchema describes validate_python's structured content.
func validationSchema() map[string]any {
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"valid": typed("boolean", "the code compiles and its PEP 723 metadata (if any) is well formed"),
			"syntax": map[string]any{
				"type": "object",
				"properties": map[string]any{
					"checked": typed("boolean", "the syntax check was carried out"),
					"ok":      typed("boolean", "the code compiles"),
					"python":  typed("string", "the Python version that compiled it"),
					"error": map[string]any{
						"type": []string{"object", "null"},
						"properties": map[string]any{
							"type":       typed("string", "exception class, such as SyntaxError or IndentationError"),
							"message":    typed("string", "the compiler's message"),
							"line":       typed("integer", "1-based line"),
							"column":     typed("integer", "1-based column"),
							"end_line":   typed("integer", "1-based line where the error ends"),
							"end_column": typed("integer", "1-based column where the error ends"),
							"text":       typed("string", "the offending source line"),
						},
					},
					"warnings": map[string]any{
						"type": "array",
						"items": map[string]any{
							"type": "object",
							"properties": map[string]any{
								"category": typed("string", "warning class, such as SyntaxWarning"),
								"message":  typed("string", "the warning"),
								"line":     typed("integer", "1-based line"),
							},
						},
					},
					"reason": typed("string", "why the check could not be carried out, when checked is false"),
				},
				"required": []string{"checked", "ok"},
			},
			"metadata": map[string]any{
				"type": "object",
				"properties": map[string]any{
					"present":         typed("boolean", "the code has a '# /// script' block"),
					"dependencies":    map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
					"requires_python": typed("string", "the block's requires-python"),
					"error":           typed("string", "what is wrong with the block, naming its line"),
				},
				"required": []string{"present"},
			},
		},
		"required": []string{"valid", "syntax", "metadata"},
	}
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
