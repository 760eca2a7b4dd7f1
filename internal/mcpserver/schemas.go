package mcpserver

import (
	"encoding/json"
	"fmt"

	"github.com/cellblock/cellblock/internal/api"
)

// The tools' input and output schemas (JSON Schema): their parameters,
// bounded by the daemon's /v1/info, and their structured content.

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

// toolCallsSchema describes Result.ToolCalls.
func toolCallsSchema() map[string]any {
	return map[string]any{
		"type":        "array",
		"description": "the code's calls of tools (cellblock.tools.NAME), in order",
		"items": map[string]any{
			"type": "object",
			"properties": map[string]any{
				"name":        typed("string", "the tool"),
				"duration_ms": typed("integer", "how long the call took"),
				"ok":          typed("boolean", "the tool returned a result"),
				"outcome":     typed("string", "ok, error (the tool failed), refused (not a declared tool, or arguments that do not match its schema or are too large), timeout, too_large (its answer) or canceled"),
				"error":       typed("string", "why the call failed, as the code's ToolError said"),
			},
			"required": []string{"name", "duration_ms", "ok", "outcome"},
		},
	}
}

// toolCapsSchema describes Info.Tools.
func toolCapsSchema() map[string]any {
	caps := func(desc string) map[string]any {
		return map[string]any{
			"type":        "object",
			"description": desc,
			"properties": map[string]any{
				"calls":          typed("integer", "tool calls a run may make"),
				"argument_bytes": typed("integer", "size of one call's arguments, as JSON"),
				"result_bytes":   typed("integer", "size of one call's answer, as JSON"),
				"timeout_ms":     typed("integer", "how long a call may take"),
			},
		}
	}
	return map[string]any{
		"type":        "object",
		"description": "caps on the tool calls of a run's code",
		"properties": map[string]any{
			"defaults": caps("what a run gets"),
			"maxima":   caps("the most a run may ask for"),
		},
		"required": []string{"defaults", "maxima"},
	}
}
