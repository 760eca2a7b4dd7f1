"""The data of the API as Python objects: the Result of a run and what it
holds, and the requests made from a call's keyword options.

Everything here is plain data and pure functions, shared by Client and
AsyncClient. Fields are read leniently: what the daemon sends is decoded as
far as it has the expected shape, and every field of the answer is also
kept in ``raw``, so that a field a newer daemon adds is readable before
this client knows it.
"""

from __future__ import annotations

import base64
import datetime
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

__all__ = [
    "Result", "Value", "RunException", "DisplayItem", "File", "FileSkipped", "ToolCallReport",
    "Denial", "SessionState", "Phases", "Limits", "Variable", "OutputCallback",
    "parse_size", "to_millis",
]

# on_output(stream, text): stream is "stdout" or "stderr".
OutputCallback = Callable[[str, str], Any]


def _str(v: Any, default: str = "") -> str:
    return v if isinstance(v, str) else default


def _int(v: Any, default: int = 0) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else default


def _bool(v: Any) -> bool:
    return v is True


def _list(v: Any) -> List[Any]:
    return v if isinstance(v, list) else []


def _dict(v: Any) -> Dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _time(v: Any) -> Optional[datetime.datetime]:
    """An RFC 3339 time as the daemon writes it (nanoseconds and Z
    included), or None."""
    if not isinstance(v, str):
        return None
    m = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$", v)
    if not m:
        return None
    frac = (m.group(2) or ".0")[1:7].ljust(6, "0")
    tz = "+00:00" if m.group(3) == "Z" else m.group(3)
    try:
        return datetime.datetime.fromisoformat("%s.%s%s" % (m.group(1), frac, tz))
    except ValueError:
        return None


@dataclass
class Value:
    """The value of a cell's final expression: its type's name, its repr
    and, when it is JSON-serialisable, the value itself (``json``;
    ``has_json`` tells a JSON null from no JSON)."""
    type: str
    repr: str
    json: Any = None
    has_json: bool = False

    @classmethod
    def from_json(cls, d: Any) -> Optional["Value"]:
        if not isinstance(d, dict):
            return None
        return cls(type=_str(d.get("type")), repr=_str(d.get("repr")), json=d.get("json"), has_json="json" in d)


@dataclass
class RunException:
    """An uncaught exception of the program: its qualified type
    ("ZeroDivisionError", "json.decoder.JSONDecodeError"), str(exc), the
    traceback Python printed and the line of the code it was raised on."""
    type: str
    message: str
    traceback: str
    line: Optional[int] = None

    @classmethod
    def from_json(cls, d: Any) -> Optional["RunException"]:
        if not isinstance(d, dict):
            return None
        line = d.get("line")
        return cls(type=_str(d.get("type")), message=_str(d.get("message")), traceback=_str(d.get("traceback")),
                   line=line if isinstance(line, int) and not isinstance(line, bool) else None)


@dataclass
class DisplayItem:
    """One piece of rich output in Jupyter's MIME-bundle shape: ``data``
    maps a MIME type to its content (base64 for images)."""
    data: Dict[str, Any]
    metadata: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: Any) -> "DisplayItem":
        d = _dict(d)
        return cls(data=_dict(d.get("data")), metadata=_dict(d.get("metadata")))

    def bytes(self, mime: str) -> Optional[bytes]:
        """The content of a binary MIME type (image/png) decoded, or None."""
        v = self.data.get(mime)
        return base64.b64decode(v) if isinstance(v, str) else None


@dataclass
class File:
    """A file the program wrote under /work/out; Client.artifact(sha256)
    fetches its content."""
    path: str
    size: int
    sha256: str
    mime: str
    content: Optional[str] = None

    @classmethod
    def from_json(cls, d: Any) -> "File":
        d = _dict(d)
        c = d.get("content")
        return cls(path=_str(d.get("path")), size=_int(d.get("size")), sha256=_str(d.get("sha256")),
                   mime=_str(d.get("mime")), content=c if isinstance(c, str) else None)


@dataclass
class FileSkipped:
    """Something under /work/out that did not come back, and why."""
    path: str
    reason: str
    size: int = 0

    @classmethod
    def from_json(cls, d: Any) -> "FileSkipped":
        d = _dict(d)
        return cls(path=_str(d.get("path")), reason=_str(d.get("reason")), size=_int(d.get("size")))


@dataclass
class ToolCallReport:
    """One tool call of the run: ``outcome`` is ok, error, refused,
    timeout, too_large or canceled; ``error`` what the code was told."""
    name: str
    duration_ms: int
    ok: bool
    outcome: str = ""
    error: Optional[str] = None

    @classmethod
    def from_json(cls, d: Any) -> "ToolCallReport":
        d = _dict(d)
        err = d.get("error")
        return cls(name=_str(d.get("name")), duration_ms=_int(d.get("duration_ms")), ok=_bool(d.get("ok")),
                   outcome=_str(d.get("outcome")), error=err if isinstance(err, str) else None)


@dataclass
class Denial:
    """Something the sandbox refused the program: ``kind`` "network",
    "syscall" (``detail`` names the call) or another kind."""
    kind: str
    detail: str
    host: Optional[str] = None
    port: Optional[int] = None
    reason: Optional[str] = None
    count: int = 0

    @classmethod
    def from_json(cls, d: Any) -> "Denial":
        d = _dict(d)
        return cls(kind=_str(d.get("kind")), detail=_str(d.get("detail")),
                   host=d.get("host") if isinstance(d.get("host"), str) else None,
                   port=d.get("port") if isinstance(d.get("port"), int) else None,
                   reason=d.get("reason") if isinstance(d.get("reason"), str) else None,
                   count=_int(d.get("count")))


@dataclass
class SessionState:
    """The session a run ran in, after it."""
    id: str
    execution_count: int
    state: str
    expires_at: Optional[datetime.datetime] = None

    @classmethod
    def from_json(cls, d: Any) -> Optional["SessionState"]:
        if not isinstance(d, dict):
            return None
        return cls(id=_str(d.get("id")), execution_count=_int(d.get("execution_count")),
                   state=_str(d.get("state")), expires_at=_time(d.get("expires_at")))


@dataclass
class Limits:
    """The limits that applied to a run (or a daemon's defaults/maxima)."""
    timeout_ms: int = 0
    memory_bytes: int = 0
    pids: int = 0
    cpus: float = 0.0
    output_bytes: int = 0
    tmp_bytes: int = 0

    @classmethod
    def from_json(cls, d: Any) -> Optional["Limits"]:
        if not isinstance(d, dict):
            return None
        cpus = d.get("cpus")
        return cls(timeout_ms=_int(d.get("timeout_ms")), memory_bytes=_int(d.get("memory_bytes")),
                   pids=_int(d.get("pids")), cpus=float(cpus) if isinstance(cpus, (int, float)) else 0.0,
                   output_bytes=_int(d.get("output_bytes")), tmp_bytes=_int(d.get("tmp_bytes")))


@dataclass
class Phases:
    """Where the daemon spent a run's time, in microseconds."""
    queue_us: int = 0
    create_us: int = 0
    start_us: int = 0
    program_us: int = 0
    handover_us: int = 0
    collect_us: int = 0
    teardown_us: int = 0
    env_us: int = 0
    tools_us: int = 0
    prestarted: bool = False

    @classmethod
    def from_json(cls, d: Any) -> Optional["Phases"]:
        if not isinstance(d, dict):
            return None
        return cls(**{k: _int(d.get(k)) for k in ("queue_us", "create_us", "start_us", "program_us", "handover_us",
                                                   "collect_us", "teardown_us", "env_us", "tools_us")},
                   prestarted=_bool(d.get("prestarted")))


@dataclass
class Variable:
    """A global of a session, as of its last run: name, type name and a
    short repr made without running any of the program's code."""
    name: str
    type: str
    repr: str

    @classmethod
    def from_json(cls, d: Any) -> "Variable":
        d = _dict(d)
        return cls(name=_str(d.get("name")), type=_str(d.get("type")), repr=_str(d.get("repr")))


@dataclass
class Result:
    """The result object of a run: every field of the API's result as an
    attribute, and the whole answer in ``raw``.

    A program that failed is not an error: ``exit_code``, ``exception``,
    ``timed_out`` and ``oom_killed`` say how it ended (``ok`` is true when
    it exited 0 in time). A run that could not be carried out raises a
    CellblockError instead, whose ``result`` is this object.
    """
    exit_code: int = 0
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    timed_out: bool = False
    oom_killed: bool = False
    duration_ms: int = 0
    cpu_ms: int = 0
    memory_peak_bytes: int = 0
    error: Optional[Dict[str, Any]] = None
    run_id: str = ""
    python: str = ""
    limits: Optional[Limits] = None
    environment: Optional[Dict[str, Any]] = None
    phases: Optional[Phases] = None
    value: Optional[Value] = None
    exception: Optional[RunException] = None
    display: List[DisplayItem] = field(default_factory=list)
    session: Optional[SessionState] = None
    denials: List[Denial] = field(default_factory=list)
    tool_calls: List[ToolCallReport] = field(default_factory=list)
    tool_calls_over_cap: int = 0
    files: List[File] = field(default_factory=list)
    files_skipped: List[FileSkipped] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        """The program exited 0, within its time and memory, and the run
        was carried out."""
        return self.error is None and self.exit_code == 0 and not self.timed_out and not self.oom_killed

    def __getattr__(self, name: str) -> Any:
        # A field of the answer this client does not know yet.
        raw = self.__dict__.get("raw")
        if raw is not None and name in raw and not name.startswith("_"):
            return raw[name]
        raise AttributeError(name)

    @classmethod
    def from_json(cls, d: Any) -> "Result":
        d = _dict(d)
        env = d.get("environment")
        err = d.get("error")
        return cls(
            exit_code=_int(d.get("exit_code")), stdout=_str(d.get("stdout")), stderr=_str(d.get("stderr")),
            stdout_truncated=_bool(d.get("stdout_truncated")), stderr_truncated=_bool(d.get("stderr_truncated")),
            timed_out=_bool(d.get("timed_out")), oom_killed=_bool(d.get("oom_killed")),
            duration_ms=_int(d.get("duration_ms")), cpu_ms=_int(d.get("cpu_ms")),
            memory_peak_bytes=_int(d.get("memory_peak_bytes")), error=err if isinstance(err, dict) else None,
            run_id=_str(d.get("run_id")), python=_str(d.get("python")), limits=Limits.from_json(d.get("limits")),
            environment=env if isinstance(env, dict) else None, phases=Phases.from_json(d.get("phases")),
            value=Value.from_json(d.get("value")), exception=RunException.from_json(d.get("exception")),
            display=[DisplayItem.from_json(x) for x in _list(d.get("display"))],
            session=SessionState.from_json(d.get("session")),
            denials=[Denial.from_json(x) for x in _list(d.get("denials"))],
            tool_calls=[ToolCallReport.from_json(x) for x in _list(d.get("tool_calls"))],
            tool_calls_over_cap=_int(d.get("tool_calls_over_cap")),
            files=[File.from_json(x) for x in _list(d.get("files"))],
            files_skipped=[FileSkipped.from_json(x) for x in _list(d.get("files_skipped"))],
            raw=d,
        )


# Sizes: a plain number is bytes; K, M, G, T (with i, B or iB, any case)
# are powers of 1024, as cellblock run --memory reads them.
_UNITS = {"": 1, "b": 1}
for _i, _u in enumerate("kmgt"):
    for _suffix in ("", "i", "b", "ib"):
        _UNITS[_u + _suffix] = 1024 ** (_i + 1)


def parse_size(v: Union[int, str], name: str = "size") -> int:
    """A byte count: an int, or a string such as "128M", "1.5G" or
    "512MiB" (units of 1024)."""
    if isinstance(v, bool):
        raise TypeError("%s must be a number of bytes or a size such as '128M', not a bool" % name)
    if isinstance(v, int):
        if v < 0:
            raise ValueError("%s must not be negative" % name)
        return v
    if isinstance(v, float) and v.is_integer() and v >= 0:
        return int(v)
    if not isinstance(v, str):
        raise TypeError("%s must be a number of bytes or a size such as '128M', not %s" % (name, type(v).__name__))
    m = re.match(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)\s*$", v)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError("%s: %r is not a size such as 128M, 1.5G or 512MiB" % (name, v))
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def to_millis(v: Union[int, float, datetime.timedelta], name: str = "timeout") -> int:
    """Seconds (or a timedelta) as whole milliseconds, rounded up so that a
    tiny positive time never becomes 0, the daemon's default."""
    if isinstance(v, datetime.timedelta):
        v = v.total_seconds()
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError("%s must be a number of seconds, not %s" % (name, type(v).__name__))
    if v < 0 or math.isnan(v) or math.isinf(v):
        raise ValueError("%s must be a finite number of seconds, not negative" % name)
    return int(math.ceil(v * 1000))


def _strings(v: Union[str, Sequence[str], None], name: str) -> List[str]:
    if v is None:
        return []
    if isinstance(v, str):
        return [v]
    out = list(v)
    for s in out:
        if not isinstance(s, str):
            raise TypeError("%s must be strings, not %s" % (name, type(s).__name__))
    return out


def file_inputs(files: Optional[Mapping[str, Union[str, bytes]]]) -> List[Dict[str, str]]:
    """The API's files from {path: text or bytes}: text as UTF-8, bytes
    as base64."""
    out = []
    for path, data in (files or {}).items():
        if not isinstance(path, str):
            raise TypeError("files: a path is a string relative to /work, not %s" % type(path).__name__)
        if isinstance(data, str):
            out.append({"path": path, "content": data})
        elif isinstance(data, (bytes, bytearray, memoryview)):
            out.append({"path": path, "content": base64.b64encode(bytes(data)).decode("ascii"), "encoding": "base64"})
        else:
            raise TypeError("files[%r] must be str or bytes, not %s" % (path, type(data).__name__))
    return out


def jail_fields(*, python: Optional[str] = None, with_: Union[str, Sequence[str], None] = None,
                env: Optional[Mapping[str, str]] = None, memory: Union[int, str, None] = None,
                pids: Optional[int] = None, cpus: Optional[float] = None, tmp: Union[int, str, None] = None,
                allow_net: Union[str, Sequence[str], None] = None,
                secrets: Union[str, Sequence[str], None] = None) -> Dict[str, Any]:
    """The request fields that fix a jail: a run's own, or a session's."""
    req: Dict[str, Any] = {}
    if python is not None:
        req["python"] = str(python)
    deps = _strings(with_, "with_")
    if deps:
        req["dependencies"] = deps
    if env:
        for k, v in env.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError("env maps names to strings; %r is %s" % (k, type(v).__name__))
        req["env"] = dict(env)
    if memory is not None:
        req["memory_bytes"] = parse_size(memory, "memory")
    if pids is not None:
        req["pids"] = int(pids)
    if cpus is not None:
        req["cpus"] = float(cpus)
    if tmp is not None:
        req["tmp_bytes"] = parse_size(tmp, "tmp")
    allow = _strings(allow_net, "allow_net")
    if allow:
        req["network"] = {"allow": allow}
    names = _strings(secrets, "secrets")
    if names:
        req["secrets"] = names
    return req


def run_fields(code: str, *, cell: Optional[bool] = None, inputs: Optional[Mapping[str, Any]] = None,
               files: Optional[Mapping[str, Union[str, bytes]]] = None,
               timeout: Union[int, float, datetime.timedelta, None] = None,
               output_bytes: Union[int, str, None] = None, stdin: Optional[str] = None,
               args: Optional[Sequence[str]] = None, session: Optional[str] = None,
               tool_timeout: Union[int, float, datetime.timedelta, None] = None) -> Dict[str, Any]:
    """The fields of a run request that are the run's own (not its jail's)."""
    if not isinstance(code, str):
        raise TypeError("code must be a str, not %s" % type(code).__name__)
    req: Dict[str, Any] = {"code": code}
    if cell is not None:
        req["mode"] = "cell" if cell else "script"
    if inputs:
        req["inputs"] = dict(inputs)
    fl = file_inputs(files)
    if fl:
        req["files"] = fl
    if timeout is not None:
        req["timeout_ms"] = to_millis(timeout)
    if output_bytes is not None:
        req["output_bytes"] = parse_size(output_bytes, "output_bytes")
    if stdin is not None:
        req["stdin"] = stdin
    if args:
        req["args"] = _strings(args, "args")
    if session is not None:
        req["session"] = session
    if tool_timeout is not None:
        req["tool_limits"] = {"timeout_ms": to_millis(tool_timeout, "tool_timeout")}
    return req
