# cellblock's runner: started by the jail's init as
#     python /usr/lib/cellblock/_cellblock_runner.py
# it imports what a run needs, says "ready" on the channel whose descriptor
# is in $CELLBLOCK_RUNNER_FD, waits for the run message, and runs the code in
# this interpreter as `python FILE args` would (see PROTOCOL.md next to the
# Go package that embeds this file).
#
# No docstring: the globals python gave this script are the model for the
# program's fresh __main__, and must be taken before anything is defined.
_INITIAL = list(globals().items())

import sys  # noqa: E402
import os  # noqa: E402

ENV_FD = "CELLBLOCK_RUNNER_FD"
ENV_RUN_FD = "CELLBLOCK_RUNNER_RUN_FD"
# The environment's preload list, comma-separated, in a jail built ahead
# of its run only (PROTOCOL.md, "Preloaded modules").
ENV_PRELOAD = "CELLBLOCK_RUNNER_PRELOAD"
# Bounds of that list, the daemon's (runner.MaxPreload, MaxModuleName),
# and of one failure's description in the ready message. These constants,
# and those of the cellblock package that the Go side has too, are held to
# the Go side's by TestPythonConstants (nsjail/runner).
MAX_PRELOAD = 64
MAX_MODULE_NAME = 128
MAX_PRELOAD_ERROR = 256
PROTOCOL = 1
MPL_BACKEND = "module://cellblock._mpl_backend"
# Where input files go: the directory the runner starts in, /work in a
# jail (taken before any of the program's code can change it).
try:
    WORK_DIR = os.getcwd()
except OSError:
    WORK_DIR = "/work"


def _import_cellblock():
    # PYTHONPATH has our directory; a request's env may not, after a re-exec.
    try:
        import cellblock
    except ImportError:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        try:
            import cellblock
        finally:
            del sys.path[0]
    from cellblock import _channel
    return cellblock, _channel


try:
    import json
    import time

    cellblock, _channel = _import_cellblock()
except BaseException as e:  # an unusable interpreter: say so, briefly
    sys.stderr.write("cellblock runner: cannot start: %s: %s\n" % (type(e).__name__, e))
    raise SystemExit(2)


def _fail(msg):
    try:
        sys.stderr.write("cellblock runner: %s\n" % msg)
        sys.stderr.flush()
    except Exception:
        pass
    os._exit(2)


def _read_exact(fd, n):
    buf = bytearray()
    while len(buf) < n:
        b = os.read(fd, min(n - len(buf), 1 << 20))
        if not b:
            return None
        buf += b
    return bytes(buf)


def _recv_run(fd, ch=None):
    """The run message and its raw text; (None, None) at EOF or garbage.
    File frames that come first are written under /work (answered on
    ch)."""
    while True:
        h = _read_exact(fd, 4)
        if h is None:
            return None, None
        n = int.from_bytes(h, "big")
        if n > _channel.MAX_IN_FRAME:
            return None, None
        raw = _read_exact(fd, n)
        if raw is None:
            return None, None
        try:
            msg = json.loads(raw.decode("utf-8"))
        except ValueError:
            return None, None
        if type(msg) is dict and msg.get("type") in ("run", "session"):
            return msg, raw
        if type(msg) is dict and msg.get("type") == "file" and ch is not None:
            from cellblock import _files
            _files.on_frame(ch, msg, WORK_DIR)
        # Other types are for later versions: ignored.


def _startup_vars(env):
    """The variables python reads only when it starts."""
    return {k: v for k, v in env.items()
            if k.startswith("PYTHON") or k in ("LANG", "LC_ALL", "LC_CTYPE")}


def _argv():
    """This interpreter's own command line, to re-execute it."""
    argv = getattr(sys, "orig_argv", None)
    if argv:
        return list(argv)
    try:
        with open("/proc/self/cmdline", "rb") as f:
            parts = f.read().split(b"\0")[:-1]
        if parts:
            return [os.fsdecode(p) for p in parts]
    except OSError:
        pass
    return [sys.executable, os.path.abspath(__file__)]


def _reexec(fd, raw, env):
    """Start this runner again in this process, with env as its environment
    and the run message handed over in a memfd. Returns only on failure."""
    mfd = -1
    try:
        mfd = os.memfd_create("cellblock-run", 0)
        view = memoryview(raw)
        while view:
            view = view[os.write(mfd, view):]
        os.lseek(mfd, 0, os.SEEK_SET)
        os.set_inheritable(fd, True)
        newenv = dict(env)
        newenv[ENV_FD] = str(fd)
        newenv[ENV_RUN_FD] = str(mfd)
        os.execve(sys.executable, _argv(), newenv)
    except Exception:
        pass
    try:
        os.set_inheritable(fd, False)
        if mfd >= 0:
            os.close(mfd)
    except OSError:
        pass


# Modules a run may need (ast for cells, traceback for exceptions),
# imported while the runner waits for its run: in a jail started ahead of
# the request they are free, in one started for it they would only delay
# the program, which is waiting already.
# weakref: for the exit (_finish), which would otherwise import it (1 ms
# and more in a jail).
_PRELOAD = ("ast", "traceback", "weakref")


def _preload(fd):
    """Import _PRELOAD while no run message is waiting on fd, then freeze
    what exists: everything alive now is the interpreter's and the
    runner's and lives to the end, so neither the program's collections
    nor the final ones at exit need to walk it again (that saves a few ms
    of every run's exit). The program's own objects are collected as
    ever."""
    try:
        import select
        # poll, not select: the channel sits near the descriptor limit,
        # past select's 1024 when the limit is higher.
        waiting = select.poll()
        waiting.register(fd, select.POLLIN)
        for name in _PRELOAD:
            if waiting.poll(0):
                break
            __import__(name)
        else:
            # A process's first compile() costs up to 2 ms more than the
            # next on some builds (Debian's 3.11 and 3.13 here), which
            # would be the run's: pay it now, on both modes' paths.
            import ast
            tree = ast.parse("x = 1\nx", "<cellblock>", "exec")
            compile(ast.Expression(tree.body.pop().value), "<cellblock>", "eval", dont_inherit=True)
            compile(tree, "<cellblock>", "exec", dont_inherit=True)
            compile("x = 1", "<cellblock>", "exec", dont_inherit=True)
    except Exception:
        pass
    _freeze()


def _module_names(text):
    """The preload list in text: valid dotted names, first mention only."""
    names = []
    for name in text.split(","):
        if len(names) == MAX_PRELOAD:
            break
        if (name and len(name) <= MAX_MODULE_NAME and name.isascii() and name not in names
                and all(p.isidentifier() for p in name.split("."))):
            names.append(name)
    return names


# Exit handlers the preloaded modules registered, for _setup to register
# after the runner's own last one (_finish), so that they run before it.
_held_atexit = []


def _preload_env(names):
    """Import the environment's preload list, in a jail built ahead of its
    run, before the runner says it is ready: the run then finds them in
    sys.modules. A module that fails is left out (its import in the run
    fails as ever) and reported. What the imports write to descriptors 1
    and 2 goes to /dev/null: those are the run's output pipes already.
    Exit handlers they register are held back (_held_atexit): registered
    now they would run after _finish, which ends the process. Returns the
    failures, [{"module", "error"}]."""
    import atexit
    real_register, real_unregister = atexit.register, atexit.unregister
    holding = [True]

    def register(func, *args, **kwargs):
        if not holding[0]:  # kept by a module that took the function
            return real_register(func, *args, **kwargs)
        _held_atexit.append((func, args, kwargs))
        return func

    def unregister(func):
        if holding[0]:
            _held_atexit[:] = [h for h in _held_atexit if h[0] != func]
        return real_unregister(func)

    failed = []
    saved = _mute()
    if saved is None:
        return [{"module": n, "error": "not preloaded: the output could not be silenced"} for n in names]
    atexit.register, atexit.unregister = register, unregister
    try:
        for name in names:
            try:
                __import__(name)
            except BaseException as e:  # SystemExit too: the jail goes on
                failed.append({"module": name, "error": _describe(e)})
    finally:
        holding[0] = False
        atexit.register, atexit.unregister = real_register, real_unregister
        _unmute(saved)
    return failed


def _describe(e):
    try:
        text = "%s: %s" % (type(e).__name__, e)
    except Exception:
        text = "%s: <str() failed>" % type(e).__name__
    return text[:MAX_PRELOAD_ERROR]


def _mute():
    """Point descriptors 1 and 2 at /dev/null; returns copies of the
    originals for _unmute, or None when it cannot."""
    saved = []
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            for fd in (1, 2):
                saved.append((fd, os.dup(fd)))  # close-on-exec copies
                os.dup2(null, fd)
        finally:
            os.close(null)
    except OSError:
        _unmute(saved)
        return None
    return saved


def _unmute(saved):
    for f in (sys.stdout, sys.stderr):
        try:
            if f is not None:
                f.flush()
        except Exception:
            pass
    for fd, copy in saved:
        try:
            os.dup2(copy, fd)
            os.close(copy)
        except OSError:
            pass


def _freeze():
    try:
        import gc
        gc.freeze()
    except (ImportError, AttributeError):  # gc.freeze is 3.7+
        pass


def _park(fd):
    """Move the channel to a high descriptor, close-on-exec, so that the
    program's own files get the numbers they would get under plain python
    (the first one 3). Returns the descriptor to use."""
    os.set_inheritable(fd, False)
    try:
        import fcntl
        import resource
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if soft == resource.RLIM_INFINITY or soft > 1 << 20:
            soft = 1 << 20
        high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, max(fd + 1, soft - 8))
    except (ImportError, OSError, ValueError):
        return fd
    os.close(fd)
    return high


def _str_list(v):
    return type(v) is list and all(type(x) is str for x in v)


def _str_dict(v):
    return type(v) is dict and all(type(k) is str and type(x) is str for k, x in v.items())


def _enter(ch, fd, raw, run_fd, env, startup_env):
    """Take env (with MPLBACKEND unless it sets one) as the process's,
    re-executing first when it changes a start-up variable (the message,
    raw, goes along; run_fd is set in the re-executed runner), and guard
    the channel from forked children."""
    env = dict(env)
    if "MPLBACKEND" not in env:
        env["MPLBACKEND"] = MPL_BACKEND
    if run_fd is None and _startup_vars(env) != _startup_vars(startup_env):
        _reexec(fd, raw, env)
    _apply_env(env)
    _guard_fork(ch)
    _channel.channel = ch


def _apply_env(env):
    """Make env the process's environment."""
    if list(env.items()) != list(os.environ.items()):
        # Most runs keep the jail's environment as it is (0.4 ms saved).
        os.environ.clear()
        for k, v in env.items():
            try:
                os.environ[k] = v
            except (ValueError, OSError):
                pass
        time.tzset()


def _guard_fork(ch):
    """A forked child must never write to the channel, nor keep it open."""
    def after_fork(_ch=ch, _fstat=os.fstat, _close=os.close):
        _ch.dead = True
        try:
            st = _fstat(_ch.fd)
            if (st.st_dev, st.st_ino) == _ch.ident:
                _close(_ch.fd)
        except Exception:
            pass
    os.register_at_fork(after_in_child=after_fork)


class _SessionStart:
    """What _setup returns for a session: the channel, set up."""

    __slots__ = ("ch", "fd")

    def __init__(self, ch, fd):
        self.ch = ch
        self.fd = fd


class _Run:
    """What the module-level code needs to run the program and report on it."""

    __slots__ = ("ch", "mode", "code", "expr", "filename", "globals", "exc", "limits", "modules", "status",
                 "before_done")


def _setup():
    """Everything up to the moment the code runs: the channel, the run
    message, the environment, the program's __main__. None when there is
    no run (the channel closed)."""
    try:
        fd = _park(int(os.environ.pop(ENV_FD)))
        ch = _channel.Channel(fd)
    except (KeyError, ValueError, OSError):
        _fail("no channel: %s is not an open descriptor" % ENV_FD)
    run_fd = os.environ.pop(ENV_RUN_FD, None)
    preload = os.environ.pop(ENV_PRELOAD, None)
    # Every run gets MPLBACKEND (below); set now too, the jail's environment
    # is then most runs' exactly, and the run need not rebuild it.
    if "MPLBACKEND" not in os.environ:
        os.environ["MPLBACKEND"] = MPL_BACKEND
    startup_env = dict(os.environ)
    # Everything alive now is the interpreter's and the runner's, and lives
    # to the end: out of the collector's way, so that neither the program's
    # collections nor the final ones at exit walk it again (a few ms of
    # every run's exit). The program's own objects are collected as ever.
    try:
        if run_fd is None:
            ready = {"type": "ready", "protocol": PROTOCOL, "python": sys.version.split()[0]}
            if preload:
                failed = _preload_env(_module_names(preload))
                if failed:
                    ready["preload_failed"] = failed
            ch.send(ready)
            _preload(fd)
            msg, raw = _recv_run(fd, ch)
        else:
            _freeze()
            mfd = int(run_fd)
            raw = _read_exact(mfd, os.fstat(mfd).st_size)
            os.close(mfd)
            msg = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError):
        msg = None
    if msg is None:
        return None
    if msg.get("type") == "session":
        env = msg.get("env", startup_env)
        if not _str_dict(env):
            _fail("malformed session message")
        ch.set_limits(msg.get("limits"))
        _enter(ch, fd, raw, run_fd, env, startup_env)
        return _SessionStart(ch, fd)

    mode = msg.get("mode", "script")
    code = msg.get("code")
    argv0 = msg.get("argv0", "-c")
    argv = msg.get("argv", [])
    env = msg.get("env", startup_env)
    inputs = msg.get("inputs", {})
    if (mode not in ("script", "cell") or type(code) is not str or type(argv0) is not str
            or not argv0 or not _str_list(argv) or not _str_dict(env) or type(inputs) is not dict):
        _fail("malformed run message")
    ch.set_limits(msg.get("limits"))

    if msg.get("stdin_null") is True:
        # No standard input was given: /dev/null, as python would have.
        try:
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.close(null)
        except OSError:
            pass
    _enter(ch, fd, raw, run_fd, env, startup_env)

    r = _Run()
    r.before_done = None
    r.ch = ch
    r.mode = mode
    r.exc = None
    r.expr = None
    r.limits = dict(ch.limits)

    # What python does with its command line, for argv0 a path, -c or -.
    if argv0 == "-c":
        filename = "<string>"
        source = code
    elif argv0 == "-":
        filename = "<stdin>"
        source = code.encode("utf-8", "surrogateescape")
    else:
        filename = argv0
        if sys.version_info >= (3, 9) and not os.path.isabs(argv0):
            filename = os.path.join(os.getcwd(), argv0)
        source = code.encode("utf-8", "surrogateescape")
        try:
            d = os.path.dirname(filename)
            if d:
                os.makedirs(d, exist_ok=True)
            with open(filename, "wb") as f:
                f.write(source)
        except OSError:
            pass
    r.filename = filename
    sys.argv = [argv0] + list(argv)
    orig = getattr(sys, "orig_argv", None)
    if orig:
        here = os.path.abspath(__file__)
        i = next((i for i, a in enumerate(orig) if a.endswith(".py") and os.path.abspath(a) == here), len(orig) - 1)
        sys.orig_argv = orig[:i] + ([argv0, code] if argv0 == "-c" else [argv0]) + list(argv)
    if not getattr(sys.flags, "safe_path", False) and not sys.flags.isolated and sys.path:
        if argv0 in ("-c", "-"):
            sys.path[0] = ""
        else:
            sys.path[0] = os.path.dirname(os.path.realpath(argv0))

    loader = None
    g = {}
    for k, v in _INITIAL:
        if k == "__loader__":
            if argv0 in ("-c", "-"):
                v = sys.modules["_frozen_importlib"].BuiltinImporter
            else:
                try:
                    v = type(v)("__main__", filename)
                except Exception:
                    v = None
            loader = v
        elif k == "__file__":
            if argv0 == "-c":
                continue
            v = filename
        elif k == "__cached__":
            if argv0 == "-c":
                continue
            v = None
        elif k == "__doc__":
            v = None
        elif k == "__annotations__":
            v = {}
        g[k] = v
    main = type(sys)("__main__")
    main.__dict__.clear()
    main.__dict__.update(g)
    g = main.__dict__
    if loader is None:
        g.pop("__loader__", None)
    tools = msg.get("tools")
    if tools is not None:
        from cellblock import _tools
        _tools.begin(ch, tools, msg.get("tool_limits"))
        if mode == "cell":
            g["tools"] = cellblock.tools
    for k, v in inputs.items():
        if type(k) is str and k.isidentifier() and not (k.startswith("__") and k.endswith("__")):
            g[k] = v
    cellblock.inputs.clear()
    cellblock.inputs.update(inputs)
    sys.modules["__main__"] = main
    r.globals = g

    # Registered before the program's own handlers, so it runs after them.
    r.modules = set(sys.modules)
    r.status = None
    import atexit
    atexit.register(_finish, r)
    for func, args, kwargs in _held_atexit:
        try:
            atexit.register(func, *args, **kwargs)
        except Exception:
            pass
    del _held_atexit[:]

    ch.send({"type": "started"})
    try:
        if mode == "cell":
            import ast
            # compile, not ast.parse: a syntax error's traceback then has
            # no frame of ast.py, as python shows none for its own.
            tree = compile(source, filename, "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
            if tree.body and isinstance(tree.body[-1], ast.Expr):
                last = tree.body.pop()
                r.expr = compile(ast.Expression(last.value), filename, "eval", dont_inherit=True)
            r.code = compile(tree, filename, "exec", dont_inherit=True)
            if argv0 in ("-c", "-"):
                import linecache
                text = code
                linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
        else:
            r.code = compile(source, filename, "exec", dont_inherit=True)
            if argv0 == "-c":
                # 3.13 shows -c's lines in tracebacks: python registers
                # them by file name, as here.
                import linecache
                register = getattr(linecache, "_register_code", None)
                if register is not None:
                    register(filename, code, filename)
    except BaseException as e:
        r.code = None
        r.exc = e
    return r


def _strip(tb, _g=globals()):
    """tb without its leading frames of the runner."""
    while tb is not None and tb.tb_frame.f_globals is _g:
        tb = tb.tb_next
    return tb


def _exit_code(exc):
    """The status python exits with for exc uncaught (None: 0)."""
    if exc is None:
        return 0
    if isinstance(exc, SystemExit):
        try:
            code = exc.code
        except Exception:
            return 1
        if code is None:
            return 0
        if isinstance(code, int):
            try:
                return int(code) & 0xFF if -(1 << 63) <= code < (1 << 63) else 255
            except Exception:
                return 255
        return 1
    if isinstance(exc, KeyboardInterrupt):
        return 128 + 2
    return 1


def _report(r, value, has_value, _dumps=json.dumps):
    """Send what the run left: figures, the value, the exception, done.
    Quiet: nothing here may raise into the program's last moments."""
    ch = r.ch
    lim = r.limits
    exc = r.exc
    try:
        mpl = sys.modules.get("cellblock._mpl_backend")
        if mpl is not None:
            mpl.flush()
    except Exception:
        pass
    if has_value and value is not None:
        try:
            data, dropped, _ = _channel.bundle(value, lim)
            j = _channel.json_text(value, lim["json_bytes"])
            text = '{"type":"value","value":{"type":%s,"repr":%s%s}}' % (
                _dumps(_channel.type_name(type(value))),
                _dumps(_channel.safe_repr(value, lim["repr_bytes"]), ensure_ascii=False),
                "" if j is None else ',"json":' + j)
            ch.send_raw(text)
            if len(data) > 1 or dropped:
                ch.send_item(data, dropped)
        except Exception:
            pass
    if exc is not None and not isinstance(exc, SystemExit):
        try:
            t = type(exc)
            tb = exc.__traceback__
            line = None
            e = tb
            while e is not None:
                if e.tb_frame.f_code.co_filename == r.filename:
                    line = e.tb_lineno
                e = e.tb_next
            if line is None and isinstance(exc, SyntaxError) and exc.filename == r.filename:
                line = exc.lineno if type(exc.lineno) is int else None
            try:
                import traceback
                tbtext = "".join(traceback.format_exception(t, exc, tb))
            except Exception:
                tbtext = ""
            try:
                msg = str(exc)
            except Exception:
                msg = "<exception str() failed>"
            ch.send({"type": "exception", "exception": {
                "type": _channel.type_name(t),
                "message": _channel.cap_text(msg, lim["message_bytes"]),
                "traceback": _channel.cap_text(tbtext, lim["traceback_bytes"], head=False),
                "line": line}})
        except Exception:
            pass
    _end_tools()
    before = getattr(r, "before_done", None)
    if before is not None:
        try:
            before()
        except BaseException:
            try:
                before()  # once more: an interrupt cut it short (a session's)
            except BaseException:
                pass
    try:
        done = {"type": "done", "exit_code": _exit_code(exc)}
        if ch.dropped:
            done["display_dropped"] = ch.dropped
        ch.send(done)
    except Exception:
        pass


def _end_tools():
    """End the run's tool calls (cellblock._tools), if it declared tools:
    their reader stops reading the channel before the run's done."""
    t = sys.modules.get("cellblock._tools")
    if t is not None:
        try:
            t.end()
        except BaseException:
            pass


# Set when the interpreter must finalize in full: a flush that fails makes
# python exit 120, which _finish leaves to it.
_SLOW_EXIT_VARS = ("PYTHONMALLOCSTATS", "PYTHONDUMPREFS", "PYTHONDUMPREFSFILE")


def _finish(r, _exit=os._exit, _close=os.close):
    """The last exit handler: what python's finalization still shows a
    program after its exit handlers, then os._exit with python's status.

    Python's finalization then frees every object of every module, the
    runner's imports included (2 to 4 ms, a third of a warm run), and all
    a program sees of it is this, which _finish does in python's order:
    standard output and error are flushed and put back to the originals;
    every module leaves sys.modules, so that imports fail from here on;
    garbage is collected, so that what the program's __main__ and modules
    held is released (their __del__ and weakref callbacks run, a file
    left open is flushed); what still lives in the program's modules is
    cleared, newest module first, names with one leading underscore
    first. Then the files still open are flushed, as their release would.

    Whenever python's own ending would differ (KeyboardInterrupt, which
    python ends with SIGINT; a flush that fails, which python ends with
    120; allocator statistics asked for; threads still running), or
    anything here fails, it returns and python finalizes as ever, now
    that the runner no longer holds the program's globals."""
    # The runner's own references to the program's state; without them
    # python's finalization finds the program as plain python would.
    # (The runner's globals are frozen, so no collection would free them.)
    globals().pop("_e", None)
    main, r.globals = r.globals, None
    code = r.status
    if code is None or any(v in os.environ for v in _SLOW_EXIT_VARS):
        return
    try:
        import _thread
        if _thread._count():
            # Daemon threads would see their modules cleared; python
            # stops them first.
            return
        import gc
        import io
        import weakref
        for f in (sys.stdout, sys.stderr):
            if f is not None:
                f.flush()
        for k in ("last_type", "last_value", "last_traceback", "last_exc"):
            if hasattr(sys, k):
                setattr(sys, k, None)
        for k in ("stdin", "stdout", "stderr"):
            orig = getattr(sys, "__%s__" % k, None)
            if orig is not None:
                setattr(sys, k, orig)
        mods = sys.modules
        kept = {}  # the runner's and the interpreter's, alive to the end
        dropped = []  # the program's: __main__ and what it imported
        for name, m in list(mods.items()):
            if m is None or m is sys:
                continue
            if name != "__main__" and name in r.modules:
                kept[name] = m
                mods[name] = None
                continue
            try:
                dropped.append(weakref.ref(m))
            except TypeError:
                continue
            mods[name] = None
        m = main = None
        sys.meta_path = None
        gc.collect()
        for ref in reversed(dropped):
            m = ref()
            d = getattr(m, "__dict__", None)
            if type(d) is dict:
                _clear_module_dict(d)
            m = d = None
        for o in gc.get_objects():
            if isinstance(o, io.IOBase):
                try:
                    if not o.closed:
                        o.flush()
                except Exception:
                    pass
        for f in (sys.stdout, sys.stderr):
            if f is not None:
                f.flush()
        # The output is whole: close it, say so, and close the channel.
        # Once the channel and the output pipes have ended (nothing else
        # holds them), the daemon answers without waiting for this
        # process's end (unmapping its memory takes a millisecond).
        for fd in (1, 2):
            try:
                _close(fd)
            except OSError:
                pass
        ch = r.ch
        if ch.send_raw('{"type":"exit","exit_code":%d}' % code):
            ch.dead = True
            _close(ch.fd)
    except BaseException:
        return
    _exit(code)


def _clear_module_dict(d):
    """What python does to a module's globals at exit: names with one
    leading underscore set to None, then every name but __builtins__."""
    for k in list(d):
        if type(k) is str and k[:1] == "_" and k[1:2] != "_":
            d[k] = None
    for k in list(d):
        if k != "__builtins__":
            d[k] = None


def _excepthook_for(r, hook):
    """A sys.excepthook that takes the runner's frame off the traceback
    python is about to print, then puts the program's hook back and calls
    it, as python would have for the program's own uncaught exception."""
    missing = hook is _hook_missing

    def _cellblock_excepthook(t, v, tb):
        if missing:
            try:
                del sys.excepthook
            except AttributeError:
                pass
        else:
            sys.excepthook = hook
        tb = _strip(tb)
        try:
            v.__traceback__ = tb
            sys.last_traceback = tb
        except Exception:
            pass
        try:
            if missing:
                sys.stderr.write("sys.excepthook is missing\n")
                sys.__excepthook__(t, v, tb)
            else:
                try:
                    hook(t, v, tb)
                except SystemExit:
                    raise
                except BaseException as e2:
                    tb2 = e2.__traceback__
                    if tb2 is not None and tb2.tb_frame.f_code is _cellblock_excepthook.__code__:
                        tb2 = tb2.tb_next
                    try:
                        e2.__traceback__ = tb2
                    except Exception:
                        pass
                    try:
                        sys.stdout.flush()
                    except Exception:
                        pass
                    try:
                        sys.stderr.write("Error in sys.excepthook:\n")
                        sys.__excepthook__(type(e2), e2, tb2)
                        sys.stderr.write("\nOriginal exception was:\n")
                        sys.__excepthook__(t, v, tb)
                    except Exception:
                        pass
        finally:
            r.globals.pop("__file__", None)
            r.globals.pop("__cached__", None)

    return _cellblock_excepthook


_hook_missing = object()


if __name__ == "__main__":
    _r = _setup()
    if _r is None:
        raise SystemExit(0)
    if type(_r) is _SessionStart:
        from cellblock import _session
        _session.serve(_r.ch, _r.fd, sys.modules[__name__])
    _value, _has_value = None, False
    if _r.code is not None:
        try:
            exec(_r.code, _r.globals)  # the program
            if _r.expr is not None:
                _value, _has_value = eval(_r.expr, _r.globals), True  # a cell's last expression
        except BaseException as _e:
            _r.exc = _e
            _e = None
    if _r.exc is not None:
        _r.exc.__traceback__ = _strip(_r.exc.__traceback__)
    _report(_r, _value, _has_value)
    _value = None
    if not isinstance(_r.exc, KeyboardInterrupt):
        _r.status = _exit_code(_r.exc)
    if _r.exc is None:
        _r.globals.pop("__file__", None)
        _r.globals.pop("__cached__", None)
    else:
        if not isinstance(_r.exc, SystemExit):
            sys.excepthook = _excepthook_for(_r, getattr(sys, "excepthook", _hook_missing))
        _e, _r.exc = _r.exc, None
        raise _e
