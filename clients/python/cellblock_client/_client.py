"""Client and Session: cellblockd's API, blocking.

A run is one POST /v1/runs. It is streamed (Accept: application/x-ndjson)
when the caller wants its output as it comes (on_output) or declares tools:
the stream then carries output chunks, tool calls and, last, the result.
Each tool call is carried out on a thread of the client's pool, and
answered with a second request, POST /v1/runs/RUN/tool_calls/CALL, on
another connection, while the stream goes on being read on the caller's
thread.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import json
from http.client import IncompleteRead as IncompleteReadError
import threading
import urllib.parse
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ._errors import BadRequestError, CellblockError, ProtocolError, error_from
from ._http import STREAM_TYPE, Transport, socket_path, split_result
from ._tools import ToolSpec, answer_for, call, tool_specs
from ._types import OutputCallback, Result, Variable, file_inputs, jail_fields, run_fields, to_millis

__all__ = ["Client", "Session", "raise_for", "session_request", "tool_path", "file_path"]

Seconds = Union[int, float, datetime.timedelta]
Size = Union[int, str]
Strings = Union[str, Sequence[str]]
Files = Mapping[str, Union[str, bytes]]

# How many tool calls a client carries out at once, by default.
TOOL_WORKERS = 8
# The largest artifact or session file read whole.
MAX_FILE = 1 << 30


def raise_for(obj: Any, status: int) -> Result:
    """The Result of a run's answer, or its error raised."""
    if not isinstance(obj, dict):
        raise ProtocolError("cellblockd answered a run (status %d) with no result object" % status, status=status)
    res = Result.from_json(obj)
    if res.error is not None:
        raise error_from(res.error, status=status, result=res)
    if status != 200:
        raise error_from({"type": "internal", "message": "cellblockd answered status %d" % status},
                         status=status, result=res)
    return res


def tool_path(run: str, call_id: str) -> str:
    q = urllib.parse.quote
    return "/v1/runs/%s/tool_calls/%s" % (q(run, safe=""), q(call_id, safe=""))


def file_path(session: str, path: str) -> str:
    if not isinstance(path, str) or not path:
        raise ValueError("path must be a non-empty path relative to /work")
    parts = [urllib.parse.quote(p, safe="") for p in path.split("/")]
    return "/v1/sessions/%s/files/%s" % (urllib.parse.quote(session, safe=""), "/".join(parts))


def session_request(*, python: Optional[str], with_: Optional[Strings], env: Optional[Mapping[str, str]],
                    memory: Optional[Size], pids: Optional[int], cpus: Optional[float], tmp: Optional[Size],
                    allow_net: Optional[Strings], secrets: Optional[Strings], files: Optional[Files],
                    idle_timeout: Optional[Seconds]) -> Dict[str, Any]:
    req = jail_fields(python=python, with_=with_, env=env, memory=memory, pids=pids, cpus=cpus, tmp=tmp,
                      allow_net=allow_net, secrets=secrets)
    fl = file_inputs(files)
    if fl:
        req["files"] = fl
    if idle_timeout is not None:
        req["idle_timeout_ms"] = to_millis(idle_timeout, "idle_timeout")
    return req


def retry_answer(answer: Dict[str, Any], err: CellblockError) -> Optional[Dict[str, Any]]:
    """The error answer to send when the daemon refused a result as a bad
    request (JSON it does not take: nested too deep, ...), so that the code
    hears why at once rather than at the call's timeout; None otherwise."""
    if "result" not in answer or not isinstance(err, BadRequestError):
        return None
    why = "%s %s" % (err.field, err.message) if err.field else err.message
    return {"error": "the tool's result could not be passed: " + why}


class Client:
    """A client of cellblockd on its Unix socket: ``socket``, else
    $CELLBLOCK_SOCKET, else /run/cellblock/cellblockd.sock (the CLI's
    search). Safe for use from several threads; ``close()`` (or ``with``)
    lets its connections and tool threads go.

    ``tool_workers`` is how many tool calls it carries out at once.
    """

    def __init__(self, socket: Optional[str] = None, *, tool_workers: int = TOOL_WORKERS) -> None:
        self.socket = socket_path(socket)
        self._t = Transport(self.socket)
        self._workers = max(1, int(tool_workers))
        self._pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._pool_lock = threading.Lock()

    def __repr__(self) -> str:
        return "Client(socket=%r)" % self.socket

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Close idle connections and stop the tool threads (calls in
        progress finish first)."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)
        self._t.close()

    # The API.

    def info(self) -> Dict[str, Any]:
        """The daemon's description of itself (GET /v1/info): version,
        Python versions, limits, caps."""
        return self._t.call("GET", "/v1/info")

    def health(self) -> Dict[str, Any]:
        """GET /v1/health: {"status": "ok"} (or "draining")."""
        return self._t.call("GET", "/v1/health")

    def sessions(self) -> List[Dict[str, Any]]:
        """This uid's sessions (every session, for root)."""
        out = self._t.call("GET", "/v1/sessions")
        return list(out.get("sessions") or []) if isinstance(out, dict) else []

    def artifact(self, sha256: str) -> bytes:
        """The content of a file a run of this uid produced (Result.files[i].sha256)."""
        return self._read_file("/v1/artifacts/" + urllib.parse.quote(sha256, safe=""))

    def run(self, code: str, *, cell: bool = False, inputs: Optional[Mapping[str, Any]] = None,
            files: Optional[Files] = None, timeout: Optional[Seconds] = None, memory: Optional[Size] = None,
            pids: Optional[int] = None, env: Optional[Mapping[str, str]] = None, with_: Optional[Strings] = None,
            python: Optional[str] = None, allow_net: Optional[Strings] = None, secrets: Optional[Strings] = None,
            tools: Optional[Mapping[str, Callable[..., Any]]] = None, on_output: Optional[OutputCallback] = None,
            cpus: Optional[float] = None, tmp: Optional[Size] = None, output_bytes: Optional[Size] = None,
            stdin: Optional[str] = None, args: Optional[Sequence[str]] = None,
            tool_timeout: Optional[Seconds] = None) -> Result:
        """Run code in a fresh sandbox and return its Result.

        cell: run it like a notebook cell (the value of a final expression
        comes back as Result.value) instead of as ``python main.py``.
        inputs: globals bound before it runs (JSON values). files: {path
        under /work: str or bytes}. timeout: seconds. memory: bytes or
        "128M". with_: requirements, as ``uv run --with``. allow_net:
        "host:port" patterns it may reach. tools: {name: callable} the code
        calls as tools.NAME(...). on_output(stream, text): called as output
        arrives. A run cellblockd cannot carry out raises CellblockError.
        """
        req = run_fields(code, cell=cell, inputs=inputs, files=files, timeout=timeout, output_bytes=output_bytes,
                         stdin=stdin, args=args, tool_timeout=tool_timeout)
        req.update(jail_fields(python=python, with_=with_, env=env, memory=memory, pids=pids, cpus=cpus, tmp=tmp,
                               allow_net=allow_net, secrets=secrets))
        return self._run(req, tool_specs(tools), on_output)

    def session(self, *, cell: Optional[bool] = None, inputs: Optional[Mapping[str, Any]] = None,
                files: Optional[Files] = None, timeout: Optional[Seconds] = None, memory: Optional[Size] = None,
                pids: Optional[int] = None, env: Optional[Mapping[str, str]] = None, with_: Optional[Strings] = None,
                python: Optional[str] = None, allow_net: Optional[Strings] = None, secrets: Optional[Strings] = None,
                tools: Optional[Mapping[str, Callable[..., Any]]] = None, on_output: Optional[OutputCallback] = None,
                cpus: Optional[float] = None, tmp: Optional[Size] = None,
                idle_timeout: Optional[Seconds] = None) -> "Session":
        """Start a session: one interpreter that keeps its globals, imports
        and /work from run to run, until close() or its idle timeout.

        What fixes its jail is set here (python, with_, env, memory, pids,
        cpus, tmp, allow_net, secrets; files are put under /work first).
        cell, timeout, tools and on_output are the defaults of its runs
        (cell by default in a session); inputs are bound before its first
        run. Use it as a context manager to close it.
        """
        req = session_request(python=python, with_=with_, env=env, memory=memory, pids=pids, cpus=cpus, tmp=tmp,
                              allow_net=allow_net, secrets=secrets, files=files, idle_timeout=idle_timeout)
        specs = tool_specs(tools)
        if timeout is not None:
            to_millis(timeout)
        desc = self._t.call("POST", "/v1/sessions", req)
        if not isinstance(desc, dict) or not isinstance(desc.get("id"), str):
            raise ProtocolError("cellblockd answered a new session without its id")
        return Session(self, desc, cell=cell, inputs=inputs, timeout=timeout, tools=specs, on_output=on_output)

    # Runs.

    def _tool_pool(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(self._workers,
                                                                   thread_name_prefix="cellblock-tool")
            return self._pool

    def _run(self, req: Dict[str, Any], tools: Mapping[str, ToolSpec], on_output: Optional[OutputCallback],
             fallback_str: bool = False) -> Result:
        if tools:
            req["tools"] = [t.declaration() for t in tools.values()]
        body = json.dumps(req).encode("utf-8")
        if not tools and on_output is None:
            return raise_for(*split_result(self._t.request("POST", "/v1/runs", body)))
        resp = self._t.request("POST", "/v1/runs", body, {"Accept": STREAM_TYPE})
        if resp.content_type != STREAM_TYPE:
            # Refused before it started: one result object, with a status.
            return raise_for(*split_result(resp))
        ok = False
        try:
            while True:
                line = resp.readline()
                if not line:
                    raise ProtocolError("cellblockd ended the run's stream without a result")
                try:
                    ev = json.loads(line)
                except ValueError as e:
                    raise ProtocolError("cellblockd sent a line of the run's stream that is not JSON") from e
                if not isinstance(ev, dict):
                    continue
                if "result" in ev and isinstance(ev["result"], dict):
                    ok = True
                    return raise_for(ev["result"], 200)
                tc = ev.get("tool_call")
                if isinstance(tc, dict):
                    self._tool_pool().submit(self._answer, ev.get("run_id"), tc, tools, fallback_str)
                    continue
                stream, data = ev.get("stream"), ev.get("data")
                if on_output is not None and isinstance(stream, str) and isinstance(data, str):
                    on_output(stream, data)
        finally:
            resp.close(reuse=ok)

    def _answer(self, run: Any, tc: Dict[str, Any], tools: Mapping[str, ToolSpec], fallback_str: bool) -> None:
        """Carry out one tool call and answer it (on a pool thread)."""
        call_id, name = tc.get("id"), tc.get("name")
        if not isinstance(run, str) or not isinstance(call_id, str):
            return
        spec = tools.get(name) if isinstance(name, str) else None
        if spec is None:
            answer: Dict[str, Any] = {"error": "this caller has no tool %r" % (name,)}
        else:
            try:
                answer = answer_for(spec.name, call(spec, tc.get("arguments")), False, fallback_str=fallback_str)
            except Exception as e:
                answer = answer_for(spec.name, e, True)
        path = tool_path(run, call_id)
        try:
            self._t.call("POST", path, answer)
        except CellblockError as e:
            # A call that no longer waits (it timed out, the run is over)
            # is not_found: nobody is left to tell.
            again = retry_answer(answer, e)
            if again is not None:
                try:
                    self._t.call("POST", path, again)
                except CellblockError:
                    pass

    def _read_file(self, path: str) -> bytes:
        resp = self._t.request("GET", path)
        if resp.status != 200:
            resp.json()  # raises the answer's error
            raise ProtocolError("cellblockd answered status %d" % resp.status)
        ok = False
        try:
            length = resp.raw.getheader("Content-Length")
            data = resp.read(MAX_FILE)
            if length is not None and length.isdigit() and len(data) != int(length):
                raise ProtocolError("the file ended at %d of its %s bytes (it changed while it was read?)"
                                    % (len(data), length))
            ok = True
            return data
        except IncompleteReadError as e:
            raise ProtocolError("the file ended at %d bytes, short of its size (it changed while it was read?)"
                                % len(e.partial)) from e
        finally:
            resp.close(reuse=ok)


class Session:
    """A session of cellblockd: an interpreter that keeps its state between
    runs. Made by Client.session(); a context manager that closes it.

    ``id`` is its id, ``python`` its interpreter's version, ``description``
    what the daemon answered when it was made.
    """

    def __init__(self, client: Client, desc: Dict[str, Any], *, cell: Optional[bool] = None,
                 inputs: Optional[Mapping[str, Any]] = None, timeout: Optional[Seconds] = None,
                 tools: Optional[Mapping[str, ToolSpec]] = None,
                 on_output: Optional[OutputCallback] = None) -> None:
        self.client = client
        self.id: str = desc["id"]
        self.description = desc
        self.python: str = desc.get("python") or ""
        self._cell = cell
        self._inputs = dict(inputs) if inputs else None
        self._timeout = timeout
        self._tools: Dict[str, ToolSpec] = dict(tools or {})
        self._on_output = on_output
        self.closed = False

    def __repr__(self) -> str:
        return "Session(id=%r)" % self.id

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def run(self, code: str, *, cell: Optional[bool] = None, inputs: Optional[Mapping[str, Any]] = None,
            files: Optional[Files] = None, timeout: Optional[Seconds] = None,
            tools: Optional[Mapping[str, Callable[..., Any]]] = None, on_output: Optional[OutputCallback] = None,
            output_bytes: Optional[Size] = None, stdin: Optional[str] = None,
            tool_timeout: Optional[Seconds] = None) -> Result:
        """Run code in the session's interpreter (as a cell unless cell is
        False); the session's tools, with those given here, answer its
        calls. SessionBusyError when another run is in it;
        SessionLostError when its interpreter died."""
        return self.client._run(*self._request(code, cell=cell, inputs=inputs, files=files, timeout=timeout,
                                               tools=tools, output_bytes=output_bytes, stdin=stdin,
                                               tool_timeout=tool_timeout), on_output or self._on_output)

    def _request(self, code: str, *, cell: Optional[bool], inputs: Optional[Mapping[str, Any]],
                 files: Optional[Files], timeout: Optional[Seconds], tools: Optional[Mapping[str, Callable[..., Any]]],
                 output_bytes: Optional[Size], stdin: Optional[str],
                 tool_timeout: Optional[Seconds]) -> Tuple[Dict[str, Any], Dict[str, ToolSpec]]:
        if self._inputs:
            inputs = dict(self._inputs, **(inputs or {}))
            self._inputs = None
        req = run_fields(code, cell=self._cell if cell is None else cell, inputs=inputs, files=files,
                         timeout=self._timeout if timeout is None else timeout, output_bytes=output_bytes,
                         stdin=stdin, session=self.id, tool_timeout=tool_timeout)
        specs = dict(self._tools)
        specs.update(tool_specs(tools))
        return req, specs

    def put(self, path: str, data: Union[str, bytes]) -> Dict[str, Any]:
        """Write a file at path (relative to /work), between runs; text is
        written as UTF-8. Returns {"path", "size", "sha256"}."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError("data must be str or bytes, not %s" % type(data).__name__)
        return self.client._t.request("PUT", file_path(self.id, path), bytes(data),
                                      {"Content-Type": "application/octet-stream"}).json()

    def get(self, path: str) -> bytes:
        """The content of the file at path (relative to /work)."""
        return self.client._read_file(file_path(self.id, path))

    def info(self) -> Dict[str, Any]:
        """The session as the daemon describes it now: state, execution
        count, expiry, limits, variables."""
        return self.client._t.call("GET", "/v1/sessions/" + urllib.parse.quote(self.id, safe=""))

    def variables(self) -> List[Variable]:
        """The globals its code defined, as of its last run (at most 200,
        each with a short repr)."""
        return [Variable.from_json(v) for v in (self.info().get("variables") or [])]

    def close(self) -> None:
        """End the session (killing a run in it). Closing a session that
        is gone already (expired, closed) is no error."""
        if self.closed:
            return
        self.closed = True
        try:
            self.client._t.call("DELETE", "/v1/sessions/" + urllib.parse.quote(self.id, safe=""))
        except CellblockError as e:
            if e.type not in ("session_not_found", "unreachable"):
                raise

