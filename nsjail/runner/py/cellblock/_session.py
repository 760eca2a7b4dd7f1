# The runner's session mode (see nsjail/runner/PROTOCOL.md, "Sessions"):
# one interpreter that runs code again and again in the same __main__,
# keeping its globals, imports and /work between runs.
#
# The daemon sends each run message with three descriptors attached
# (SCM_RIGHTS): the run's standard input, output and error, which this
# module puts on 0, 1 and 2 for the run and replaces with /dev/null after
# it, so that each run's output is its own and ends when the run does.
#
# SIGINT (the daemon's interrupt of a run out of time, or cancelled) is a
# KeyboardInterrupt only while the run's code runs, as python's own handler
# raises it; one that comes before the code starts is raised as it starts.
# While the runner sets a run up or ends it, and between runs, it is
# ignored: it would stop only the runner, and lose the session. Frames are
# never cut by it (Channel.hold_interrupts).

import _signal
import array as _array
import os as _os
import socket as _socket
import sys as _sys

from cellblock import _channel

# The most descriptors a run message may carry.
_RUN_FDS = 3
# The variables reported after each run, and the size of each repr.
MAX_VARIABLES = 200
VARIABLE_REPR = 120

# Types whose repr runs no code of the program's: shown as they are.
_PLAIN = (int, float, complex, bool, type(None))
# Builtin containers: shown by length, without touching their items.
_SIZED = (list, tuple, dict, set, frozenset, bytearray)

_SIGINT = _signal.SIGINT
_default_int = _signal.default_int_handler
# run: a run message came and its code has not started; pending: SIGINT
# came meanwhile.
_interrupt = {"run": False, "pending": False}


def _on_sigint(signum, frame, _s=_interrupt):
    """SIGINT's handler outside the code: remembered for a run about to
    start, else ignored."""
    if _s["run"]:
        _s["pending"] = True


def _arm(on, _s=_interrupt, _get=_signal.getsignal, _set=_signal.signal):
    """Let SIGINT raise KeyboardInterrupt (on), or not. A handler the
    program installed is left as it is."""
    h = _get(_SIGINT)
    if on:
        if h is _on_sigint:
            _set(_SIGINT, _default_int)
        _s["run"] = False
        if _s["pending"]:
            _s["pending"] = False
            raise KeyboardInterrupt
    else:
        _s["run"] = _s["pending"] = False
        if h is _default_int:
            _set(_SIGINT, _on_sigint)


def serve(ch, fd, runner):
    """Run the session until the channel ends; never returns."""
    try:
        sock = _socket.socket(fileno=_os.dup(fd))
    except OSError:
        runner._fail("session: the channel is not a socket")

    def after_fork(_sock=sock, _close=_os.close):
        # A forked child keeps neither end (see _guard_fork).
        try:
            _close(_sock.detach())
        except Exception:
            pass
    _os.register_at_fork(after_in_child=after_fork)

    g = _fresh_main()
    null = _os.open(_os.devnull, _os.O_RDWR | _os.O_CLOEXEC)
    for i in (0, 1, 2):
        _os.dup2(null, i)
    ch.hold_interrupts = True
    _arm(False)
    ch.send({"type": "idle"})
    while True:
        try:
            msg, fds = _recv(sock, _channel.MAX_IN_FRAME)
        except KeyboardInterrupt:
            continue  # an interrupt that came after its run: nothing to stop
        except OSError:
            msg, fds = None, []
        if msg is None:
            _close_all(fds)
            _os._exit(0)  # the daemon ended the session
        if type(msg) is dict and msg.get("type") == "file":
            # An input file, between runs (PROTOCOL.md, "Files").
            _close_all(fds)
            try:
                from cellblock import _files
                _files.on_frame(ch, msg, runner.WORK_DIR)
            except KeyboardInterrupt:
                pass
            continue
        if type(msg) is not dict or msg.get("type") != "run" or len(fds) != _RUN_FDS:
            _close_all(fds)
            continue
        try:
            _run(ch, g, msg, fds, null, runner)
        except BaseException:
            # An interrupt (of a handler the program installed) while the
            # run was set up: the run is over.
            try:
                _arm(False)
                ch.send({"type": "done", "exit_code": 130})
            except BaseException:
                pass
        if ch.dead:
            # The program closed or broke the channel: nothing more can be
            # reported, so the session ends (the daemon sees it lost).
            _os._exit(3)


def _fresh_main():
    """A new __main__, as the interactive interpreter starts with."""
    main = type(_sys)("__main__")
    d = main.__dict__
    d["__loader__"] = _sys.modules["_frozen_importlib"].BuiltinImporter
    d["__spec__"] = None
    d["__annotations__"] = {}
    d["__builtins__"] = _sys.modules["builtins"]
    _sys.modules["__main__"] = main
    _sys.argv = [""]
    if not getattr(_sys.flags, "safe_path", False) and not _sys.flags.isolated and _sys.path:
        _sys.path[0] = ""
    return d


def _recv(sock, max_frame):
    """One frame and the descriptors sent with it; (None, fds) at the end
    of the channel or on garbage."""
    fds = []

    def take(anc):
        for level, kind, data in anc:
            if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
                a = _array.array("i")
                a.frombytes(data[:len(data) - len(data) % a.itemsize])
                fds.extend(a)

    def read(n):
        buf = bytearray()
        while len(buf) < n:
            data, anc, _, _ = sock.recvmsg(min(n - len(buf), 1 << 20), _socket.CMSG_SPACE(_RUN_FDS * 4),
                                           _socket.MSG_CMSG_CLOEXEC)
            take(anc)
            if not data:
                return None
            buf += data
        return bytes(buf)

    h = read(4)
    if h is None:
        return None, fds
    n = int.from_bytes(h, "big")
    if n > max_frame:
        return None, fds
    raw = read(n)
    if raw is None:
        return None, fds
    try:
        import json
        return json.loads(raw.decode("utf-8")), fds
    except ValueError:
        return None, fds


def _close_all(fds):
    for f in fds:
        try:
            _os.close(f)
        except OSError:
            pass


def _run(ch, g, msg, fds, null, runner):
    """Carry out one run message in g."""
    _interrupt["run"] = True
    seq = msg.get("seq")
    mode = msg.get("mode", "cell")
    code = msg.get("code")
    inputs = msg.get("inputs", {})
    filename = msg.get("filename", "<cell>")
    if (type(seq) is not int or mode not in ("script", "cell") or type(code) is not str
            or type(inputs) is not dict or type(filename) is not str):
        _close_all(fds)
        runner._fail("malformed session run message")
    ch.set_limits(msg.get("limits"))
    ch.items = ch.total = ch.dropped = 0
    # What the program's threads printed since the last run waits in the
    # buffers of sys.stdout and sys.stderr: it goes to /dev/null, as
    # it would have unbuffered, not into this run's output.
    for f in (_sys.stdout, _sys.stderr):
        try:
            if f is not None:
                f.flush()
        except Exception:
            pass
    for i, f in enumerate(fds):
        _os.dup2(f, i)
    _close_all(fds)
    _fresh_stdin()

    cellblock = _sys.modules.get("cellblock")
    tools = msg.get("tools")
    if tools is not None and cellblock is not None:
        # The run's tools, as cellblock.tools and the global tools (an
        # input of that name wins).
        from cellblock import _tools
        _tools.begin(ch, tools, msg.get("tool_limits"))
        g["tools"] = cellblock.tools
    for k, v in inputs.items():
        if type(k) is str and k.isidentifier() and not (k.startswith("__") and k.endswith("__")):
            g[k] = v
    if cellblock is not None:
        cellblock.inputs.clear()
        cellblock.inputs.update(inputs)

    r = runner._Run()
    r.ch = ch
    r.mode = mode
    r.exc = None
    r.expr = None
    r.code = None
    r.limits = dict(ch.limits)
    r.filename = filename
    r.globals = g
    ended = []

    def end():
        """The run's end, once however often called: no more interrupts,
        its descriptors given up, its variables reported."""
        _arm(False)
        if not ended:
            runner._end_tools()
            ended.append(True)
            _after(ch, g, null, seq)
    r.before_done = end

    ch.send({"type": "started", "seq": seq})
    value, has_value = None, False
    try:
        try:
            import ast
            import linecache
            # Not ast.parse, whose frame a syntax error's traceback would show.
            tree = compile(code, filename, "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
            if mode == "cell" and tree.body and isinstance(tree.body[-1], ast.Expr):
                last = tree.body.pop()
                r.expr = compile(ast.Expression(last.value), filename, "eval", dont_inherit=True)
            r.code = compile(tree, filename, "exec", dont_inherit=True)
            # Tracebacks show the cell's lines, as IPython's do.
            linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
            _arm(True)
            exec(r.code, g)
            if r.expr is not None:
                value, has_value = eval(r.expr, g), True
        except BaseException as e:
            r.exc = e
        # Still interruptible: the exception's str and the value's reprs
        # are the program's code. end() (from _report) stops that.
        if r.exc is not None:
            e = r.exc
            e.__traceback__ = _strip(e.__traceback__)
            if not isinstance(e, SystemExit):
                _sys.last_type, _sys.last_value, _sys.last_traceback = type(e), e, e.__traceback__
                import traceback
                traceback.print_exception(type(e), e, e.__traceback__)
            e = None
        runner._report(r, value, has_value)
    except BaseException:
        # An interrupt while the program's repr or str ran: the run ends
        # here, and the interpreter lives on.
        for _ in (1, 2):
            try:
                end()
                break
            except BaseException:
                pass
        try:
            ch.send({"type": "done", "exit_code": 130})
        except BaseException:
            pass
    r.globals = r.exc = None


# The sys.stdin the last run got; replaced for each run unless the program
# replaced it itself.
_stdin = [None]


def _fresh_stdin():
    """A new sys.stdin over descriptor 0: what the last run's had read
    ahead and buffered is not this run's."""
    old = _sys.stdin
    if old is not None and old is not _stdin[0] and old is not _sys.__stdin__:
        return
    try:
        import io
        enc = getattr(old, "encoding", None) or "utf-8"
        errors = getattr(old, "errors", None) or "strict"
        new = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding=enc, errors=errors)
    except Exception:
        return
    _stdin[0] = _sys.stdin = new


def _strip(tb, _g=globals()):
    """tb without its leading frames of this module."""
    while tb is not None and tb.tb_frame.f_globals is _g:
        tb = tb.tb_next
    return tb


def _after(ch, g, null, seq):
    """The end of a run, before its done: the output flushed, the run's
    descriptors given up, the variables reported."""
    for f in (_sys.stdout, _sys.stderr):
        try:
            if f is not None:
                f.flush()
        except BaseException:
            pass
    for i in (0, 1, 2):
        try:
            _os.dup2(null, i)
        except OSError:
            pass
    variables, more = variables_of(g)
    ch.send({"type": "vars", "seq": seq, "vars": variables, "truncated": more})


def variables_of(g):
    """The globals the program defined: name, type and a short repr made
    without running any of the program's code. (list, more)"""
    out = []
    more = False
    for k in list(g):
        if type(k) is not str or k.startswith("_"):
            continue
        if len(out) >= MAX_VARIABLES:
            more = True
            break
        v = g.get(k)
        t = type(v)
        out.append({"name": _channel.cap_text(k, 256), "type": _channel.type_name(t), "repr": _short(v, t)})
    return out, more


def _short(v, t):
    try:
        if t in _PLAIN:
            return _channel.cap_text(repr(v), VARIABLE_REPR)
        if t is str or t is bytes:
            return _channel.cap_text(repr(v[:VARIABLE_REPR]), VARIABLE_REPR)
        if t in _SIZED:
            return "<%s of %d items>" % (t.__name__, len(v))
        if t is type(_sys):
            return "<module %s>" % _channel.cap_text(repr(v.__dict__.get("__name__", "?")), 80)
        return "<%s object>" % _channel.type_name(t)
    except Exception:
        return "<%s object>" % _channel.type_name(t)
