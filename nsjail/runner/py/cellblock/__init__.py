"""cellblock: the program's side of the sandbox.

display(obj, ...)  send objects' rich output (PNG, SVG, HTML, ...) with the run's result
inputs             the run's inputs, a dict of name -> JSON value
tools              host tools the run may call, as tools.NAME(**arguments)
ToolError          raised when a tool call fails
"""

from os import getpid as _getpid

from cellblock import _channel

__all__ = ["display", "inputs", "tools", "ToolError"]


class ToolError(Exception):
    """A tool call failed, or tools are not available."""


def display(*objs):
    """Send each object's rich representation with the run's result.

    Objects with _repr_png_, _repr_jpeg_, _repr_svg_, _repr_html_,
    _repr_markdown_, _repr_latex_, _repr_json_ or _repr_mimebundle_ give
    those MIME types, every object its repr as text/plain. Outside a
    cellblock run the repr is printed instead.
    """
    ch = _channel.channel
    for obj in objs:
        if ch is not None and ch.pid == _getpid():
            ch.display(obj)
        else:
            print(repr(obj))


# The run's inputs; the runner fills it in before the code runs.
inputs = {}


class _Tools:
    """Host tools, callable as tools.NAME(**arguments)."""

    __slots__ = ()

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        raise ToolError("tools are not available in this run")

    def __repr__(self):
        return "<cellblock tools: none available>"


tools = _Tools()
