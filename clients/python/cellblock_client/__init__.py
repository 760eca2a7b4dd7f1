"""cellblock_client: run Python in cellblock's sandbox from Python.

    from cellblock_client import Client
    with Client() as client:
        r = client.run("print(6 * 7)")
        print(r.stdout)

Client (and AsyncClient) speak cellblockd's API on its Unix socket;
Interpreter is DSPy's CodeInterpreter protocol on a cellblock session;
SandboxExecutor runs code written for a tools-object executor. Pure
standard library; see docs/python-client.md.
"""

from ._errors import (BadRequestError, BusyError, CanceledError, CellblockError, DependencyError, ForbiddenError,
                      InternalError, InUseError, NotFoundError, OverLimitError, ProtocolError, SessionBusyError,
                      SessionLostError, SessionNotFoundError, TooLargeError, UnavailableError, UnknownPythonError,
                      UnreachableError)
from ._types import (Denial, DisplayItem, File, FileSkipped, Limits, Phases, Result, RunException, SessionState,
                     ToolCallReport, Value, Variable)
from ._client import Client, Session
from ._async import AsyncClient, AsyncSession
from ._interpreter import Interpreter, dspy_class
from ._executor import ExecutionResult, SandboxExecutor

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._interpreter import CodeExecutionError, CodeInterpreterError, FinalOutput

__version__ = "0.1.0"

__all__ = [
    "Client", "Session", "AsyncClient", "AsyncSession", "Result", "Value", "RunException", "DisplayItem", "File", "FileSkipped",
    "ToolCallReport", "Denial", "SessionState", "Limits", "Phases", "Variable",
    "CellblockError", "BadRequestError", "TooLargeError", "OverLimitError", "UnknownPythonError", "DependencyError",
    "ForbiddenError", "NotFoundError", "InUseError", "BusyError", "UnavailableError", "InternalError",
    "CanceledError", "SessionNotFoundError", "SessionBusyError", "SessionLostError", "UnreachableError",
    "ProtocolError", "Interpreter", "FinalOutput", "CodeInterpreterError", "CodeExecutionError",
    "SandboxExecutor", "ExecutionResult",
]


def __getattr__(name: str) -> Any:
    # DSPy's own classes when DSPy is importable (its isinstance checks
    # then pass), else the client's, with the same names.
    if name in ("FinalOutput", "CodeInterpreterError", "CodeExecutionError"):
        return dspy_class(name)
    raise AttributeError("module 'cellblock_client' has no attribute %r" % name)
