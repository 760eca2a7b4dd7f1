"""HTTP/1.1 to cellblockd over its Unix socket, blocking: the standard
library's http.client on a Unix stream socket, with a small pool of idle
connections that requests reuse.

A connection is reused only when its answer was read whole and the daemon
keeps it open; a request on a reused connection that the daemon had closed
before reading it (its idle timeout) is sent again once on a new one.
Closing a connection while a run streams on it is how a caller goes away:
the daemon cancels the run.
"""

from __future__ import annotations

import http.client
import json
import os
import socket as _socket
import threading
from typing import Any, Dict, List, NoReturn, Optional, Tuple

from ._errors import ProtocolError, UnreachableError, error_from

__all__ = ["DEFAULT_SOCKET", "SOCKET_ENV", "socket_path", "Transport", "Response"]

# Where clients look for the daemon when neither an argument nor
# $CELLBLOCK_SOCKET names a socket (as the cellblock CLI does).
DEFAULT_SOCKET = "/run/cellblock/cellblockd.sock"
SOCKET_ENV = "CELLBLOCK_SOCKET"
STREAM_TYPE = "application/x-ndjson"

# How many idle connections a client keeps.
MAX_IDLE = 16
# The most of an answer that is not a run's stream or a file read whole.
MAX_ANSWER = 64 << 20


def socket_path(socket: Optional[str] = None) -> str:
    """The socket: the argument, else $CELLBLOCK_SOCKET, else the default."""
    if socket:
        return os.fspath(socket)
    return os.environ.get(SOCKET_ENV) or DEFAULT_SOCKET


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("cellblockd")
        self._path = path

    def connect(self) -> None:
        s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            s.connect(self._path)
        except BaseException:
            s.close()
            raise
        self.sock = s


class Response:
    """An answer whose body is still to be read: read() or lines(), then
    close() (which keeps the connection for the next request when the body
    was read whole)."""

    def __init__(self, transport: "Transport", conn: _UnixConnection, resp: http.client.HTTPResponse) -> None:
        self._t = transport
        self._conn: Optional[_UnixConnection] = conn
        self.raw = resp
        self.status = resp.status
        self.content_type = (resp.getheader("Content-Type") or "").split(";")[0].strip().lower()

    def read(self, limit: int = MAX_ANSWER) -> bytes:
        data = self.raw.read(limit + 1)
        if len(data) > limit:
            self.close(reuse=False)
            raise ProtocolError("cellblockd's answer is larger than %d bytes" % limit)
        return data

    def readline(self) -> bytes:
        return self.raw.readline()

    def close(self, reuse: bool = True) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if reuse and self.raw.isclosed() and not self.raw.will_close:
            self._t._put(conn)
        else:
            self.raw.close()
            conn.close()

    def json(self) -> Any:
        """The body as JSON; an answer that is not 200 raises its error."""
        data = self.read()
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

    def __enter__(self) -> "Response":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close(reuse=exc[0] is None)


class Transport:
    """Requests to one socket over connections it reuses. Safe for use
    from several threads."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._idle: List[_UnixConnection] = []

    def _get(self) -> Optional[_UnixConnection]:
        with self._lock:
            return self._idle.pop() if self._idle else None

    def _put(self, conn: _UnixConnection) -> None:
        with self._lock:
            if len(self._idle) < MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        """Close the idle connections."""
        with self._lock:
            idle, self._idle = self._idle, []
        for c in idle:
            c.close()

    def request(self, method: str, path: str, body: Optional[bytes] = None,
                headers: Optional[Dict[str, str]] = None) -> Response:
        """Send a request and return its answer, whose body is to be read."""
        hdrs = dict(headers or {})
        if body is not None:
            hdrs.setdefault("Content-Type", "application/json")
        elif method in ("POST", "PUT"):
            body = b""
        conn = self._get()
        if conn is not None:
            try:
                return Response(self, conn, self._round_trip(conn, method, path, body, hdrs))
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                conn.close()  # closed by the daemon while idle: once more, anew
            except BaseException as e:
                conn.close()
                self._raise(e)
        conn = _UnixConnection(self.path)
        try:
            return Response(self, conn, self._round_trip(conn, method, path, body, hdrs))
        except BaseException as e:
            conn.close()
            self._raise(e)

    def _raise(self, e: BaseException) -> NoReturn:
        err = self._unreachable(e)
        if err is e:
            raise e
        raise err from e

    def _unreachable(self, e: BaseException) -> BaseException:
        """The error to raise for e, which a request raised."""
        if isinstance(e, FileNotFoundError):
            return UnreachableError("cellblockd is not reachable at %s: no such socket (is it running? set "
                                    "CELLBLOCK_SOCKET or pass socket=)" % self.path)
        if isinstance(e, PermissionError):
            return UnreachableError("cellblockd is not reachable at %s: %s (is this user in the socket's group?)"
                                    % (self.path, e))
        if isinstance(e, (OSError, http.client.HTTPException)):
            return UnreachableError("cellblockd is not reachable at %s: %s" % (self.path, e))
        return e

    @staticmethod
    def _round_trip(conn: _UnixConnection, method: str, path: str, body: Optional[bytes],
                    headers: Dict[str, str]) -> http.client.HTTPResponse:
        conn.request(method, path, body=body, headers=headers)
        return conn.getresponse()

    def call(self, method: str, path: str, obj: Any = None) -> Any:
        """A JSON request (obj, when not None) whose JSON answer is returned;
        an answer that is not 200 raises its CellblockError."""
        body = None if obj is None else json.dumps(obj).encode("utf-8")
        return self.request(method, path, body).json()


def split_result(resp: Response) -> Tuple[Any, int]:
    """The decoded body of an answer that carries a result object, and its
    status."""
    data = resp.read(1 << 30)
    resp.close()
    try:
        return json.loads(data), resp.status
    except ValueError as e:
        raise ProtocolError("cellblockd's answer (status %d) is not a result object" % resp.status,
                            status=resp.status) from e

