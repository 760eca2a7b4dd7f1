"""cellblock: the program's side of the sandbox.

display(obj, ...)  send objects' rich output (PNG, SVG, HTML, ...) with the run's result
inputs             the run's inputs, a dict of name -> JSON value
tools              host tools the run may call, as tools.NAME(**arguments)
call_tool          call_tool(NAME, {...}): the same, with the arguments as a dict
ToolError          raised when a tool call fails
"""

from os import getpid as _getpid

from cellblock import _channel

__all__ = ["display", "inputs", "tools", "call_tool", "ToolError"]


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


class _NoTool(ToolError, AttributeError):
    """There is no such tool in this run."""


# The run's tool client (cellblock._tools.Client) and the functions made
# for its tools so far; set by the runner, None outside a run with tools.
_client = None
_made = {}


def _declare(client):
    global _client
    _client = client
    _made.clear()


class _Tools:
    """The run's host tools: tools.NAME(**arguments) calls NAME on the
    caller's side and returns its JSON result; a failed call raises
    ToolError. dir(tools) lists them and help(tools.NAME) describes one."""

    __slots__ = ()

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        c = _client
        if c is None or name not in c.tools:
            if c is None or not c.tools:
                raise _NoTool("no tool %r: this run declares no tools" % name)
            raise _NoTool("no tool %r in this run; it declares %s" % (name, ", ".join(sorted(c.tools))))
        f = _made.get(name)
        if f is None:
            from cellblock import _tools
            f = _made[name] = _tools.function(c, name)
        return f

    def __dir__(self):
        c = _client
        return sorted(c.tools) if c is not None else []

    def __contains__(self, name):
        c = _client
        return c is not None and name in c.tools

    def __repr__(self):
        c = _client
        if c is None or not c.tools:
            return "<cellblock tools: none in this run>"
        from cellblock import _tools
        text = ", ".join(_tools.signature(n, c.tools[n][1]) for n in sorted(c.tools))
        if len(text) > _tools.REPR_BYTES:
            text = text[:_tools.REPR_BYTES] + " ..."
        return "<cellblock tools: %s>" % text


tools = _Tools()


def call_tool(name, arguments=None, **kwargs):
    """Call the run's tool name with arguments (a dict) and kwargs, as
    tools.NAME(**arguments) does, for names or arguments that are not
    Python identifiers. Returns its JSON result; raises ToolError when the
    call fails."""
    args = dict(arguments) if arguments is not None else {}
    args.update(kwargs)
    from cellblock import _tools
    return _tools.call(name, args)
