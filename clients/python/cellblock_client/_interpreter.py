"""Interpreter: DSPy's CodeInterpreter protocol on a cellblock session.

It takes the constructor arguments of DSPy's PythonInterpreter
(dspy/primitives/python_interpreter.py), so that swapping the class is the
whole change, and behaves as it does: state kept between execute() calls,
variables injected as top-level names, tools callable by name, SUBMIT(...)
ending the code with a FinalOutput, and the same errors (SyntaxError,
CodeExecutionError for the code's own failures, CodeInterpreterError for
a failure of the sandbox, which is final for the instance). Where DSPy is
importable its own FinalOutput and error classes are used, so that its
isinstance checks pass; otherwise this module's, with the same names.

How it maps onto the API. One session per instance (start()). Before the
first run, and again whenever the tools or output_fields change, a hidden
cell defines in the session a function per tool (the tool's parameters,
calling cellblock.call_tool) and SUBMIT (output_fields' names as its
parameters). Each execute() is one cell run that declares the tools;
variables go as the run's inputs when JSON carries them exactly and they
are small, else as files the session keeps, loaded by a hidden cell first.
SUBMIT writes its fields as JSON under /work/.cellblock and raises an
exception of its own, which the caller reads the file for.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import json
import keyword
import math
import os
import re
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Type

from ._client import Client, Session
from ._errors import (BadRequestError, CellblockError, OverLimitError, SessionBusyError, TooLargeError,
                      UnknownPythonError)
from ._tools import ToolSpec, jsonable, NotJSON, valid_name
from ._types import Result

__all__ = ["Interpreter", "FinalOutput", "CodeInterpreterError", "CodeExecutionError", "dspy_class"]


class CodeInterpreterError(RuntimeError):
    """A failure of the interpreter itself (setup, a lost session, the
    protocol) rather than of the code; after a lost session the instance is
    done. DSPy's own class when DSPy is importable."""


class CodeExecutionError(CodeInterpreterError):
    """The code raised: recoverable, the session goes on."""


class FinalOutput:
    """What execute() returns when the code called SUBMIT(...): ``output``
    is the dict of the fields it was given."""

    def __init__(self, output: Any) -> None:
        self.output = output

    def __repr__(self) -> str:
        return "FinalOutput(%r)" % (self.output,)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FinalOutput):
            return NotImplemented
        return bool(self.output == getattr(other, "output", None))

    __hash__ = None  # type: ignore[assignment]


for _c in (CodeInterpreterError, CodeExecutionError, FinalOutput):
    _c.__module__ = "cellblock_client"

_OWN: Dict[str, type] = {"FinalOutput": FinalOutput, "CodeInterpreterError": CodeInterpreterError,
                         "CodeExecutionError": CodeExecutionError}
_dspy_module: Any = None
_dspy_looked = False


def _dspy() -> Any:
    """dspy.primitives.code_interpreter when DSPy can be imported, else None."""
    global _dspy_module, _dspy_looked
    if not _dspy_looked:
        _dspy_looked = True
        try:
            if "dspy" in sys.modules or importlib.util.find_spec("dspy") is not None:
                import dspy.primitives.code_interpreter as m  # type: ignore[import-not-found]
                _dspy_module = m
        except Exception:  # a broken install: our own classes
            _dspy_module = None
    return _dspy_module


def dspy_class(name: str) -> Type[Any]:
    """FinalOutput, CodeInterpreterError or CodeExecutionError: DSPy's own
    when DSPy is importable, else this module's."""
    m = _dspy()
    if m is not None and hasattr(m, name):
        return getattr(m, name)  # type: ignore[no-any-return]
    return _OWN[name]


def _with_callbacks(fn: Callable[..., Any]) -> Callable[..., Any]:
    """DSPy's with_callbacks around fn when DSPy is loaded (so that its
    on_interpreter_* callbacks see this interpreter as they see its own),
    fn itself otherwise."""
    wrapped: List[Callable[..., Any]] = []

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        if "dspy" in sys.modules:
            if not wrapped:
                try:
                    from dspy.utils.callback import with_callbacks  # type: ignore[import-not-found]
                    wrapped.append(with_callbacks(fn))
                except Exception:
                    wrapped.append(fn)
            return wrapped[0](self, *args, **kwargs)
        return fn(self, *args, **kwargs)

    method.__name__ = fn.__name__
    method.__qualname__ = fn.__qualname__
    method.__doc__ = fn.__doc__
    method.__wrapped__ = fn  # type: ignore[attr-defined]
    return method


class _Instructions:
    """execution_instructions: a string on the class (DSPy's RLM reads it
    from the factory, without making an interpreter), and on an instance
    one that also says what that instance was given."""

    def __get__(self, obj: Any, owner: Any = None) -> str:
        if obj is None:
            return GENERIC_INSTRUCTIONS
        return obj._instructions()


GENERIC_INSTRUCTIONS = (
    "Python runs in a cellblock sandbox: real CPython on Linux, in a jail of its own with memory and time limits. "
    "State persists across executions. The standard library is available; subprocesses and native extensions "
    "work inside the jail. The working directory is /work. Host files, environment variables and network access "
    "require explicit permission."
)

# Where SUBMIT leaves its fields and variables are kept, under /work.
_STATE_DIR = ".cellblock"
_SUBMIT_FILE = _STATE_DIR + "/submit.json"
_VARS_DIR = _STATE_DIR + "/vars"
# The types DSPy puts in a tool's or SUBMIT's signature.
_SIMPLE = {str: "str", int: "int", float: "float", bool: "bool", list: "list", dict: "dict", type(None): "None"}
# Inputs (JSON in the run request) take at most this much in all; larger
# variables go as files.
_INPUT_BUDGET = 256 << 10
# A variable's file is put in parts of at most this size.
_PART = 8 << 20

# The hidden cell's helpers, defined once per session: the call of a tool
# from its function, SUBMIT's end of the code, and the loading of
# variables kept as files.
_BASE_PRELUDE = '''
import cellblock as _cellblock


class _CellblockToolError(_cellblock.ToolError, RuntimeError):
    """A tool call failed (a RuntimeError too, as DSPy's tools raise)."""


_CellblockToolError.__module__ = "cellblock"
_CellblockToolError.__name__ = _CellblockToolError.__qualname__ = "ToolError"


_cellblock_absent = object()  # a parameter left to the tool's own default


class _CellblockSubmit(BaseException):
    """SUBMIT(...) was called: the code ends, and its fields go to the caller."""


def _cellblock_call(_name, _args):
    try:
        return _cellblock.call_tool(_name, _args)
    except _cellblock.ToolError as e:
        raise _CellblockToolError(str(e)) from None


def _cellblock_submit(_fields):
    import json, os

    def plain(v):
        if isinstance(v, (set, frozenset, tuple)):
            return list(v)
        return str(v)
    data = json.dumps(_fields, default=plain)
    os.makedirs("/work/%(state)s", exist_ok=True)
    with open("/work/%(submit)s", "w", encoding="utf-8") as f:
        f.write(data)
    raise _CellblockSubmit()


def _cellblock_load(_specs):
    import json
    g = globals()
    for name, kind, parts in _specs:
        text = "".join(open("/work/" + p, encoding="utf-8").read() for p in parts)
        g[name] = json.loads(text) if kind == "json" else eval(compile(text, "<variable %%s>" %% name, "eval"), {})
''' % {"state": _STATE_DIR, "submit": _SUBMIT_FILE}


def _py_literal(v: Any) -> str:
    """v (of the types DSPy injects) as a Python literal, for values JSON
    cannot carry exactly: dict keys that are not strings, inf and nan."""
    if v is None or isinstance(v, bool):
        return repr(v)
    if isinstance(v, float) and not math.isfinite(v):
        return "float(%r)" % str(v)
    if isinstance(v, (int, float, str)):
        return repr(v)
    if isinstance(v, list):
        return "[%s]" % ", ".join(_py_literal(x) for x in v)
    if isinstance(v, dict):
        return "{%s}" % ", ".join("%s: %s" % (_py_literal(k), _py_literal(x)) for k, x in v.items())
    raise CodeInterpreterError("Unsupported value type: %s" % type(v).__name__)


def _to_plain(v: Any, depth: int = 0) -> Any:
    """A variable's value as DSPy injects it: str, numbers, bool and None
    as they are; lists and tuples as lists; sets as (sorted) lists; dicts
    with their keys; pydantic models, dataclasses and named tuples as
    dicts. Anything else is refused with CodeInterpreterError."""
    if depth > 200:
        raise dspy_class("CodeInterpreterError")("a variable nests more than 200 deep")
    if v is None or isinstance(v, (str, bool, int, float)):
        return v
    if isinstance(v, dict):
        return {k if isinstance(k, (str, int, float, bool)) or k is None else str(k): _to_plain(x, depth + 1)
                for k, x in v.items()}
    if isinstance(v, (list, tuple)) and not hasattr(v, "_asdict"):
        return [_to_plain(x, depth + 1) for x in v]
    if isinstance(v, (set, frozenset)):
        try:
            items = sorted(v)
        except TypeError:
            items = list(v)
        return [_to_plain(x, depth + 1) for x in items]
    try:
        return _to_plain(jsonable(v), depth + 1)
    except NotJSON:
        raise dspy_class("CodeInterpreterError")("Unsupported value type: %s" % type(v).__name__) from None


def _json_exact(v: Any) -> bool:
    """JSON carries v exactly: string keys only, finite numbers."""
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, dict):
        return all(isinstance(k, str) and _json_exact(x) for k, x in v.items())
    if isinstance(v, list):
        return all(_json_exact(x) for x in v)
    return True


def _network(hosts: Sequence[str]) -> List[str]:
    """DSPy's (Deno's) --allow-net entries as allowlist patterns: a host
    without a port may be reached on 443 and 80."""
    out: List[str] = []
    for h in hosts:
        h = str(h).strip()
        if not h:
            continue
        if h.startswith("["):
            has_port = "]:" in h
        else:
            has_port = h.count(":") == 1
        out.extend([h] if has_port else [h + ":443", h + ":80"])
    return out


def _pretty_type(t: str) -> str:
    for prefix in ("__main__.", "builtins."):
        if t.startswith(prefix):
            return t[len(prefix):]
    return t


class Interpreter:
    """DSPy's CodeInterpreter, running code in a cellblock session.

    The arguments are those of dspy.PythonInterpreter, in its order:
    ``deno_command`` is accepted and ignored (there is no Deno);
    ``enable_read_paths``/``enable_write_paths`` are host files or
    directories copied to /work/BASENAME before the first execution (write
    paths copied back after each one when ``sync_files``);
    ``enable_env_vars`` names variables taken from this environment;
    ``enable_network_access`` hosts ("host" for ports 443 and 80, or
    "host:port") the code may reach; ``tools`` functions callable by name
    from the code; ``output_fields`` [{"name", "type"}] SUBMIT's
    parameters; ``callbacks`` DSPy callbacks. Beyond DSPy's: ``timeout``
    (seconds per execution), ``memory`` (bytes or "512M" for the session),
    ``python`` (a version such as "3.12"), ``with_`` (requirements),
    ``client`` or ``socket`` (the daemon to use).
    """

    execution_instructions = _Instructions()

    def __init__(self, deno_command: Optional[List[str]] = None,
                 enable_read_paths: Optional[Sequence[Any]] = None,
                 enable_write_paths: Optional[Sequence[Any]] = None,
                 enable_env_vars: Optional[Sequence[str]] = None,
                 enable_network_access: Optional[Sequence[str]] = None,
                 sync_files: bool = True,
                 tools: Optional[Dict[str, Callable[..., Any]]] = None,
                 output_fields: Optional[List[Dict[str, Any]]] = None,
                 callbacks: Optional[List[Any]] = None,
                 *, timeout: Optional[float] = None, memory: Optional[Any] = None, python: Optional[str] = None,
                 with_: Optional[Sequence[str]] = None, client: Optional[Client] = None,
                 socket: Optional[str] = None) -> None:
        if isinstance(deno_command, dict):
            raise TypeError("deno_command must be a list of strings, not a dict")
        self.deno_command = list(deno_command) if deno_command else []
        self.enable_read_paths = list(enable_read_paths or [])
        self.enable_write_paths = list(enable_write_paths or [])
        self._mounts: Dict[str, str] = {}
        for p in [*self.enable_read_paths, *self.enable_write_paths]:
            if not p:
                continue
            name = os.path.basename(os.path.normpath(os.fspath(p)))
            real = os.path.realpath(os.path.expanduser(os.fspath(p)))
            if self._mounts.get(name, real) != real:
                raise dspy_class("CodeInterpreterError")("Mounted files must have unique basenames inside the sandbox.")
            self._mounts[name] = real
        self.enable_env_vars = list(enable_env_vars or [])
        self.enable_network_access = list(enable_network_access or [])
        self.sync_files = sync_files
        self._tools: Dict[str, Callable[..., Any]] = dict(tools) if tools else {}
        self.output_fields = output_fields
        self.callbacks = list(callbacks or [])
        self.timeout = timeout
        self.memory = memory
        self.python = python
        self.with_ = list(with_ or [])
        self._own_client = client is None
        self._client = client if client is not None else Client(socket)
        self._session: Optional[Session] = None
        self._session_ended = False
        self._tools_registered = False
        self._prelude: Optional[str] = None
        self._uploaded: set = set()
        self._running = False
        self._python_version = ""

    # The protocol.

    @property
    def tools(self) -> Dict[str, Callable[..., Any]]:
        """The tools the code may call by name: the dict itself, which
        callers (DSPy's RLM) update in place."""
        return self._tools

    @tools.setter
    def tools(self, value: Dict[str, Callable[..., Any]]) -> None:
        self._tools = dict(value) if value else {}

    @_with_callbacks
    def start(self) -> None:
        """Open the session and copy the enabled files in. Idempotent; an
        instance whose session ended (shutdown, or lost) cannot start again."""
        self._check_active()
        if self._session is not None:
            return
        env = {n: os.environ[n] for n in (str(v).strip() for v in self.enable_env_vars) if n in os.environ}
        try:
            self._session = self._client.session(
                python=self.python, with_=self.with_ or None, env=env or None, memory=self.memory,
                allow_net=_network(self.enable_network_access) or None)
        except CellblockError as e:
            raise dspy_class("CodeInterpreterError")("could not start a cellblock session: %s" % e) from e
        self._python_version = self._session.python
        try:
            self._mount_files()
        except BaseException:
            self._end()
            raise

    @_with_callbacks
    def execute(self, code: str, variables: Optional[Dict[str, Any]] = None) -> Any:
        """Run code in the session; variables become top-level names first.
        Returns a FinalOutput when the code called SUBMIT(...), else the
        value of its final expression when that is not None (as DSPy's
        interpreter does), else its standard output, or None when there was
        none. Raises SyntaxError, CodeExecutionError (the code failed; the
        session goes on) or CodeInterpreterError (setup, or the session was
        lost: final)."""
        if self._running:
            raise dspy_class("CodeInterpreterError")(
                "Interpreter cannot execute recursively from one of its tools.")
        self._check_active()
        inputs, loads = self._variables(variables or {})
        self.start()
        session = self._session
        assert session is not None
        specs = self._tool_specs()
        self._register(session)
        if loads:
            self._load_variables(session, loads)
        res = self._run(session, code, inputs=inputs, tools=specs)
        ex = res.exception
        if ex is not None and ex.type.endswith("_CellblockSubmit"):
            final = self._read_submit(session)
            self._sync_files(session)
            return dspy_class("FinalOutput")(final)
        if res.timed_out:
            limit = res.limits.timeout_ms / 1000.0 if res.limits else self.timeout or 0
            raise dspy_class("CodeExecutionError")(
                "TimeoutError: the code ran past its time limit of %gs and was interrupted; the interpreter's "
                "state is kept" % limit)
        if ex is not None:
            if ex.type in ("SyntaxError", "IndentationError", "TabError") and \
                    not ex.traceback.startswith("Traceback"):
                raise _syntax_error(ex.type, ex.message, ex.line)
            tb = ex.traceback.strip() or "%s: %s" % (_pretty_type(ex.type), ex.message)
            exc = dspy_class("CodeExecutionError")(tb)
            exc.exception = ex  # type: ignore[attr-defined]
            raise exc
        self._sync_files(session)
        if res.value is not None:
            return res.value.json if res.value.has_json else res.value.repr
        return res.stdout or None

    def __call__(self, code: str, variables: Optional[Dict[str, Any]] = None) -> Any:
        return self.execute(code, variables)

    @_with_callbacks
    def shutdown(self) -> None:
        """End the session. The instance cannot be used again."""
        self._session_ended = True
        self._end()
        if self._own_client:
            self._client.close()

    def __enter__(self) -> "Interpreter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    @_with_callbacks
    def invoke_tool(self, tool_name: str, kwargs: Dict[str, Any]) -> Any:
        """Carry out one call of a tool from the code (DSPy's hook)."""
        if tool_name not in self._tools:
            raise dspy_class("CodeInterpreterError")("Unknown tool: %s" % tool_name)
        fn = self._tools[tool_name]
        args, kw = _split_positional(fn, kwargs)
        return fn(*args, **kw)

    # What it does underneath.

    def _check_active(self) -> None:
        if self._session_ended:
            raise dspy_class("CodeInterpreterError")(
                "Interpreter session has ended; create a new interpreter for a fresh session.")

    def _end(self) -> None:
        s, self._session = self._session, None
        if s is not None:
            try:
                s.close()
            except CellblockError:
                pass

    def _terminal(self, message: str, cause: Optional[BaseException] = None) -> BaseException:
        """End the instance: its session is lost or unusable."""
        self._session_ended = True
        self._end()
        err = dspy_class("CodeInterpreterError")(message)
        if cause is not None:
            err.__cause__ = cause
        return err

    def _run(self, session: Session, code: str, *, inputs: Optional[Dict[str, Any]] = None,
             tools: Optional[Dict[str, ToolSpec]] = None, cell: bool = True) -> Result:
        self._running = True
        try:
            res = session.client._run(
                dict(self._run_fields(session, code, inputs, cell)), tools or {}, None, fallback_str=True)
        except (BadRequestError, TooLargeError, OverLimitError, UnknownPythonError, SessionBusyError) as e:
            # The request, not the session: nothing was lost.
            raise dspy_class("CodeInterpreterError")("cellblock refused the execution: %s" % e) from e
        except CellblockError as e:
            raise self._terminal("the sandbox's session is gone (%s); its state was lost. Create a new "
                                 "interpreter for a fresh session." % e, e) from e
        finally:
            self._running = False
        if res.session is not None and res.session.state == "lost":
            why = "it ran out of memory" if res.oom_killed else "its interpreter died"
            raise self._terminal("the sandbox's session was lost: %s; its state is gone. Create a new "
                                 "interpreter for a fresh session." % why)
        return res

    def _run_fields(self, session: Session, code: str, inputs: Optional[Dict[str, Any]], cell: bool) -> Dict[str, Any]:
        from ._types import run_fields
        return run_fields(code, cell=cell, inputs=inputs or None, session=session.id, timeout=self.timeout)

    def _hidden(self, session: Session, code: str) -> Result:
        """A cell of the interpreter's own; it must not fail."""
        res = self._run(session, code)
        if res.exception is not None or res.timed_out:
            why = res.exception.traceback if res.exception is not None else "it timed out"
            raise dspy_class("CodeInterpreterError")("the interpreter's set-up failed in the sandbox: %s" % why)
        return res

    def _tool_specs(self) -> Dict[str, ToolSpec]:
        specs = {}
        for name, fn in self._tools.items():
            if not valid_name(name):
                raise dspy_class("CodeInterpreterError")(
                    "tool name %r cannot be declared to cellblock: an ASCII identifier that starts with a letter "
                    "and is no Python keyword" % (name,))
            specs[name] = ToolSpec(name, fn, strict=False,
                                   invoke=lambda args, _n=name: self.invoke_tool(_n, args))
        return specs

    def _register(self, session: Session) -> None:
        """Define the tools' functions and SUBMIT in the session, unless
        what is there is what they are now."""
        prelude = self._make_prelude()
        if self._tools_registered and prelude == self._prelude:
            return
        self._hidden(session, prelude)
        self._prelude = prelude
        self._tools_registered = True

    def _make_prelude(self) -> str:
        lines = [_BASE_PRELUDE]
        for name, fn in self._tools.items():
            lines.append(_tool_function(name, fn))
        lines.append(_submit_function(self.output_fields))
        return "\n".join(lines) + "\nNone\n"

    def _variables(self, variables: Dict[str, Any]) -> Tuple[Dict[str, Any], List[Tuple[str, str, str]]]:
        """(inputs for the run, [(name, kind, text)] to load from files)."""
        for key in variables:
            if not isinstance(key, str) or not key.isidentifier() or keyword.iskeyword(key) or key == "json":
                raise dspy_class("CodeInterpreterError")("Invalid variable name: '%s'" % (key,))
        inputs: Dict[str, Any] = {}
        loads: List[Tuple[str, str, str]] = []
        budget = _INPUT_BUDGET
        for name, value in variables.items():
            plain = _to_plain(value)
            if _json_exact(plain):
                text = json.dumps(plain, ensure_ascii=False, allow_nan=False)
                if len(text) <= budget and not name.startswith("__"):
                    budget -= len(text)
                    inputs[name] = plain
                else:
                    loads.append((name, "json", text))
            else:
                loads.append((name, "py", _py_literal(plain)))
        return inputs, loads

    def _load_variables(self, session: Session, loads: List[Tuple[str, str, str]]) -> None:
        specs = []
        for name, kind, text in loads:
            data = text.encode("utf-8")
            parts = []
            for i in range(0, max(len(data), 1), _PART):
                piece = data[i:i + _PART]
                digest = hashlib.sha256(piece).hexdigest()
                path = "%s/%s.part" % (_VARS_DIR, digest)
                if digest not in self._uploaded:
                    try:
                        session.put(path, piece)
                    except CellblockError as e:
                        raise dspy_class("CodeInterpreterError")(
                            "could not pass variable %r to the sandbox: %s" % (name, e)) from e
                    self._uploaded.add(digest)
                parts.append(path)
            specs.append([name, kind, parts])
        self._hidden(session, "_cellblock_load(%s)\nNone\n" % json.dumps(specs))

    def _read_submit(self, session: Session) -> Any:
        try:
            data = session.get(_SUBMIT_FILE)
            return json.loads(data.decode("utf-8"))
        except (CellblockError, ValueError, UnicodeDecodeError) as e:
            raise dspy_class("CodeInterpreterError")("could not read what SUBMIT was given: %s" % e) from e

    def _mount_files(self) -> None:
        session = self._session
        assert session is not None
        for p in [*self.enable_read_paths, *self.enable_write_paths]:
            if not p:
                continue
            host = os.fspath(p)
            if not os.path.exists(host):
                if p in self.enable_write_paths:
                    open(host, "a").close()
                else:
                    raise FileNotFoundError("Cannot mount non-existent file: %s" % host)
            name = os.path.basename(os.path.normpath(host))
            for rel, full in _walk(host):
                target = name if rel == "" else name + "/" + rel
                with open(full, "rb") as f:
                    data = f.read()
                try:
                    session.put(target, data)
                except CellblockError as e:
                    raise dspy_class("CodeInterpreterError")("could not copy %s into the sandbox: %s" % (full, e)) from e

    def _sync_files(self, session: Session) -> None:
        if not self.enable_write_paths or not self.sync_files:
            return
        dirs = [p for p in self.enable_write_paths if p and os.path.isdir(os.fspath(p))]
        listing: Dict[str, List[str]] = {}
        if dirs:
            names = [os.path.basename(os.path.normpath(os.fspath(p))) for p in dirs]
            res = self._hidden(session, _LIST_FILES % json.dumps(names))
            got = res.value.json if res.value is not None and res.value.has_json else {}
            listing = got if isinstance(got, dict) else {}
        for p in self.enable_write_paths:
            if not p:
                continue
            host = os.fspath(p)
            name = os.path.basename(os.path.normpath(host))
            if os.path.isdir(host):
                rels = [r for r in listing.get(name, []) if isinstance(r, str)]
                pairs = [(name + "/" + r, os.path.join(host, *r.split("/"))) for r in rels]
            else:
                pairs = [(name, host)]
            for remote, local in pairs:
                try:
                    data = session.get(remote)
                except CellblockError:
                    continue  # gone in the sandbox: the host's copy stays
                os.makedirs(os.path.dirname(local) or ".", exist_ok=True)
                with open(local, "wb") as f:
                    f.write(data)

    def _instructions(self) -> str:
        version = self._python_version or self.python or ""
        parts = ["Python%s runs in a cellblock sandbox: real CPython on Linux, in a jail of its own with memory and "
                 "time limits%s." % (" " + version if version else "",
                                     " (%gs per execution)" % self.timeout if self.timeout else ""),
                 "State persists across executions. The standard library is available%s; subprocesses and native "
                 "extensions work inside the jail." % (
                     ", and these packages: " + ", ".join(self.with_) if self.with_ else "")]
        if self.enable_network_access:
            parts.append("Network access is limited to: %s; every other host is refused."
                         % ", ".join(_network(self.enable_network_access)))
        else:
            parts.append("There is no network access.")
        files = []
        for p in self.enable_read_paths:
            if p:
                files.append("/work/%s (a copy of a host file; changes stay in the sandbox)"
                             % os.path.basename(os.path.normpath(os.fspath(p))))
        for p in self.enable_write_paths:
            if p:
                files.append("/work/%s (%s)" % (os.path.basename(os.path.normpath(os.fspath(p))),
                                                "written back to the host after each execution" if self.sync_files
                                                else "not written back"))
        parts.append("The working directory is /work" + (": " + "; ".join(files) if files else "") + ".")
        if self.enable_env_vars:
            parts.append("os.environ has %s." % ", ".join(str(v) for v in self.enable_env_vars))
        if self._tools:
            sigs = []
            for name, fn in self._tools.items():
                try:
                    sigs.append("%s%s" % (name, inspect.signature(fn)))
                except (TypeError, ValueError):
                    sigs.append("%s(...)" % name)
            parts.append("Tools are plain functions, called by name: %s; a failed call raises ToolError "
                         "(a RuntimeError)." % ", ".join(sigs))
        fields = [f.get("name") for f in (self.output_fields or []) if isinstance(f, dict) and f.get("name")]
        parts.append("Call SUBMIT(%s) to finish with the final answer%s." % (
            ", ".join(fields) if fields else "output",
            " (keyword or positional fields)" if fields else ""))
        return " ".join(parts)


_LIST_FILES = '''
def _cellblock_list(names):
    import os
    out = {}
    for name in names:
        root = "/work/" + name
        files = []
        for d, _, fs in os.walk(root):
            for f in fs:
                if not os.path.islink(os.path.join(d, f)):
                    files.append(os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/"))
        out[name] = sorted(files)
    return out
_cellblock_list(%s)
'''


def _syntax_error(kind: str, message: str, line: Optional[int]) -> SyntaxError:
    """The SyntaxError (or IndentationError, TabError) to raise for the
    code's: DSPy's words, the cell's name and line as Python gives them."""
    cls = {"IndentationError": IndentationError, "TabError": TabError}.get(kind, SyntaxError)
    m = re.match(r"^(.*) \((.*), line (\d+)\)$", message, re.S)
    if m:
        return cls("Invalid Python syntax. message: %s" % m.group(1), (m.group(2), int(m.group(3)), None, None))
    err = cls("Invalid Python syntax. message: %s" % message)
    err.lineno = line
    return err


def _split_positional(fn: Callable[..., Any], kwargs: Dict[str, Any]) -> Tuple[List[Any], Dict[str, Any]]:
    """fn's arguments from a call's kwargs: positional-only parameters by
    position, the rest by keyword."""
    kw = dict(kwargs)
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return [], kw
    args = []
    for p in params:
        if p.kind is not inspect.Parameter.POSITIONAL_ONLY or p.name not in kw:
            break
        args.append(kw.pop(p.name))
    return args, kw


def _walk(host: str) -> List[Tuple[str, str]]:
    """(path relative to host, full path) of each file of host: itself
    when it is a file."""
    if not os.path.isdir(host):
        return [("", host)]
    out = []
    for d, dirnames, files in os.walk(host):
        dirnames.sort()
        for f in sorted(files):
            full = os.path.join(d, f)
            if os.path.isfile(full):
                out.append((os.path.relpath(full, host).replace(os.sep, "/"), full))
    return out


def _annotation(ann: Any) -> str:
    name = _SIMPLE.get(ann)
    return ": " + ("type(None)" if name == "None" else name) if name else ""


def _literal(v: Any) -> Optional[str]:
    """v as a Python literal when it is one that round-trips (None, bool,
    int, finite float, str), else None."""
    if v is None or isinstance(v, (bool, int, str)) or (isinstance(v, float) and math.isfinite(v)):
        return repr(v)
    return None


def _tool_function(name: str, fn: Callable[..., Any]) -> str:
    """The session's function for a tool: the tool's parameters, the call
    to the caller."""
    try:
        sig: Optional[inspect.Signature] = inspect.signature(fn)
    except (TypeError, ValueError):
        sig = None
    if sig is None:
        return "def %s(**kwargs):\n    return _cellblock_call(%r, kwargs)\n" % (name, name)
    params, names, more = [], [], None
    kwonly_started = False
    positional_only = []
    for p in sig.parameters.values():
        if not p.name.isidentifier() or keyword.iskeyword(p.name) or p.name.startswith("_cellblock"):
            continue
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            continue
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            more = p.name
            continue
        if p.kind is inspect.Parameter.KEYWORD_ONLY and not kwonly_started:
            params.append("*")
            kwonly_started = True
        part = p.name + _annotation(p.annotation)
        if p.default is not inspect.Parameter.empty:
            lit = _literal(p.default)
            part += " = " + (lit if lit is not None else "_cellblock_absent")
        params.append(part)
        names.append(p.name)
        if p.kind is inspect.Parameter.POSITIONAL_ONLY:
            positional_only.append(p.name)
    if positional_only:
        params.insert(len(positional_only), "/")
    if more:
        params.append("**" + more)
    args = "{%s}" % ", ".join("%r: %s" % (n, n) for n in names)
    body = "    _args = {k: v for k, v in %s.items() if v is not _cellblock_absent}\n" % args
    if more:
        body += "    _args.update(%s)\n" % more
    doc = inspect.getdoc(fn)
    docline = "    %s\n" % json.dumps(doc) if doc else ""
    return "def %s(%s):\n%s%s    return _cellblock_call(%r, _args)\n" % (name, ", ".join(params), docline, body, name)


def _submit_function(output_fields: Optional[List[Dict[str, Any]]]) -> str:
    fields = [f for f in (output_fields or []) if isinstance(f, dict) and isinstance(f.get("name"), str)
              and f["name"].isidentifier() and not keyword.iskeyword(f["name"])]
    if not fields:
        return "def SUBMIT(output):\n    _cellblock_submit({'output': output})\n"
    params = []
    for f in fields:
        t = f.get("type")
        params.append(f["name"] + (": " + ("type(None)" if t == "NoneType" else t)
                                   if isinstance(t, str) and t in ("str", "int", "float", "bool", "list", "dict",
                                                                   "NoneType") else ""))
    return "def SUBMIT(%s):\n    _cellblock_submit({%s})\n" % (
        ", ".join(params), ", ".join("%r: %s" % (f["name"], f["name"]) for f in fields))
