package mcpserver

import (
	"fmt"

	"github.com/cellblock/cellblock/internal/api"
)

// The descriptions of the tools' schemas (see schemas.go), by property
// path, written for a language model: what each argument does and what it
// may be, what each field of a result says. Bounds that come from the
// daemon are in the text when it was reachable.

// runArgDocs describes run_python's arguments on a server whose network
// bound is allow.
func runArgDocs(info *api.Info, allow []api.NetPattern) docs {
	caps := "The sandbox's caps on their number and size are in check_environment (files)."
	if info != nil && info.Files != nil {
		caps = fmt.Sprintf("At most %d files of %s in all, which must also fit the run's /work.", info.Files.InCount, fmtBytes(info.Files.InBytes))
	}
	timeout := "Wall-clock limit for the program in seconds, from start to exit. " +
		"The default and the maximum are set by the daemon (see check_environment). When it is hit the program is killed and the result says timed_out."
	if info != nil && info.Maxima.TimeoutMs > 0 {
		timeout = fmt.Sprintf("Wall-clock limit for the program in seconds, from start to exit. Default %s, at most %s. "+
			"When it is hit the program is killed and the result says timed_out.",
			fmtMs(info.Defaults.TimeoutMs), fmtMs(info.Maxima.TimeoutMs))
	}
	memory := "Memory limit for the whole run in MiB (all processes, no swap). " +
		"The default and the maximum are set by the daemon (see check_environment). A program that goes over it is killed and the result says oom_killed."
	if info != nil && info.Maxima.MemoryBytes > 0 {
		memory = fmt.Sprintf("Memory limit for the whole run in MiB (all processes, no swap). Default %s, at most %s. "+
			"A program that goes over it is killed and the result says oom_killed.",
			fmtBytes(info.Defaults.MemoryBytes), fmtBytes(info.Maxima.MemoryBytes))
	}
	d := docs{
		"code": "The complete Python code to run, as a notebook cell in the working directory: the value of a final expression comes back. " +
			"It may start with a PEP 723 '# /// script' block listing dependencies and requires-python. " +
			fmt.Sprintf("At most %d bytes.", api.MaxCodeBytes),
		"dependencies": "Packages the program needs, as PEP 508 requirement strings such as \"requests\" or \"pandas>=2,<3\". " +
			"Merged with the code's PEP 723 dependencies. " + dependencySourceText(info),
		"timeout_seconds": timeout,
		"python":          pythonDoc(info),
		"env": "Extra environment variables for the program, name to value. " +
			"PATH, HOME, PYTHONHOME, PYTHONPATH and LD_* are set by the sandbox and cannot be overridden; " +
			"PYTHONUNBUFFERED is 1 unless set here. " +
			fmt.Sprintf("At most %d variables.", api.MaxEnv),
		"memory_mb": memory,
		"inputs": "Data for the code: each name becomes a global variable holding its JSON value " +
			"(objects as dicts, arrays as lists, null as None) before the code runs, and cellblock.inputs holds them all. " +
			"Pass data here rather than pasting it into the code. Names are Python identifiers, not keywords, not starting with __; " +
			fmt.Sprintf("at most %d names and %s of JSON in all.", api.MaxInputs, fmtBytes(api.MaxInputsBytes)),
		"session": sessionDoc(),
		"files": "Files to put in the working directory (/work) before the code runs, such as a data set to analyse: " +
			"the code opens them by their path (open(\"data/sales.csv\")). Text goes as it is; binary content (an image, a " +
			"spreadsheet, a zip) as base64 with \"encoding\": \"base64\". In a session they stay for later calls. " +
			"Not under out/, which is for the code's results. " + caps,
		"files[].path":     "Where the file goes, relative to /work, such as \"sales.csv\" or \"data/2024/sales.csv\" (directories are made). No absolute paths, no .. components.",
		"files[].content":  "The file's content: its text, or base64 with \"encoding\": \"base64\".",
		"files[].encoding": "\"utf-8\" (the default) for text, \"base64\" for anything else.",
	}
	if len(allow) > 0 {
		d["network_allow"] = "Hosts the code may reach over HTTP or HTTPS, each as \"host:port\" (\"api.github.com:443\", \"*.example.org:443\" for any name below example.org). " +
			"Allowed here: " + patternsText(allow) + ". Leave it out and the code has no network at all. " +
			"In a session it is fixed by the call that creates the session."
	}
	return d
}

// validateArgDocs describes validate_python's arguments.
func validateArgDocs(info *api.Info) docs {
	return docs{
		"code":   fmt.Sprintf("The Python program to check. At most %d bytes.", api.MaxStdinBytes),
		"python": pythonDoc(info),
	}
}

// resetArgDocs describes reset_session's arguments.
var resetArgDocs = docs{
	"session": "The session's name, as given to run_python.",
}

// pythonDoc describes a "python" argument.
func pythonDoc(info *api.Info) string {
	return "Python version to use, by version prefix such as \"3.12\". Empty or absent means the default " +
		"(or the one the code's PEP 723 requires-python asks for). Available: " + pythonsText(info)
}

// sessionDoc describes run_python's "session" argument.
func sessionDoc() string {
	return "A name you choose, such as \"analysis\", for a Python session that keeps its state: variables, functions, imports and files in /work " +
		"persist across calls with the same name, so load data or do slow set-up once and use it in later calls. " +
		"The first call with a name creates the session with that call's python, dependencies, env and memory_mb, which are then fixed: " +
		"later calls may leave them out (or repeat them), and a call asking for others is refused. timeout_seconds applies to each call. " +
		"Leave it out and every call is a fresh interpreter. " +
		fmt.Sprintf("A session is private to this MCP connection and ends with it (at most %d at once); ", maxSessionsPerConn) +
		fmt.Sprintf("it expires after %s without a call, and then calls with its name fail until reset_session is called. ", idleText(0)) +
		"One call at a time per session. " +
		fmt.Sprintf("1 to %d letters, digits, '_', '.' or '-'.", maxSessionName)
}

// The output schemas' descriptions: the structured content of run_python
// (api.Result), check_environment (api.Info), validate_python and
// reset_session.

var resultDocs = docs{
	"cpu_ms":                         "CPU time of the whole run in milliseconds",
	"denials":                        "what the sandbox refused the program, such as a connection to a host outside network_allow; identical refusals are counted",
	"denials[].count":                "how many times it was refused",
	"denials[].detail":               "what was refused and why",
	"denials[].host":                 "the host the program asked for",
	"denials[].kind":                 "network, syscall, or secret (a secret's placeholder sent where the secret may not go)",
	"denials[].secret":               "for kind secret: the secret's name",
	"denials[].port":                 "the port it asked for",
	"denials[].reason":               "not_allowed (outside network_allow), private_address, forbidden_address (cloud metadata and the like), connection_limit or byte_limit; for a secret: secret_host (to a host the secret is not for) or secret_plain_http",
	"secret_uses":                    "the requests that used a secret (a credential the sandbox keeps outside and puts in requests to its hosts), by kind, counted",
	"secret_uses[].secret":           "the secret's name (its variable)",
	"secret_uses[].host":             "the host the request went to",
	"secret_uses[].port":             "its port",
	"secret_uses[].method":           "the request's method",
	"secret_uses[].path":             "the request's path, without the query",
	"secret_uses[].status":           "the response's status (403 when refused)",
	"secret_uses[].outcome":          "injected (the value went to its host) or refused (the placeholder was sent where the secret may not go)",
	"secret_uses[].count":            "how many such requests",
	"display":                        "rich output in order: plots and objects shown with cellblock.display or left as the last expression",
	"display[].data":                 "MIME type to content: text/plain always; text/html, image/svg+xml, text/markdown as text; application/json as JSON; image/png and image/jpeg as a note in place of their base64, \"(sent as image content N)\" or why the image was left out",
	"display[].metadata":             "under cellblock.dropped: a list of {mime, bytes, reason}, the content the sandbox left out of this item and why (over a size cap, not a valid image); the item keeps its text/plain",
	"duration_ms":                    "wall time of the program in milliseconds",
	"environment":                    "the dependency environment attached to the run, if any",
	"environment.cache_hit":          "the environment was already built",
	"environment.id":                 "environment id",
	"environment.packages[].hash":    "hash of the installed distribution",
	"environment.packages[].name":    "distribution name",
	"environment.packages[].version": "installed version",
	"environment.policy":             "install policy",
	"error":                          "set when the run could not be carried out as asked (bad request, over a limit, unknown Python, dependencies that cannot be installed, busy, ...); null otherwise",
	"error.field":                    "the request field at fault, when there is one",
	"error.message":                  "what went wrong",
	"error.type":                     "error class, one of: " + errorTypesText(),
	"exception":                      "the uncaught exception that ended the code, as data",
	"exception.line":                 "the line of the code it was raised on, when known",
	"exception.message":              "str() of the exception",
	"exception.traceback":            "the traceback Python printed (also in stderr), capped",
	"exception.type":                 "the exception's class, such as ZeroDivisionError or json.decoder.JSONDecodeError",
	"exit_code":                      "the program's exit status; 128+N when it was killed by signal N",
	"files":                          "the files the code wrote under /work/out (in a session: those new or changed in this call), each also a resource link cellblock://artifacts/SHA256/PATH",
	"files[].content":                "its text, for a small text file",
	"files[].mime":                   "its media type, from its name and content",
	"files[].path":                   "the file's path under /work/out",
	"files[].sha256":                 "its SHA-256, which names its resource",
	"files[].size":                   "its size in bytes",
	"files_skipped":                  "what was under /work/out but did not come back, and why: not a regular file (a symbolic link, a FIFO), over a cap, changed while it was read",
	"files_skipped[].path":           "its path under /work/out",
	"files_skipped[].reason":         "why it did not come back",
	"files_skipped[].size":           "its size, for a file",
	"limits":                         "the limits that applied to the run",
	"limits.cpus":                    "CPU quota in cores",
	"limits.memory_bytes":            "memory limit in bytes",
	"limits.output_bytes":            "cap on each of stdout and stderr in bytes",
	"limits.pids":                    "maximum number of processes and threads",
	"limits.timeout_ms":              "wall-clock timeout in milliseconds",
	"limits.tmp_bytes":               "size of /tmp and of the working directory in bytes",
	"memory_peak_bytes":              "peak memory of the whole run in bytes",
	"oom_killed":                     "the memory limit ended the program",
	"phases":                         "where the daemon spent the run's time, in microseconds",
	"phases.collect_us":              "draining the output and reading the statistics",
	"phases.create_us":               "creating the cgroup and the container (0 for a prestarted jail)",
	"phases.env_us":                  "getting the dependency environment: a few microseconds for a cached one, the whole build otherwise",
	"phases.handover_us":             "the part of program_us before the code ran: handing it to the interpreter already running in the jail",
	"phases.prestarted":              "the jail was built and started before the request arrived (new and unused all the same)",
	"phases.program_us":              "the program running (wall clock)",
	"phases.queue_us":                "waiting for a free slot",
	"phases.start_us":                "namespaces, mounts, seccomp and launch (only the launch for a prestarted jail)",
	"phases.teardown_us":             "removing the cgroup and the container",
	"phases.tools_us":                "the part of program_us during which the code waited for tool calls",
	"python":                         "the Python version the run used",
	"run_id":                         "identifies the run in the daemon's logs",
	"session":                        "the session the code ran in, after the run: its id, how many runs it has carried out, its state (alive, or lost when its interpreter died and its variables are gone) and when it expires unless used again",
	"session.execution_count":        "runs carried out in the session so far",
	"session.expires_at":             "when the session ends unless another run comes first (RFC 3339)",
	"session.id":                     "the session's id",
	"session.state":                  "alive or lost",
	"stderr":                         "captured standard error, where tracebacks go",
	"stderr_truncated":               "stderr went past the output limit and was cut off",
	"stdout":                         "captured standard output (UTF-8, invalid bytes replaced)",
	"stdout_truncated":               "stdout went past the output limit and was cut off",
	"timed_out":                      "the wall-clock timeout ended the program",
	"tool_calls":                     "the code's calls of tools (cellblock.tools.NAME), in order",
	"tool_calls[].duration_ms":       "how long the call took",
	"tool_calls[].error":             "why the call failed, as the code's ToolError said",
	"tool_calls[].name":              "the tool",
	"tool_calls[].ok":                "the tool returned a result",
	"tool_calls[].outcome":           "ok, error (the tool failed), refused (not a declared tool, or arguments that do not match its schema or are too large), timeout, too_large (its answer) or canceled",
	"tool_calls_over_cap":            "tool calls refused, unlisted, because the run had made as many as it may",
	"value":                          "the value of the code's last expression, when it is one and not None",
	"value.json":                     "the value itself, when it is JSON-serialisable and small enough",
	"value.repr":                     "repr() of the value, capped",
	"value.type":                     "the value's type name, such as int or DataFrame",
	"environment.packages":           "the packages installed in it, with their versions",
}

var infoDocs = docs{
	"cgroup_mode":                          "how runs are put in cgroups",
	"defaults":                             "limits a run gets when it asks for none",
	"defaults.cpus":                        "CPU quota in cores",
	"defaults.memory_bytes":                "memory limit in bytes",
	"defaults.output_bytes":                "cap on each of stdout and stderr in bytes",
	"defaults.pids":                        "maximum number of processes and threads",
	"defaults.timeout_ms":                  "wall-clock timeout in milliseconds",
	"defaults.tmp_bytes":                   "size of /tmp and of the working directory in bytes",
	"dependencies":                         "how dependency environments are built and cached",
	"dependencies.builds":                  "environments built since the daemon started",
	"dependencies.cache_budget_bytes":      "the cache's size budget in bytes",
	"dependencies.cache_bytes":             "size of the cache in bytes",
	"dependencies.cache_entries":           "environments in the cache",
	"dependencies.index_url":               "the package index",
	"dependencies.installer":               "the installer used (uv or pip)",
	"dependencies.no_index":                "no package index is used",
	"dependencies.only_binary":             "only pre-built wheels are installed",
	"dependencies.policy":                  "the install policy: wheels-only or allow-sdist",
	"display":                              "caps on a run's rich output (plots, HTML), value and exception",
	"display.item_bytes":                   "cap on one display item; over it only its text/plain is kept",
	"display.items":                        "most display items a run keeps",
	"display.repr_bytes":                   "cap on a value's repr and each text/plain",
	"display.total_bytes":                  "cap on all of a run's display items together",
	"display.traceback_bytes":              "cap on an exception's traceback",
	"files":                                "caps on files put into runs (run_python's files) and given back by them (what the code writes under /work/out)",
	"files.in_bytes":                       "most bytes of files one call may put in, all together",
	"files.in_count":                       "most files one call may put in",
	"files.inline_bytes":                   "largest text file returned with its text",
	"files.inline_total_bytes":             "most text of a run's files returned with them",
	"files.out_bytes":                      "most bytes of files a run gives back, all together",
	"files.out_count":                      "most files a run gives back",
	"files.out_file_bytes":                 "largest file a run gives back",
	"files.store_bytes":                    "the artifact store's quota",
	"files.store_files":                    "this user's files in the store now",
	"files.store_ttl_seconds":              "how long a produced file stays readable",
	"files.store_used_bytes":               "what this user's files in the store count against its quota now",
	"filesystem":                           "what a run may write",
	"max_concurrent":                       "runs that execute at once",
	"maxima":                               "the most a run may ask for",
	"maxima.cpus":                          "CPU quota in cores",
	"maxima.memory_bytes":                  "memory limit in bytes",
	"maxima.output_bytes":                  "cap on each of stdout and stderr in bytes",
	"maxima.pids":                          "maximum number of processes and threads",
	"maxima.timeout_ms":                    "wall-clock timeout in milliseconds",
	"maxima.tmp_bytes":                     "size of /tmp and of the working directory in bytes",
	"network":                              "the network policy of runs",
	"network_policy":                       "what runs may ask of the network (network_allow) and its caps",
	"secrets":                              "the daemon's secrets, their hosts and who may use them (shown to root only; never their values)",
	"secrets[].name":                       "the secret's name",
	"secrets[].hosts":                      "where its value goes",
	"secrets[].allow_uids":                 "uids that may use it besides root",
	"network_policy.allow":                 "the daemon's bound: the most any run may ask for; empty: no network",
	"network_policy.allow_private":         "allowed names may resolve to loopback and private addresses",
	"network_policy.builds":                "what dependency builds may reach (the package index)",
	"network_policy.max_bytes":             "bytes a run's connections may carry in all",
	"network_policy.max_connections":       "connections a run may have open at once",
	"network_policy.max_connections_total": "connections a run may make in all",
	"network_policy.proxy":                 "the proxy's URL inside the sandbox",
	"prestart":                             "jails kept started ahead of requests for runs on the default Python without dependencies",
	"prestart_ready":                       "of those, how many wait now",
	"prestart_shapes":                      "how many other kinds of run (dependencies, another Python, another tmp size) keep one started jail each once used; a repeated run of the same script with dependencies starts as fast as one without",
	"prestart_shapes_ready":                "of those, how many wait now",
	"pythons":                              "the Python interpreters runs can use",
	"pythons[].default":                    "used when a run names no version",
	"pythons[].id":                         "interpreter id",
	"pythons[].version":                    "full version, such as 3.12.3",
	"queue_size":                           "runs that may wait for a slot",
	"queued":                               "runs waiting now",
	"running":                              "runs executing now",
	"seccomp":                              "runs are under a seccomp filter",
	"tools":                                "caps on the tool calls of a run's code",
	"tools.defaults":                       "what a run gets",
	"tools.defaults.argument_bytes":        "size of one call's arguments, as JSON",
	"tools.defaults.calls":                 "tool calls a run may make",
	"tools.defaults.result_bytes":          "size of one call's answer, as JSON",
	"tools.defaults.timeout_ms":            "how long a call may take",
	"tools.maxima":                         "the most a run may ask for",
	"tools.maxima.argument_bytes":          "size of one call's arguments, as JSON",
	"tools.maxima.calls":                   "tool calls a run may make",
	"tools.maxima.result_bytes":            "size of one call's answer, as JSON",
	"tools.maxima.timeout_ms":              "how long a call may take",
	"user_namespace":                       "runs are in a user namespace",
	"version":                              "cellblockd's version",
	"dependencies.find_links":              "directories of wheels dependencies may come from",
}

var validationDocs = docs{
	"metadata.error":             "what is wrong with the block, naming its line",
	"metadata.present":           "the code has a '# /// script' block",
	"metadata.requires_python":   "the block's requires-python",
	"syntax.checked":             "the syntax check was carried out",
	"syntax.error.column":        "1-based column",
	"syntax.error.end_column":    "1-based column where the error ends",
	"syntax.error.end_line":      "1-based line where the error ends",
	"syntax.error.line":          "1-based line",
	"syntax.error.message":       "the compiler's message",
	"syntax.error.text":          "the offending source line",
	"syntax.error.type":          "exception class, such as SyntaxError or IndentationError",
	"syntax.ok":                  "the code compiles",
	"syntax.python":              "the Python version that compiled it",
	"syntax.reason":              "why the check could not be carried out, when checked is false",
	"syntax.warnings[].category": "warning class, such as SyntaxWarning",
	"syntax.warnings[].line":     "1-based line",
	"syntax.warnings[].message":  "the warning",
	"valid":                      "the code compiles and its PEP 723 metadata (if any) is well formed",
	"syntax":                     "the syntax check: whether the code compiles, and its errors and warnings",
	"syntax.error":               "the syntax error, when the code does not compile; null otherwise",
	"syntax.warnings":            "what the compiler warned of",
	"metadata":                   "the PEP 723 metadata block: whether there is one, what it asks for, what is wrong with it",
	"metadata.dependencies":      "the requirements the block lists",
}

var resetDocs = docs{
	"id":      "the sandbox's id of the session that had the name",
	"outcome": "what became of the session that had the name: ended, already_ended (it had expired or been lost), not_confirmed (the sandbox could not be asked; it ends when idle), or none (no session had the name)",
	"session": "the session's name",
}
