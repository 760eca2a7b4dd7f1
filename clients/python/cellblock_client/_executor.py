"""SandboxExecutor: code written for a home-made "tools object" executor,
run in a fresh cellblock jail instead of exec() in the host process.

Such executors run the model's code with a ``tools`` object in its
globals (``tools.search("x")`` calls the host's method), ``json`` already
imported, and take a result from ``__return_value__`` or the last
expression. Here each execute() is one run of its own: a small driver,
sent as the run's code, takes the model's code from the run's inputs,
binds ``tools`` and ``json``, runs it in the jail's __main__ (its last
expression evaluated, as a notebook cell's), and reports how it ended as
the cell's value. Every public method of the tools object is declared as a
tool; positional arguments are matched to its parameter names in the jail.
There is no pattern blocklist: the jail is the boundary, so open,
subprocess and eval work inside it.
"""

from __future__ import annotations

import inspect
import json
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ._client import Client
from ._errors import CellblockError
from ._tools import ToolSpec, valid_name

__all__ = ["SandboxExecutor", "ExecutionResult"]

# A return value whose JSON is larger than this comes back as a file
# rather than in the cell's value (whose JSON the daemon caps at 64 KiB).
_INLINE_RETURN = 48 << 10
_RETURN_FILE = "cellblock-return-value.json"

# The driver: one cell. Its own names are gone before the code runs.
_DRIVER = r'''
def _cellblock_main(src, params):
    import ast, builtins, json, os, sys, traceback
    import cellblock
    g = globals()
    for k in ("_cellblock_main", "_cellblock_code", "_cellblock_params"):
        g.pop(k, None)

    def raised(err):
        # A tool's exception as the code would have seen it: the builtin
        # class its message names, when there is one, and ToolError.
        name, _, _ = err.partition(":")
        base = getattr(builtins, name, None)
        if isinstance(base, type) and issubclass(base, Exception) and base is not Exception:
            try:
                cls = type(name, (cellblock.ToolError, base), {"__module__": "tools"})
                return cls(err[len(name) + 1:].strip())
            except TypeError:
                pass
        return cellblock.ToolError(err)

    class Tools:
        """The host's tools: tools.NAME(...) calls NAME on the host."""
        def __init__(self, params):
            self._params = params

        def __dir__(self):
            return sorted(self._params)

        def __getattr__(self, name):
            if name.startswith("_") or name not in self._params:
                raise AttributeError("tools has no %r; it has %s" % (name, ", ".join(sorted(self._params)) or "none"))
            names, more = self._params[name]

            def tool(*args, **kwargs):
                if len(args) > len(names):
                    raise TypeError("%s() takes %d positional arguments but %d were given" % (name, len(names), len(args)))
                for n, v in zip(names, args):
                    if n in kwargs:
                        raise TypeError("%s() got multiple values for argument %r" % (name, n))
                    kwargs[n] = v
                try:
                    return cellblock.call_tool(name, kwargs)
                except cellblock.ToolError as e:
                    raise raised(str(e)) from None
            tool.__name__ = tool.__qualname__ = name
            return tool

        def __repr__(self):
            return "<tools: %s>" % ", ".join(sorted(self._params))

    g["tools"] = Tools(params)
    g["json"] = json
    import linecache
    linecache.cache["<code>"] = (len(src), None, src.splitlines(True), "<code>")
    try:
        tree = compile(src, "<code>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        body = compile(tree, "<code>", "exec", dont_inherit=True)
        last = compile(last, "<code>", "eval", dont_inherit=True) if last is not None else None
    except SyntaxError as e:
        return {"ok": False, "error": "".join(traceback.format_exception_only(type(e), e)).strip()}
    try:
        exec(body, g)
        value = eval(last, g) if last is not None else None
    except BaseException as e:
        # The traceback without the driver's own frames.
        me = sys._getframe().f_code.co_filename
        frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename != me]
        tb = "".join(["Traceback (most recent call last):\n"] + traceback.format_list(frames) +
                     traceback.format_exception_only(type(e), e)).strip()
        return {"ok": False, "error": tb}
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    if "__return_value__" in g:
        value = g["__return_value__"]
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return {"ok": True, "repr": repr(value)}
    if len(text) > __INLINE__:
        os.makedirs("/work/out", exist_ok=True)
        with open("/work/out/__FILE__", "w", encoding="utf-8") as f:
            f.write(text)
        return {"ok": True, "file": "__FILE__"}
    return {"ok": True, "value": value}

_cellblock_main(_cellblock_code, _cellblock_params)
'''.replace("__INLINE__", str(_INLINE_RETURN)).replace("__FILE__", _RETURN_FILE)


@dataclass
class ExecutionResult:
    """How one execute() ended: ``success``; ``output``, the code's
    standard output and error as they came, cut to max_output_size;
    ``error`` (the traceback, or why it stopped) or None; ``execution_time``
    in seconds; ``return_value``, the value of ``__return_value__`` if the
    code set it, else of its last expression (JSON data as it is,
    anything else as its repr)."""
    success: bool
    output: str
    error: Optional[str]
    execution_time: float
    return_value: Any = None


class SandboxExecutor:
    """Runs code written for a tools-object executor in a fresh cellblock
    jail each time.

    tools_api: an object whose public methods are the tools (or a dict of
    name to callable). timeout: seconds per execution. max_output_size:
    the most characters of output kept. Beyond that: ``client`` or
    ``socket`` (the daemon), ``memory``, ``python``, ``with_``,
    ``allow_net``, as Client.run takes them.
    """

    def __init__(self, tools_api: Any, timeout: float = 30, max_output_size: int = 10000, *,
                 client: Optional[Client] = None, socket: Optional[str] = None, memory: Any = None,
                 python: Optional[str] = None, with_: Optional[Sequence[str]] = None,
                 allow_net: Optional[Sequence[str]] = None) -> None:
        self.tools_api = tools_api
        self.timeout = timeout
        self.max_output_size = int(max_output_size)
        self.client = client if client is not None else Client(socket)
        self.memory = memory
        self.python = python
        self.with_ = with_
        self.allow_net = allow_net
        self._specs, self._params = _tools_of(tools_api)

    def validate_code(self, code: str) -> Tuple[bool, Optional[str]]:
        """(True, None) when code compiles, else (False, the syntax error).
        Nothing is refused for what it does: the jail is the boundary."""
        if not isinstance(code, str):
            return False, "code must be a str, not %s" % type(code).__name__
        try:
            compile(code, "<code>", "exec", dont_inherit=True)
        except SyntaxError as e:
            where = " (line %d)" % e.lineno if e.lineno else ""
            return False, "%s: %s%s" % (type(e).__name__, e.msg, where)
        except ValueError as e:  # a NUL byte
            return False, "ValueError: %s" % e
        return True, None

    def execute(self, code: str) -> ExecutionResult:
        """Run code in a fresh jail and report how it went."""
        start = time.monotonic()
        chunks: List[str] = []
        size = [0]
        limit = self.max_output_size

        def on_output(stream: str, text: str) -> None:
            if size[0] <= limit:
                chunks.append(text)
            size[0] += len(text)

        try:
            res = self.client._run(self._request(code), self._specs, on_output, fallback_str=True)
        except CellblockError as e:
            return ExecutionResult(False, "", "the sandbox could not run the code: %s" % e,
                                   time.monotonic() - start)
        output = "".join(chunks)
        if len(output) > limit or res.stdout_truncated or res.stderr_truncated:
            output = output[:limit] + "\n... (output truncated: %d characters in all)" % max(size[0], len(output))
        elapsed = time.monotonic() - start
        if res.timed_out:
            return ExecutionResult(False, output, "Execution timed out after %g seconds" % self.timeout, elapsed)
        if res.oom_killed:
            return ExecutionResult(False, output, "Execution ran out of memory (the limit is %d bytes)"
                                   % (res.limits.memory_bytes if res.limits else 0), elapsed)
        report = res.value.json if res.value is not None and res.value.has_json else None
        if not isinstance(report, dict):
            why = res.exception.traceback if res.exception is not None else "exit status %d" % res.exit_code
            return ExecutionResult(False, output, "the code ended the sandbox's interpreter: %s" % why.strip(),
                                   elapsed)
        if not report.get("ok"):
            return ExecutionResult(False, output, str(report.get("error") or "the code failed"), elapsed)
        value: Any = report.get("value")
        if "repr" in report:
            value = report["repr"]
        elif "file" in report:
            value = self._return_file(res)
        return ExecutionResult(True, output, None, elapsed, value)

    def _request(self, code: str) -> Dict[str, Any]:
        from ._types import jail_fields, run_fields
        req = run_fields(_DRIVER, cell=True, inputs={"_cellblock_code": code, "_cellblock_params": self._params},
                         timeout=self.timeout, output_bytes=min(max(self.max_output_size * 4 + 4096, 64 << 10),
                                                                64 << 20))
        req.update(jail_fields(memory=self.memory, python=self.python, with_=self.with_, allow_net=self.allow_net))
        if not isinstance(code, str):
            raise TypeError("code must be a str, not %s" % type(code).__name__)
        return req

    def _return_file(self, res: Any) -> Any:
        for f in res.files:
            if f.path == _RETURN_FILE:
                try:
                    return json.loads(self.client.artifact(f.sha256))
                except (CellblockError, ValueError):
                    break
        return None


def _tools_of(api: Any) -> Tuple[Dict[str, ToolSpec], Dict[str, Any]]:
    """The tools of a tools object (its public methods; a dict's items),
    and for the driver each one's parameter names and whether it takes
    **kwargs."""
    funcs: Dict[str, Callable[..., Any]] = {}
    if isinstance(api, Mapping):
        funcs = dict(api)
    elif api is not None:
        for name in dir(api):
            if name.startswith("_"):
                continue
            try:
                attr = getattr(api, name)
            except Exception:
                continue
            if callable(attr) and not inspect.isclass(attr):
                funcs[name] = attr
    specs: Dict[str, ToolSpec] = {}
    params: Dict[str, Any] = {}
    for name, fn in funcs.items():
        if not valid_name(name):
            continue  # not a name the code could call as tools.NAME
        specs[name] = ToolSpec(name, fn, strict=False)
        names: List[str] = []
        more = False
        try:
            for p in inspect.signature(fn).parameters.values():
                if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
                    names.append(p.name)
                elif p.kind is inspect.Parameter.VAR_KEYWORD:
                    more = True
        except (TypeError, ValueError):
            more = True
        params[name] = [names, more]
    return specs, params
