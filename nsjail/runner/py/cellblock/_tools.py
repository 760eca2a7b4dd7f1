# The runner's side of tool calls (see nsjail/runner/PROTOCOL.md, "Tools").
#
# A run whose message declares tools gets them as cellblock.tools.NAME:
# a function that sends a tool_call frame on the channel and waits for the
# tool_result frame with the same id. A reader thread takes the daemon's
# frames off the channel and hands each answer to its waiter, so that calls
# from several threads wait side by side. It starts with the run's first
# call and stops before the run's done: a session's runner reads the
# channel itself between runs, and a run without calls never starts it.
#
# Nothing here trusts the program: it may call from any thread, from a
# forked child (refused), from a signal handler, or after the run.

import json as _json
import os as _os
import _thread

import cellblock
from cellblock import _channel

# How long past the run's tool timeout a call waits before it gives up on
# its own (the daemon answers every call by its timeout).
GRACE = 5.0
# The most tools shown in repr(cellblock.tools).
REPR_BYTES = 2000

# The run's client; None outside a run that declared tools.
client = None

_KEYWORDS = frozenset((
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in",
    "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while", "with", "yield"))


def _identifier(s):
    return type(s) is str and s.isidentifier() and s.isascii() and s not in _KEYWORDS


class _Waiter:
    __slots__ = ("lock", "msg")

    def __init__(self):
        self.lock = _thread.allocate_lock()
        self.lock.acquire()
        self.msg = None


class Client:
    """One run's tool calls: the declared tools, the calls waiting for
    their answers, and the reader thread that delivers them."""

    def __init__(self, ch, tools, limits):
        self.ch = ch
        self.pid = ch.pid
        self.tools = tools
        self.arg_bytes = 1 << 20
        self.timeout = 30.0
        if type(limits) is dict:
            v = limits.get("argument_bytes")
            if type(v) is int and v > 0:
                self.arg_bytes = v
            v = limits.get("timeout_ms")
            if type(v) is int and v > 0:
                self.timeout = v / 1000.0
        self.lock = _thread.allocate_lock()
        self.waiting = {}
        self.seq = 0
        self.over = False
        self.reader = None
        self.stop_r = self.stop_w = -1

    def call(self, name, arguments, _dumps=_json.dumps, _getpid=_os.getpid):
        if _getpid() != self.pid:
            raise cellblock.ToolError("tools cannot be called from a forked child process: call %s from the "
                                      "process that runs the code" % name)
        try:
            args = _dumps(arguments, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        except (TypeError, ValueError, RecursionError) as e:
            raise TypeError("the arguments of tool %s must be JSON data (dict, list, str, int, float, bool, "
                            "None): %s" % (name, e)) from None
        size = _channel.utf8_len(args)
        if size > self.arg_bytes:
            raise cellblock.ToolError("the arguments of %s are %d bytes as JSON; a call may pass at most %d"
                                      % (name, size, self.arg_bytes))
        w = _Waiter()
        with self.lock:
            if self.over:
                raise cellblock.ToolError("tool %s was declared by a run that is over" % name)
            self.seq += 1
            cid = "c%d" % self.seq
            self.waiting[cid] = w
            if self.reader is None:
                try:
                    self._start_reader()
                except BaseException:
                    del self.waiting[cid]
                    raise
        text = '{"type":"tool_call","id":"%s","name":%s,"arguments":%s}' % (cid, _dumps(name), args)
        try:
            if not self.ch.send_raw(text):
                if self.ch.dead:
                    why = "the channel to the sandbox is closed"
                else:
                    why = "the call is larger than a frame may be (%d bytes)" % self.ch.limits["frame_bytes"]
                raise cellblock.ToolError("tool %s could not be called: %s" % (name, why))
            got = w.lock.acquire(True, self.timeout + GRACE)
        finally:
            with self.lock:
                self.waiting.pop(cid, None)
        if not got:
            raise cellblock.ToolError("tool %s did not answer within %g s" % (name, self.timeout + GRACE))
        msg = w.msg
        if msg.get("ok") is True:
            return msg.get("result")
        err = msg.get("error")
        raise cellblock.ToolError(err if type(err) is str and err else "tool %s failed" % name)

    def _start_reader(self):
        """Start the reader thread, with a pipe that stops it. Called with
        self.lock held."""
        import threading
        r, w = _os.pipe()
        self.stop_r, self.stop_w = _high(r), _high(w)
        t = threading.Thread(target=self._read, name="cellblock-tools", daemon=True)
        t.start()
        self.reader = t

    def _read(self, _loads=_json.loads):
        import select
        fd = self.ch.fd
        poll = select.poll()
        poll.register(fd, select.POLLIN)
        poll.register(self.stop_r, select.POLLIN)
        why = "the channel to the sandbox closed"
        try:
            while True:
                ready = [f for f, _ in poll.poll()]
                if self.stop_r in ready:
                    why = None
                    break
                head = _read_exact(fd, 4, poll)
                if head is None:
                    break
                n = int.from_bytes(head, "big")
                if n > _channel.MAX_IN_FRAME:
                    why = "a frame from the sandbox was too large"
                    break
                body = _read_exact(fd, n, poll)
                if body is None:
                    break
                try:
                    msg = _loads(body.decode("utf-8"))
                except ValueError:
                    continue
                if type(msg) is dict and msg.get("type") == "tool_result":
                    with self.lock:
                        w = self.waiting.pop(msg.get("id"), None)
                    if w is not None:
                        w.msg = msg
                        w.lock.release()
        except Exception as e:
            why = "the channel to the sandbox failed: %s" % type(e).__name__
        self._fail_all(why or "the run is over")

    def _fail_all(self, why):
        with self.lock:
            waiting = list(self.waiting.values())
            self.waiting.clear()
        for w in waiting:
            w.msg = {"ok": False, "error": why}
            w.lock.release()

    def end(self):
        """The run is over: no more calls, calls still waiting fail, and
        the reader stops before the run's done."""
        with self.lock:
            self.over = True
            reader = self.reader
        if reader is not None and _os.getpid() == self.pid:
            try:
                _os.write(self.stop_w, b"x")
            except OSError:
                pass
            reader.join(2.0)
            if not reader.is_alive():
                for fd in (self.stop_r, self.stop_w):
                    try:
                        _os.close(fd)
                    except OSError:
                        pass
        self._fail_all("the run is over")


def _high(fd):
    """fd moved near the channel, close-on-exec, out of the program's way
    (its own files get the numbers they would get under plain python)."""
    try:
        import fcntl
        ch = _channel.channel
        base = max(3, ch.fd - 16) if ch is not None else 3
        high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, base)
    except (ImportError, OSError, AttributeError):
        _os.set_inheritable(fd, False)
        return fd
    _os.close(fd)
    return high


def _read_exact(fd, n, poll):
    buf = bytearray()
    while len(buf) < n:
        try:
            b = _os.read(fd, min(n - len(buf), 1 << 20))
        except BlockingIOError:
            poll.poll()
            continue
        if not b:
            return None
        buf += b
    return bytes(buf)


def call(name, arguments):
    """cellblock.call_tool: call tool name with arguments, a dict."""
    c = client
    if c is None:
        raise cellblock.ToolError("cannot call tool %r: this run declares no tools" % (name,))
    if type(name) is not str:
        raise TypeError("a tool's name is a string, not %s" % type(name).__name__)
    if not isinstance(arguments, dict):
        raise TypeError("a tool's arguments are a dict, not %s" % type(arguments).__name__)
    return c.call(name, arguments)


def begin(ch, tools, limits):
    """Declare a run's tools (the run message's "tools", trusted but
    checked) as cellblock.tools. Returns the client."""
    global client
    declared = {}
    if type(tools) is list:
        for t in tools:
            if type(t) is not dict or not _identifier(t.get("name")) or t["name"].startswith("_"):
                continue
            desc = t.get("description")
            schema = t.get("input_schema")
            declared[t["name"]] = (desc if type(desc) is str else "", schema if type(schema) is dict else None)
    client = Client(ch, declared, limits)
    cellblock._declare(client)
    return client


def end():
    """End the run's tool calls, if it declared tools."""
    global client
    c, client = client, None
    if c is not None:
        cellblock._declare(None)
        c.end()


# Python signatures and docstrings from input schemas.

_TYPES = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "array": "list",
          "object": "dict", "null": "None"}


def _type_of(schema):
    if type(schema) is not dict:
        return "Any"
    if "enum" in schema and type(schema["enum"]) is list and schema["enum"]:
        vals = schema["enum"][:8]
        try:
            return "Literal[%s]" % ", ".join(repr(v) for v in vals) + ("" if len(schema["enum"]) <= 8 else " | ...")
        except Exception:
            return "Any"
    t = schema.get("type")
    if type(t) is str:
        name = _TYPES.get(t, "Any")
        if t == "array" and type(schema.get("items")) is dict:
            name = "list[%s]" % _type_of(schema["items"])
        return name
    if type(t) is list:
        return " | ".join(_TYPES.get(x, "Any") for x in t if type(x) is str) or "Any"
    for key in ("anyOf", "oneOf"):
        alts = schema.get(key)
        if type(alts) is list and alts:
            return " | ".join(_type_of(a) for a in alts[:6])
    return "Any"


def _params(schema):
    """(required, optional, more): the named parameters an input schema
    gives, and whether other names are allowed."""
    if type(schema) is not dict:
        return [], [], True
    props = schema.get("properties")
    props = props if type(props) is dict else {}
    req = schema.get("required")
    req = [r for r in req if type(r) is str] if type(req) is list else []
    required, optional = [], []
    # Other names only when the schema names none or asks for them
    # (additionalProperties left out allows them too, but a signature
    # with **arguments everywhere tells a reader less; call_tool passes
    # any names).
    extra = schema.get("additionalProperties")
    more = not props or (extra is not None and extra is not False)
    for name, sub in props.items():
        if not _identifier(name) or name.startswith("_"):
            more = True
            continue
        (required if name in req else optional).append((name, sub))
    return required, optional, more


def signature(name, schema):
    """name's Python signature, as in help(): add(*, x: float, y: float)."""
    required, optional, more = _params(schema)
    parts = ["%s: %s" % (n, _type_of(s)) for n, s in required]
    parts += ["%s: %s = ..." % (n, _type_of(s)) for n, s in optional]
    if parts:
        parts.insert(0, "*")
    if more:
        parts.append("**arguments")
    return "%s(%s)" % (name, ", ".join(parts))


def docstring(name, description, schema):
    lines = [signature(name, schema)]
    if description:
        lines += ["", description.strip()]
    required, optional, _ = _params(schema)
    if required or optional:
        lines += ["", "Arguments (keyword only):"]
        for n, s in required + optional:
            line = "  %s: %s%s" % (n, _type_of(s), "" if (n, s) in optional else ", required")
            d = s.get("description") if type(s) is dict else None
            if type(d) is str and d:
                line += ": " + d.strip().replace("\n", " ")[:300]
            lines.append(line)
    lines += ["", "Returns the tool's JSON result; raises cellblock.ToolError when the call fails."]
    return "\n".join(lines)


class _Absent:
    __slots__ = ()

    def __repr__(self):
        return "..."


_ABSENT = _Absent()


def function(c, name):
    """The function that calls tool name of client c: keyword arguments
    as its input schema names them (required ones required), **arguments
    for the others."""
    description, schema = c.tools[name]
    required, optional, more = _params(schema)
    params = [n for n, _ in required] + ["%s=_cb_absent" % n for n, _ in optional]
    if params:
        params.insert(0, "*")
    if more:
        params.append("**_cb_more")
    names = [n for n, _ in required + optional]
    src = ("def %s(%s):\n"
           "    _cb_args = {k: v for k, v in ((%s)) if v is not _cb_absent}\n"
           "%s"
           "    return _cb_call(%r, _cb_args)\n") % (
        name, ", ".join(params), "".join("(%r, %s), " % (n, n) for n in names) or "()",
        "    _cb_args.update(_cb_more)\n" if more else "", name)
    ns = {"_cb_absent": _ABSENT, "_cb_call": c.call}
    exec(compile(src, "<cellblock tool %s>" % name, "exec", dont_inherit=True), ns)
    f = ns[name]
    f.__qualname__ = name
    f.__module__ = "cellblock.tools"
    f.__doc__ = docstring(name, description, schema)
    return f
