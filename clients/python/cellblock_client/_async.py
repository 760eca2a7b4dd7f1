"""AsyncClient and AsyncSession: the same API on asyncio, without blocking
the event loop.

The HTTP/1.1 here is the little the daemon's answers need, on asyncio's
Unix streams: a request with a Content-Length; an answer with a
Content-Length, chunked, or to the end of the connection; idle
connections kept for reuse by the loop that made them. A tool call is
carried out as a task: a coroutine function is awaited on the loop, any
other callable runs on the client's thread pool. on_output may be a
function or a coroutine function.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import json
import urllib.parse
from typing import Any, Awaitable, Callable, Dict, Generator, List, Mapping, Optional, Sequence, Set, Tuple, Union

from ._client import (MAX_FILE, TOOL_WORKERS, Files, Seconds, Size, Strings, file_path, raise_for, retry_answer,
                      session_request, tool_path)
from ._errors import CellblockError, ProtocolError, UnreachableError, error_from
from ._http import MAX_IDLE, STREAM_TYPE, socket_path
from ._tools import ToolSpec, answer_for, call, tool_specs
from ._types import Result, Variable, jail_fields, run_fields, to_millis

__all__ = ["AsyncClient", "AsyncSession"]

AsyncOutputCallback = Callable[[str, str], Any]

# The most of an answer's header block.
MAX_HEADER = 64 << 10


class _Answer:
    """An answer whose body is still to be read, on a connection of the
    pool's."""

    def __init__(self, pool: "_Pool", reader: asyncio.StreamReader, writer: asyncio.StreamWriter, status: int,
                 headers: Dict[str, str], keep: bool) -> None:
        self._pool = pool
        self._r = reader
        self._w: Optional[asyncio.StreamWriter] = writer
        self.status = status
        self.headers = headers
        self.content_type = headers.get("content-type", "").split(";")[0].strip().lower()
        self._keep = keep
        self._chunked = headers.get("transfer-encoding", "").lower() == "chunked"
        cl = headers.get("content-length")
        self._left: Optional[int] = int(cl) if cl is not None and cl.isdigit() else None
        self.length = self._left
        self._chunk_left = 0
        self._done = False
        self._buf = b""

    async def _read_some(self) -> bytes:
        """The next piece of the body; b"" at its end."""
        if self._done:
            return b""
        if self._chunked:
            if self._chunk_left == 0:
                line = await self._r.readline()
                if not line.endswith(b"\n"):
                    raise ProtocolError("the answer ended inside a chunk size")
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while True:  # trailers, then the empty line
                        t = await self._r.readline()
                        if not t.endswith(b"\n"):
                            raise ProtocolError("the answer ended inside its trailers")
                        if t in (b"\r\n", b"\n"):
                            break
                    self._done = True
                    return b""
                self._chunk_left = size
            data = await self._r.read(min(self._chunk_left, 1 << 16))
            if not data:
                raise ProtocolError("the answer ended inside a chunk")
            self._chunk_left -= len(data)
            if self._chunk_left == 0:
                if await self._r.readline() not in (b"\r\n", b"\n"):
                    raise ProtocolError("a chunk was not followed by CRLF")
            return data
        if self._left is not None:
            if self._left == 0:
                self._done = True
                return b""
            data = await self._r.read(min(self._left, 1 << 16))
            if not data:
                raise ProtocolError("the answer ended at %d bytes short of its length" % self._left)
            self._left -= len(data)
            return data
        data = await self._r.read(1 << 16)
        if not data:
            self._done = True
            self._keep = False
        return data

    async def read(self, limit: int = 64 << 20) -> bytes:
        parts = [self._buf]
        n = len(self._buf)
        self._buf = b""
        while True:
            data = await self._read_some()
            if not data:
                return b"".join(parts)
            n += len(data)
            if n > limit:
                self.close(reuse=False)
                raise ProtocolError("cellblockd's answer is larger than %d bytes" % limit)
            parts.append(data)

    async def readline(self, limit: int = 64 << 20) -> bytes:
        while b"\n" not in self._buf:
            data = await self._read_some()
            if not data:
                line, self._buf = self._buf, b""
                return line
            self._buf += data
            if len(self._buf) > limit:
                raise ProtocolError("a line of the run's stream is longer than %d bytes" % limit)
        i = self._buf.index(b"\n") + 1
        line, self._buf = self._buf[:i], self._buf[i:]
        return line

    def close(self, reuse: bool = True) -> None:
        w, self._w = self._w, None
        if w is None:
            return
        if reuse and self._done and self._keep and not self._buf:
            self._pool.put(self._r, w)
        else:
            w.close()

    async def json(self) -> Any:
        data = await self.read()
        self.close()
        try:
            obj = json.loads(data) if data else None
        except ValueError:
            obj = None
        if self.status != 200:
            raise error_from(obj.get("error") if isinstance(obj, dict) else None, status=self.status)
        if obj is None:
            raise ProtocolError("cellblockd's answer (status %d) is not JSON" % self.status, status=self.status)
        return obj


class _Pool:
    """Connections to one socket, kept by the event loop that made them."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._idle: List[Tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    def _check_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            # Connections of another (perhaps closed) loop are no use here.
            for _, w in self._idle:
                try:
                    w.close()
                except RuntimeError:
                    pass
            self._idle = []
            self._loop = loop

    def put(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        if len(self._idle) < MAX_IDLE and not w.is_closing():
            self._idle.append((r, w))
        else:
            w.close()

    def close(self) -> None:
        idle, self._idle = self._idle, []
        for _, w in idle:
            try:
                w.close()
            except RuntimeError:  # its loop is closed
                pass

    async def request(self, method: str, path: str, body: Optional[bytes] = None,
                      headers: Optional[Dict[str, str]] = None) -> _Answer:
        self._check_loop()
        hdrs = {"Host": "cellblockd"}
        if body is not None:
            hdrs["Content-Type"] = "application/json"
        elif method in ("POST", "PUT"):
            body = b""
        hdrs.update(headers or {})
        if body is not None:
            hdrs["Content-Length"] = str(len(body))
        head = "%s %s HTTP/1.1\r\n%s\r\n" % (method, path, "".join("%s: %s\r\n" % kv for kv in hdrs.items()))
        msg = head.encode("latin-1") + (body or b"")
        while self._idle:
            r, w = self._idle.pop()
            if w.is_closing() or r.at_eof():
                w.close()
                continue
            try:
                return await self._round_trip(r, w, msg)
            except (ConnectionError, _NothingRead):
                w.close()  # closed by the daemon while idle: once more, anew
                break
            except BaseException:
                w.close()
                raise
        try:
            r, w = await asyncio.open_unix_connection(self.path)
        except FileNotFoundError as e:
            raise UnreachableError("cellblockd is not reachable at %s: no such socket (is it running? set "
                                   "CELLBLOCK_SOCKET or pass socket=)" % self.path) from e
        except OSError as e:
            raise UnreachableError("cellblockd is not reachable at %s: %s" % (self.path, e)) from e
        try:
            return await self._round_trip(r, w, msg)
        except (OSError, _NothingRead) as e:
            w.close()
            raise UnreachableError("cellblockd is not reachable at %s: %s" % (self.path, e)) from e
        except BaseException:
            w.close()
            raise

    async def _round_trip(self, r: asyncio.StreamReader, w: asyncio.StreamWriter, msg: bytes) -> _Answer:
        w.write(msg)
        await w.drain()
        status_line = await r.readline()
        if not status_line:
            raise _NothingRead("the connection ended before an answer")
        parts = status_line.decode("latin-1").split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise ProtocolError("not an HTTP answer: %r" % status_line[:64])
        headers: Dict[str, str] = {}
        size = len(status_line)
        while True:
            line = await r.readline()
            size += len(line)
            if not line.endswith(b"\n") or size > MAX_HEADER:
                raise ProtocolError("the answer's headers ended early or are too large")
            text = line.decode("latin-1").strip()
            if not text:
                break
            k, _, v = text.partition(":")
            headers.setdefault(k.strip().lower(), v.strip())
        keep = parts[0] == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        return _Answer(self, r, w, int(parts[1]), headers, keep)

    async def call(self, method: str, path: str, obj: Any = None) -> Any:
        body = None if obj is None else json.dumps(obj).encode("utf-8")
        return await (await self.request(method, path, body)).json()


class _NothingRead(Exception):
    pass


class AsyncClient:
    """Client's API for asyncio: the same methods, as coroutines. Use one
    from one event loop at a time. ``await client.aclose()`` (or ``async
    with``) lets its connections and tool threads go."""

    def __init__(self, socket: Optional[str] = None, *, tool_workers: int = TOOL_WORKERS) -> None:
        self.socket = socket_path(socket)
        self._p = _Pool(self.socket)
        self._workers = max(1, int(tool_workers))
        self._pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
        # Answers still being sent after their run is over.
        self._tasks: Set["asyncio.Task[None]"] = set()

    def __repr__(self) -> str:
        return "AsyncClient(socket=%r)" % self.socket

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self._p.close()
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)

    async def info(self) -> Dict[str, Any]:
        return await self._p.call("GET", "/v1/info")

    async def health(self) -> Dict[str, Any]:
        return await self._p.call("GET", "/v1/health")

    async def sessions(self) -> List[Dict[str, Any]]:
        out = await self._p.call("GET", "/v1/sessions")
        return list(out.get("sessions") or []) if isinstance(out, dict) else []

    async def artifact(self, sha256: str) -> bytes:
        return await self._read_file("/v1/artifacts/" + urllib.parse.quote(sha256, safe=""))

    async def run(self, code: str, *, cell: bool = False, inputs: Optional[Mapping[str, Any]] = None,
                  files: Optional[Files] = None, timeout: Optional[Seconds] = None, memory: Optional[Size] = None,
                  pids: Optional[int] = None, env: Optional[Mapping[str, str]] = None,
                  with_: Optional[Strings] = None, python: Optional[str] = None, allow_net: Optional[Strings] = None,
                  secrets: Optional[Strings] = None, tools: Optional[Mapping[str, Callable[..., Any]]] = None,
                  on_output: Optional[AsyncOutputCallback] = None, cpus: Optional[float] = None,
                  tmp: Optional[Size] = None, output_bytes: Optional[Size] = None, stdin: Optional[str] = None,
                  args: Optional[Sequence[str]] = None, tool_timeout: Optional[Seconds] = None) -> Result:
        """Client.run, awaited."""
        req = run_fields(code, cell=cell, inputs=inputs, files=files, timeout=timeout, output_bytes=output_bytes,
                         stdin=stdin, args=args, tool_timeout=tool_timeout)
        req.update(jail_fields(python=python, with_=with_, env=env, memory=memory, pids=pids, cpus=cpus, tmp=tmp,
                               allow_net=allow_net, secrets=secrets))
        return await self._run(req, tool_specs(tools), on_output)

    def session(self, *, cell: Optional[bool] = None, inputs: Optional[Mapping[str, Any]] = None,
                files: Optional[Files] = None, timeout: Optional[Seconds] = None, memory: Optional[Size] = None,
                pids: Optional[int] = None, env: Optional[Mapping[str, str]] = None, with_: Optional[Strings] = None,
                python: Optional[str] = None, allow_net: Optional[Strings] = None, secrets: Optional[Strings] = None,
                tools: Optional[Mapping[str, Callable[..., Any]]] = None,
                on_output: Optional[AsyncOutputCallback] = None, cpus: Optional[float] = None,
                tmp: Optional[Size] = None, idle_timeout: Optional[Seconds] = None) -> "_Opening":
        """Client.session: ``s = await client.session(...)``, or ``async
        with client.session(...) as s:`` (which closes it)."""
        req = session_request(python=python, with_=with_, env=env, memory=memory, pids=pids, cpus=cpus, tmp=tmp,
                              allow_net=allow_net, secrets=secrets, files=files, idle_timeout=idle_timeout)
        specs = tool_specs(tools)
        if timeout is not None:
            to_millis(timeout)

        async def open_it() -> AsyncSession:
            desc = await self._p.call("POST", "/v1/sessions", req)
            if not isinstance(desc, dict) or not isinstance(desc.get("id"), str):
                raise ProtocolError("cellblockd answered a new session without its id")
            return AsyncSession(self, desc, cell=cell, inputs=inputs, timeout=timeout, tools=specs,
                                on_output=on_output)
        return _Opening(open_it)

    def _tool_pool(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(self._workers, thread_name_prefix="cellblock-tool")
        return self._pool

    async def _run(self, req: Dict[str, Any], tools: Mapping[str, ToolSpec],
                   on_output: Optional[AsyncOutputCallback]) -> Result:
        if tools:
            req["tools"] = [t.declaration() for t in tools.values()]
        body = json.dumps(req).encode("utf-8")
        stream = bool(tools) or on_output is not None
        ans = await self._p.request("POST", "/v1/runs", body, {"Accept": STREAM_TYPE} if stream else None)
        if ans.content_type != STREAM_TYPE:
            data = await ans.read(1 << 30)
            ans.close()
            try:
                obj = json.loads(data)
            except ValueError as e:
                raise ProtocolError("cellblockd's answer (status %d) is not a result object" % ans.status,
                                    status=ans.status) from e
            return raise_for(obj, ans.status)
        ok = False
        try:
            while True:
                line = await ans.readline()
                if not line:
                    raise ProtocolError("cellblockd ended the run's stream without a result")
                try:
                    ev = json.loads(line)
                except ValueError as e:
                    raise ProtocolError("cellblockd sent a line of the run's stream that is not JSON") from e
                if not isinstance(ev, dict):
                    continue
                if isinstance(ev.get("result"), dict):
                    ok = True
                    return raise_for(ev["result"], 200)
                tc = ev.get("tool_call")
                if isinstance(tc, dict):
                    task = asyncio.ensure_future(self._answer(ev.get("run_id"), tc, tools))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
                    continue
                stream_name, data = ev.get("stream"), ev.get("data")
                if on_output is not None and isinstance(stream_name, str) and isinstance(data, str):
                    out = on_output(stream_name, data)
                    if inspect.isawaitable(out):
                        await out
        finally:
            ans.close(reuse=ok)

    async def _answer(self, run: Any, tc: Dict[str, Any], tools: Mapping[str, ToolSpec]) -> None:
        call_id, name = tc.get("id"), tc.get("name")
        if not isinstance(run, str) or not isinstance(call_id, str):
            return
        spec = tools.get(name) if isinstance(name, str) else None
        if spec is None:
            answer: Dict[str, Any] = {"error": "this caller has no tool %r" % (name,)}
        else:
            try:
                args, kwargs = spec.arguments(tc.get("arguments") if isinstance(tc.get("arguments"), dict) else {})
                if spec.invoke is not None:
                    loop = asyncio.get_running_loop()
                    out = await loop.run_in_executor(self._tool_pool(), call, spec, tc.get("arguments"))
                elif inspect.iscoroutinefunction(spec.func) or inspect.iscoroutinefunction(
                        getattr(spec.func, "__call__", None)):
                    out = await spec.func(*args, **kwargs)
                else:
                    loop = asyncio.get_running_loop()
                    out = await loop.run_in_executor(self._tool_pool(), lambda: spec.func(*args, **kwargs))
                    if inspect.isawaitable(out):
                        out = await out
                answer = answer_for(spec.name, out, False)
            except Exception as e:
                answer = answer_for(spec.name, e, True)
        path = tool_path(run, call_id)
        try:
            await self._p.call("POST", path, answer)
        except CellblockError as e:
            again = retry_answer(answer, e)
            if again is not None:
                try:
                    await self._p.call("POST", path, again)
                except CellblockError:
                    pass

    async def _read_file(self, path: str) -> bytes:
        ans = await self._p.request("GET", path)
        if ans.status != 200:
            await ans.json()
            raise ProtocolError("cellblockd answered status %d" % ans.status)
        try:
            data = await ans.read(MAX_FILE)
        except ProtocolError:
            ans.close(reuse=False)
            raise ProtocolError("the file ended short of its size (it changed while it was read?)") from None
        ans.close()
        if ans.length is not None and len(data) != ans.length:
            raise ProtocolError("the file ended at %d of its %d bytes" % (len(data), ans.length))
        return data


class _Opening:
    """The session AsyncClient.session() is making: await it, or use it
    with ``async with``."""

    def __init__(self, make: Callable[[], Awaitable["AsyncSession"]]) -> None:
        self._make = make
        self._session: Optional[AsyncSession] = None

    def __await__(self) -> Generator[Any, None, "AsyncSession"]:
        return self._make().__await__()

    async def __aenter__(self) -> "AsyncSession":
        self._session = await self._make()
        return self._session

    async def __aexit__(self, *exc: Any) -> None:
        if self._session is not None:
            await self._session.close()


class AsyncSession:
    """Session, for asyncio: its methods are coroutines."""

    def __init__(self, client: AsyncClient, desc: Dict[str, Any], *, cell: Optional[bool],
                 inputs: Optional[Mapping[str, Any]], timeout: Optional[Seconds],
                 tools: Mapping[str, ToolSpec], on_output: Optional[AsyncOutputCallback]) -> None:
        self.client = client
        self.id: str = desc["id"]
        self.description = desc
        self.python: str = desc.get("python") or ""
        self._cell = cell
        self._inputs = dict(inputs) if inputs else None
        self._timeout = timeout
        self._tools: Dict[str, ToolSpec] = dict(tools)
        self._on_output = on_output
        self.closed = False

    def __repr__(self) -> str:
        return "AsyncSession(id=%r)" % self.id

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def run(self, code: str, *, cell: Optional[bool] = None, inputs: Optional[Mapping[str, Any]] = None,
                  files: Optional[Files] = None, timeout: Optional[Seconds] = None,
                  tools: Optional[Mapping[str, Callable[..., Any]]] = None,
                  on_output: Optional[AsyncOutputCallback] = None, output_bytes: Optional[Size] = None,
                  stdin: Optional[str] = None, tool_timeout: Optional[Seconds] = None) -> Result:
        if self._inputs:
            inputs = dict(self._inputs, **(inputs or {}))
            self._inputs = None
        req = run_fields(code, cell=self._cell if cell is None else cell, inputs=inputs, files=files,
                         timeout=self._timeout if timeout is None else timeout, output_bytes=output_bytes,
                         stdin=stdin, session=self.id, tool_timeout=tool_timeout)
        specs = dict(self._tools)
        specs.update(tool_specs(tools))
        return await self.client._run(req, specs, on_output or self._on_output)

    async def put(self, path: str, data: Union[str, bytes]) -> Dict[str, Any]:
        if isinstance(data, str):
            data = data.encode("utf-8")
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError("data must be str or bytes, not %s" % type(data).__name__)
        ans = await self.client._p.request("PUT", file_path(self.id, path), bytes(data),
                                           {"Content-Type": "application/octet-stream"})
        return await ans.json()

    async def get(self, path: str) -> bytes:
        return await self.client._read_file(file_path(self.id, path))

    async def info(self) -> Dict[str, Any]:
        return await self.client._p.call("GET", "/v1/sessions/" + urllib.parse.quote(self.id, safe=""))

    async def variables(self) -> List[Variable]:
        return [Variable.from_json(v) for v in ((await self.info()).get("variables") or [])]

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            await self.client._p.call("DELETE", "/v1/sessions/" + urllib.parse.quote(self.id, safe=""))
        except CellblockError as e:
            if e.type not in ("session_not_found", "unreachable"):
                raise

