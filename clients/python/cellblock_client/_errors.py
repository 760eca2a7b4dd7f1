"""The errors of the client: one class per error type of cellblockd's API.

A request the daemon could not carry out as asked answers with an error
object, {"type": ..., "message": ..., "field": ...}; the client raises it as
the CellblockError subclass of its type, so that callers catch what they
can act on (SessionBusyError, OverLimitError, ...) and read .type for the
rest. A program that ran and failed (a non-zero exit, an exception, a
timeout, the memory limit) is no error: its Result says so.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Type

__all__ = [
    "CellblockError",
    "BadRequestError",
    "TooLargeError",
    "OverLimitError",
    "UnknownPythonError",
    "DependencyError",
    "ForbiddenError",
    "NotFoundError",
    "InUseError",
    "BusyError",
    "UnavailableError",
    "InternalError",
    "CanceledError",
    "SessionNotFoundError",
    "SessionBusyError",
    "SessionLostError",
    "UnreachableError",
    "ProtocolError",
    "error_from",
]


class CellblockError(Exception):
    """A request cellblockd could not carry out as asked.

    ``type`` is the API's error type ("session_busy", "over_limit", ...),
    ``message`` its text, ``field`` the request field at fault (or None),
    ``status`` the HTTP status (0 when the daemon was not reached) and
    ``result`` the run's Result when the error came with one (a run whose
    session was lost while it ran still has its output).
    """

    type: str = "error"

    def __init__(self, message: str, *, type: Optional[str] = None, field: Optional[str] = None,
                 status: int = 0, result: Any = None) -> None:
        super().__init__(message)
        if type is not None:
            self.type = type
        self.message = message
        self.field = field
        self.status = status
        self.result = result

    def __str__(self) -> str:
        if self.field:
            return "%s: %s: %s" % (self.type, self.field, self.message)
        return "%s: %s" % (self.type, self.message)


class BadRequestError(CellblockError, ValueError):
    """The request is malformed or invalid (``bad_request``); ``field`` names it."""
    type = "bad_request"


class TooLargeError(CellblockError, ValueError):
    """The request, or one of its fields, is over a size limit (``too_large``)."""
    type = "too_large"


class OverLimitError(CellblockError, ValueError):
    """A limit asked for is above the daemon's maximum (``over_limit``)."""
    type = "over_limit"


class UnknownPythonError(CellblockError, ValueError):
    """No interpreter of the daemon matches ``python`` (``unknown_python``)."""
    type = "unknown_python"


class DependencyError(CellblockError):
    """The dependencies could not be resolved or built (``dependency_error``)."""
    type = "dependency_error"


class ForbiddenError(CellblockError, PermissionError):
    """This uid may not use cellblockd (``forbidden``)."""
    type = "forbidden"


class NotFoundError(CellblockError, LookupError):
    """No such object: an artifact, a tool call (``not_found``)."""
    type = "not_found"


class InUseError(CellblockError):
    """The object is in use (``in_use``)."""
    type = "in_use"


class BusyError(CellblockError):
    """The daemon's run queue, or the uid's session maximum, is full (``busy``): try again."""
    type = "busy"


class UnavailableError(CellblockError):
    """cellblockd is shutting down (``unavailable``)."""
    type = "unavailable"


class InternalError(CellblockError):
    """cellblockd failed; its log has the reference the message names (``internal``)."""
    type = "internal"


class CanceledError(CellblockError):
    """The run was cancelled (``canceled``)."""
    type = "canceled"


class SessionNotFoundError(NotFoundError):
    """The session is unknown, expired, closed, or another uid's (``session_not_found``)."""
    type = "session_not_found"


class SessionBusyError(CellblockError):
    """Another run is in progress in the session (``session_busy``); runs are not queued."""
    type = "session_busy"


class SessionLostError(CellblockError):
    """The session's interpreter died (memory, a crash); close it (``session_lost``)."""
    type = "session_lost"


class UnreachableError(CellblockError, ConnectionError):
    """cellblockd could not be reached at the socket (``unreachable``, the client's own type)."""
    type = "unreachable"


class ProtocolError(CellblockError):
    """cellblockd's answer was not what the API says (``protocol``, the client's own type)."""
    type = "protocol"


_BY_TYPE: Dict[str, Type[CellblockError]] = {
    cls.type: cls
    for cls in (BadRequestError, TooLargeError, OverLimitError, UnknownPythonError, DependencyError,
                ForbiddenError, NotFoundError, InUseError, BusyError, UnavailableError, InternalError,
                CanceledError, SessionNotFoundError, SessionBusyError, SessionLostError,
                UnreachableError, ProtocolError)
}


def error_from(obj: Any, *, status: int = 0, result: Any = None) -> CellblockError:
    """The exception for an API error object ({"type", "message", "field"}).
    A type this client does not know yet is a plain CellblockError with
    that type."""
    if not isinstance(obj, dict):
        return ProtocolError("cellblockd answered with status %d and no error object" % status, status=status,
                             result=result)
    etype = obj.get("type")
    etype = etype if isinstance(etype, str) and etype else "internal"
    message = obj.get("message")
    message = message if isinstance(message, str) else ""
    field = obj.get("field")
    field = field if isinstance(field, str) and field else None
    cls = _BY_TYPE.get(etype, CellblockError)
    return cls(message, type=etype, field=field, status=status, result=result)
