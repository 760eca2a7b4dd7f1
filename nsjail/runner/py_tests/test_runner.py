"""Tests of cellblock's runner, run by the Go test TestPythonSuite for every
CPython found, or by hand: python -m unittest -v test_runner (from py_tests).

Script mode is tested differentially: each program of CORPUS runs both as
plain `python FILE args` (or -c, -) and through the runner, and stdout,
stderr and the exit status must be the same, after normalise().
"""

import base64
import json
import os
import re
import signal
import struct
import sys
import unittest
import zlib

import harness as h

PY = sys.version_info[:2]


def normalise(b):
    """What must differ between two processes: object addresses; and how
    many times a traceback says a line repeated when the recursion limit
    was hit, as the runner's own frames take two levels of the limit."""
    b = re.sub(rb"0x[0-9a-f]{6,16}", b"0xADDR", b)
    return re.sub(rb"\[Previous line repeated \d+ more times\]", b"[Previous line repeated N more times]", b)


# (name, code, argv0, argv, stdin, env extra). A program's argv0 "FILE" is
# replaced by a path in a fresh directory.
CORPUS = [
    ("exit_0", "print('hi')", "FILE", [], b"", {}),
    ("exit_3", "import sys\nsys.exit(3)", "FILE", [], b"", {}),
    ("exit_none", "import sys\nsys.exit(None)", "FILE", [], b"", {}),
    ("exit_msg", "import sys\nprint('out')\nsys.exit('bye now')", "FILE", [], b"", {}),
    ("exit_obj", "import sys\nsys.exit(['a', 1])", "FILE", [], b"", {}),
    ("exit_true", "raise SystemExit(True)", "FILE", [], b"", {}),
    ("exit_neg", "raise SystemExit(-1)", "FILE", [], b"", {}),
    ("exit_huge", "raise SystemExit(2**70)", "FILE", [], b"", {}),
    ("exit_256", "raise SystemExit(256 + 7)", "FILE", [], b"", {}),
    ("exc_simple", "def f(x):\n    return 1 / x\n\nf(0)\n", "FILE", [], b"", {}),
    ("exc_chained",
     "def f():\n    raise KeyError('k')\ntry:\n    f()\nexcept KeyError as e:\n"
     "    raise ValueError('v') from e\n", "FILE", [], b"", {}),
    ("exc_context",
     "try:\n    {}['x']\nexcept KeyError:\n    [][1]\n", "FILE", [], b"", {}),
    ("exc_from_none",
     "try:\n    {}['x']\nexcept KeyError:\n    raise RuntimeError('clean') from None\n", "FILE", [], b"", {}),
    ("exc_custom",
     "class MyError(Exception):\n    def __str__(self):\n        return 'mine'\nraise MyError()\n", "FILE", [], b"", {}),
    ("exc_group",
     "import sys\nif sys.version_info >= (3, 11):\n"
     "    raise ExceptionGroup('eg', [ValueError(1), TypeError(2)])\nraise ValueError('old')\n",
     "FILE", [], b"", {}),
    ("exc_carets", "d = {'a': {'b': None}}\nx = d['a']['b']['c'] + 1\n", "FILE", [], b"", {}),
    ("exc_in_module_import",
     "import json\njson.loads('{bad')\n", "FILE", [], b"", {}),
    ("syntax_error", "x = (\nprint(1)\n", "FILE", [], b"", {}),
    ("syntax_error_def", "def f(:\n    pass\n", "FILE", [], b"", {}),
    ("indent_error", "if True:\nprint(1)\n", "FILE", [], b"", {}),
    ("syntax_error_c", "x = = 1", "-c", [], b"", {}),
    ("syntax_error_stdin", "1 +\n", "-", [], b"", {}),
    ("keyboard_interrupt",
     "import atexit\natexit.register(lambda: print('atexit ran'))\nprint('before')\n"
     "raise KeyboardInterrupt\n", "FILE", [], b"", {}),
    ("keyboard_interrupt_caught",
     "try:\n    raise KeyboardInterrupt\nexcept KeyboardInterrupt:\n    print('caught')\n", "FILE", [], b"", {}),
    ("atexit",
     "import atexit, sys\natexit.register(print, 'second')\n"
     "atexit.register(lambda: print('first', '__file__' in globals()))\nprint('main')\n", "FILE", [], b"", {}),
    ("atexit_exit",
     "import atexit, sys\natexit.register(lambda: print('atexit', '__file__' in globals()))\nsys.exit(4)\n",
     "FILE", [], b"", {}),
    ("atexit_exc",
     "import atexit\natexit.register(lambda: print('atexit', '__file__' in globals()))\n1/0\n",
     "FILE", [], b"", {}),
    ("excepthook",
     "import sys\ndef hook(t, v, tb):\n    print('hook', t.__name__, v, tb.tb_frame.f_code.co_name, tb.tb_next)\n"
     "    print('file' , '__file__' in globals())\nsys.excepthook = hook\n1/0\n", "FILE", [], b"", {}),
    ("excepthook_none", "import sys\nsys.excepthook = None\n1/0\n", "FILE", [], b"", {}),
    ("excepthook_deleted", "import sys\ndel sys.excepthook\n1/0\n", "FILE", [], b"", {}),
    ("excepthook_raises",
     "import sys\ndef hook(t, v, tb):\n    raise RuntimeError('bad hook')\nsys.excepthook = hook\n1/0\n",
     "FILE", [], b"", {}),
    ("last_traceback",
     "import atexit, sys, traceback\n"
     "atexit.register(lambda: traceback.print_tb(sys.last_traceback))\nx = 1\nraise ValueError(x)\n",
     "FILE", [], b"", {}),
    ("threads",
     "import threading, time\n"
     "def late():\n    time.sleep(0.3)\n    print('late thread done', flush=True)\n"
     "threading.Thread(target=late).start()\n"
     "threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\nprint('main done')\n",
     "FILE", [], b"", {}),
    ("thread_exception",
     "import threading\ndef boom():\n    raise ValueError('in thread')\n"
     "t = threading.Thread(target=boom, name='T')\nt.start()\nt.join()\nprint('after')\n", "FILE", [], b"", {}),
    ("thread_sys_exit",
     "import threading, sys\nt = threading.Thread(target=sys.exit, args=(5,))\nt.start()\nt.join()\nprint('still here')\n",
     "FILE", [], b"", {}),
    ("fork",
     "import os, sys\nsys.stdout.flush()\npid = os.fork()\nif pid == 0:\n    print('child')\n    sys.stdout.flush()\n"
     "    os._exit(7)\n_, st = os.waitpid(pid, 0)\nprint('parent', os.WEXITSTATUS(st))\n", "FILE", [], b"", {}),
    ("fork_child_returns",
     "import os, sys\nsys.stdout.flush()\npid = os.fork()\nif pid == 0:\n    print('child falls off the end')\n"
     "else:\n    _, st = os.waitpid(pid, 0)\n    print('parent', os.WEXITSTATUS(st))\n", "FILE", [], b"", {}),
    ("fork_child_raises",
     "import os, sys\nsys.stdout.flush()\npid = os.fork()\nif pid == 0:\n    raise ValueError('child')\n"
     "_, st = os.waitpid(pid, 0)\nprint('parent', os.WEXITSTATUS(st))\n", "FILE", [], b"", {}),
    ("os_exit_buffered", "import os\nprint('lost?', end='')\nos._exit(3)\n", "FILE", [], b"", {}),
    # What python's finalization shows a program, which the runner's
    # quick exit does itself (see _finish).
    ("del_at_exit",
     "class A:\n    def __init__(self, n):\n        self.n = n\n    def __del__(self):\n        print('del', self.n)\n"
     "a = A(1)\nb = A(2)\n_c = A(3)\nprint('end', end='')\n", "FILE", [], b"", {}),
    ("del_cycle_at_exit",
     "class N:\n    def __del__(self):\n        print('del', self.name)\n"
     "x = N()\nx.name, x.me = 'x', x\ndel x\ny = N()\ny.name, y.me = 'y', y\nprint('end')\n", "FILE", [], b"", {}),
    ("del_raises_at_exit",
     "class A:\n    def __del__(self):\n        raise ValueError('in del')\na = A()\nprint('end')\n", "FILE", [], b"", {}),
    ("del_after_exception",
     "class A:\n    def __del__(self):\n        print('del A')\ndef f():\n    a = A()\n    1/0\nf()\n", "FILE", [], b"", {}),
    ("del_after_exit_code",
     "import sys\nclass A:\n    def __del__(self):\n        print('del A')\na = A()\nsys.exit(6)\n", "FILE", [], b"", {}),
    ("module_del_at_exit",
     "import sys, types\nclass A:\n    def __init__(self, n):\n        self.n = n\n    def __del__(self):\n        print('del', self.n)\n"
     "m = types.ModuleType('mine')\nsys.modules['mine'] = m\nm.a = A('in mine')\ndel m\nb = A('in main')\nprint('end')\n",
     "FILE", [], b"", {}),
    ("weakref_finalize_at_exit",
     "import weakref\nclass A:\n    pass\na = A()\nweakref.finalize(a, print, 'finalized')\nprint('end')\n",
     "FILE", [], b"", {}),
    ("daemon_thread_at_exit",
     "import threading, time\nclass A:\n    def __del__(self):\n        print('del A')\na = A()\n"
     "threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\nprint('end')\n", "FILE", [], b"", {}),
    ("unclosed_file_at_exit",
     "f = open('/dev/stdout', 'w')\nf.write('written, never closed\\n')\n", "FILE", [], b"", {}),
    ("unclosed_file_in_json_at_exit",
     "import json\njson.f = open('/dev/stdout', 'w')\njson.f.write('kept by a module the runner imported\\n')\n",
     "FILE", [], b"", {}),
    ("signal_handler",
     "import os, signal\nsignal.signal(signal.SIGUSR1, lambda s, f: print('got', s, f.f_code.co_name))\n"
     "os.kill(os.getpid(), signal.SIGUSR1)\nprint('after')\n", "FILE", [], b"", {}),
    ("killed_by_signal", "import os, signal\nprint('x', flush=True)\nos.kill(os.getpid(), signal.SIGTERM)\n",
     "FILE", [], b"", {}),
    ("main_module",
     "import sys, __main__\nprint(__main__.__dict__ is globals(), sys.modules['__main__'] is __main__)\n"
     "print(__name__, __package__, __spec__, __doc__, repr(__loader__))\n"
     "print(list(globals()))\nprint(__builtins__)\nprint(__file__, __cached__)\n"
     "print(sys.argv, sys.path[0])\nprint(__loader__.get_source('__main__') == open(__file__).read())\n"
     "print(getattr(sys, 'orig_argv', ['x'])[1:])\n",
     "FILE", ["a", "b c"], b"", {}),
    ("main_module_docstring", '"""doc"""\nprint(__doc__, list(globals()))\n', "FILE", [], b"", {}),
    ("main_module_annotations", "x: int = 1\nprint(__annotations__)\n", "FILE", [], b"", {}),
    ("relative_path",
     "import sys\nprint(__file__, sys.argv[0], sys.path[0])\n1/0\n", "sub/../rel.py", ["z"], b"", {}),
    ("c_form",
     "import sys\nprint(sys.argv, repr(sys.path[0]), list(globals()), __loader__)\n"
     "print(getattr(sys, 'orig_argv', ['x', 'y', 'z'])[2:])\n1/0",
     "-c", ["x", "y"], b"", {}),
    ("stdin_form",
     "import sys\nprint(sys.argv, repr(sys.path[0]), list(globals()), __file__, __loader__)\n1/0\n",
     "-", ["x"], b"", {}),
    ("pickle_main_class",
     "import pickle\nclass C:\n    pass\nc = pickle.loads(pickle.dumps(C()))\nprint(type(c), type(c) is C)\n",
     "FILE", [], b"", {}),
    ("inspect_source",
     "import inspect\ndef f():\n    return 1\nprint(inspect.getsource(f), end='')\n", "FILE", [], b"", {}),
    ("warning", "import warnings\nwarnings.warn('careful')\n", "FILE", [], b"", {}),
    ("env_read",
     "import os, time\nprint(os.environ.get('FOO'), os.environ.get('MPLBACKEND'), time.tzname)\n"
     "print(sorted(k for k in os.environ if k.startswith(('PYTHON', 'LC_', 'LANG', 'CELLBLOCK'))))\n",
     "FILE", [], b"", {"FOO": "bar", "TZ": "EST+05EDT,M3.2.0,M11.1.0"}),
    ("env_tz", "import time\nprint(time.strftime('%H %Z', time.localtime(0)), time.timezone)\n", "FILE", [], b"",
     {"TZ": "XYZ+3"}),
    ("env_hashseed", "print(hash('abc'), hash(b'xyz'))\n", "FILE", [], b"", {"PYTHONHASHSEED": "42"}),
    ("env_ioencoding", "import sys\nprint(sys.stdout.encoding, '\\u00e9')\n", "FILE", [], b"",
     {"PYTHONIOENCODING": "latin-1"}),
    ("env_unbuffered",
     "import sys, os\nprint(sys.stdout.write_through)\nprint('a', end='')\nos._exit(0)\n", "FILE", [], b"",
     {"PYTHONUNBUFFERED": "1"}),
    ("env_warnings_error", "import warnings\nwarnings.warn('now fatal')\n", "FILE", [], b"",
     {"PYTHONWARNINGS": "error"}),
    ("env_locale", "import sys, locale\nprint(sys.stdout.encoding, sys.flags.utf8_mode)\n", "FILE", [], b"",
     {"LC_ALL": "C", "PYTHONUTF8": "1"}),
    ("stdin_echo", "import sys\ndata = sys.stdin.buffer.read()\nsys.stdout.buffer.write(data[::-1])\n",
     "FILE", [], b"hello\xff\x00world", {}),
    ("stdin_text", "import sys\nfor line in sys.stdin:\n    print(len(line))\n", "FILE", [], b"a\nbb\n\xff\n", {}),
    ("non_utf8_output",
     "import sys\nsys.stdout.buffer.write(b'\\xff\\xfe raw\\n')\nsys.stdout.flush()\nprint('\\udcff')\n",
     "FILE", [], b"", {}),
    ("recursion", "def f(n):\n    return f(n + 1)\nf(0)\n", "FILE", [], b"", {}),
    ("multiprocessing_fork",
     "import multiprocessing as mp\ndef sq(x):\n    return x * x\n"
     "if __name__ == '__main__':\n    with mp.get_context('fork').Pool(2) as p:\n        print(p.map(sq, range(6)))\n",
     "FILE", [], b"", {}),
    ("multiprocessing_spawn",
     "import multiprocessing as mp\ndef sq(x):\n    return x * x\n"
     "if __name__ == '__main__':\n    with mp.get_context('spawn').Pool(2) as p:\n        print(p.map(sq, range(6)))\n",
     "FILE", [], b"", {}),
    ("multiprocessing_forkserver",
     "import multiprocessing as mp\ndef sq(x):\n    return x * x\n"
     "if __name__ == '__main__':\n    ctx = mp.get_context('forkserver')\n    q = ctx.Queue()\n"
     "    p = ctx.Process(target=q.put, args=(sq(7),))\n    p.start()\n    print(q.get())\n    p.join()\n"
     "    print(p.exitcode)\n",
     "FILE", [], b"", {}),
    ("multiprocessing_spawn_process_exit",
     "import multiprocessing as mp, sys\ndef child():\n    print('in child', __name__, flush=True)\n    sys.exit(3)\n"
     "if __name__ == '__main__':\n    p = mp.get_context('spawn').Process(target=child)\n    p.start()\n    p.join()\n"
     "    print('exitcode', p.exitcode)\n",
     "FILE", [], b"", {}),
    ("subprocess_python",
     "import subprocess, sys\nr = subprocess.run([sys.executable, '-c', 'import os; print(sorted(k for k in os.environ if \"CELLBLOCK\" in k))'],"
     " capture_output=True, text=True)\nprint(r.stdout, end='')\n",
     "FILE", [], b"", {}),
    ("fds_inherited",
     "import os\nprint(sorted(int(x) for x in os.listdir('/proc/self/fd'))[:3])\n", "FILE", [], b"", {}),
]


# Cases where the runner cannot match python, by version, with the reason.
_EOF_LINE = ("before 3.10 python's parser reports an unexpected EOF on another line when it reads a file "
             "than when compile() is given the same bytes")
KNOWN = {
    (3, 8): {"syntax_error": _EOF_LINE},
    (3, 9): {"syntax_error": _EOF_LINE},
}


def _python_env(extra):
    env = h.base_env()
    env.update(extra)
    return env


class DifferentialTest(unittest.TestCase):
    maxDiff = None

    def check(self, name, code, argv0, argv, stdin, extra):
        if name in KNOWN.get(PY, ()):
            self.skipTest(KNOWN[PY][name])
        with h.tempdir() as d:
            cwd = d
            if argv0 == "FILE":
                argv0 = os.path.join(d, "prog", "main.py")
            elif argv0 not in ("-c", "-"):
                os.makedirs(os.path.join(d, "sub"))
            env = _python_env(extra)
            plain = h.run_plain(code, argv0, argv, env=env, stdin=stdin, cwd=cwd)
            got = h.run(code, argv0, argv, env=env, stdin=b"" if argv0 == "-" else stdin, cwd=cwd)
        want = (normalise(plain.stdout), normalise(plain.stderr), plain.rc)
        have = (normalise(got.stdout), normalise(got.stderr), got.rc)
        self.assertEqual(want, have, "%s: runner differs from python\n%r" % (name, got))
        self.assertEqual(got.of("ready")[:1] and 1, 1, got)
        self.assertEqual(len(got.of("started")), 1, got)
        for f in got.frames:
            self.assertNotIn(f.get("type"), ("<garbage>", "<truncated>"), got)


def _make_differential(case):
    def test(self):
        self.check(*case)
    return test


for _case in CORPUS:
    setattr(DifferentialTest, "test_" + _case[0], _make_differential(_case))


def png_bytes(w=2, hgt=2):
    """A real PNG: w x hgt, 8-bit RGB, made with zlib and struct."""
    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff))
    raw = b"".join(b"\x00" + b"\xff\x00\x00" * w for _ in range(hgt))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, hgt, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


RICH = '''
import base64, struct, zlib
def png_bytes(w=2, hgt=2):
    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff))
    raw = b"".join(b"\\x00" + b"\\xff\\x00\\x00" * w for _ in range(hgt))
    return (b"\\x89PNG\\r\\n\\x1a\\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, hgt, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
class Pic:
    def _repr_png_(self):
        return png_bytes()
    def __repr__(self):
        return "<Pic>"
class Html:
    def _repr_html_(self):
        return "<b>bold</b>"
    def _repr_markdown_(self):
        return "**bold**"
class BadPng:
    def _repr_png_(self):
        return b"GIF89a not a png"
class Raises:
    def _repr_html_(self):
        raise RuntimeError("no html today")
    def __repr__(self):
        raise ValueError("no repr either")
class Big:
    def _repr_html_(self):
        return "x" * 5000
class Json:
    def _repr_json_(self):
        return {"a": [1, 2.5, None, True]}
'''


class CellTest(unittest.TestCase):
    def test_value(self):
        r = h.run("x = 6\nx * 7", mode="cell")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.one("value")["value"], {"type": "int", "repr": "42", "json": 42})
        self.assertEqual(r.one("done")["exit_code"], 0)

    def test_no_value_for_none_or_statement(self):
        self.assertEqual(h.run("print('x')", mode="cell").of("value"), [])
        self.assertEqual(h.run("x = 1", mode="cell").of("value"), [])
        self.assertEqual(h.run("", mode="cell").of("value"), [])

    def test_value_types(self):
        r = h.run("import collections\ncollections.OrderedDict(a=1)", mode="cell")
        v = r.one("value")["value"]
        self.assertEqual(v["type"], "collections.OrderedDict")
        self.assertNotIn("json", v)  # not a plain dict
        r = h.run("{'a': [1, 'b', None, 1.5]}", mode="cell")
        self.assertEqual(r.one("value")["value"]["json"], {"a": [1, "b", None, 1.5]})
        r = h.run("float('nan')", mode="cell")
        self.assertNotIn("json", r.one("value")["value"])
        r = h.run("{1: 2}", mode="cell")
        self.assertNotIn("json", r.one("value")["value"])

    def test_value_caps(self):
        r = h.run("'x' * 100000", mode="cell", limits={"repr_bytes": 100, "json_bytes": 50})
        v = r.one("value")["value"]
        self.assertLessEqual(len(v["repr"].encode()), 100)
        self.assertIn("cut", v["repr"])
        self.assertNotIn("json", v)
        r = h.run("'\\u00e9' * 1000", mode="cell", limits={"repr_bytes": 101})
        self.assertLessEqual(len(r.one("value")["value"]["repr"].encode()), 101)

    def test_repr_raises(self):
        r = h.run("class C:\n    def __repr__(self):\n        raise KeyError('k')\nC()", mode="cell")
        self.assertEqual(r.one("value")["value"]["repr"], "<repr failed: KeyError: 'k'>")

    def test_inputs(self):
        r = h.run("import cellblock\nprint(n + 1, cellblock.inputs)\nn", mode="cell", inputs={"n": 3, "s": "x"})
        self.assertEqual(r.stdout, b"4 {'n': 3, 's': 'x'}\n", r)
        self.assertEqual(r.one("value")["value"]["json"], 3)
        r = h.run("print(n, s)", inputs={"n": [1], "s": None})
        self.assertEqual(r.stdout, b"[1] None\n", r)

    def test_exception(self):
        r = h.run("x = 1\ny = 0\nx / y\n", mode="cell")
        self.assertEqual(r.rc, 1)
        e = r.one("exception")["exception"]
        self.assertEqual(e["type"], "ZeroDivisionError")
        self.assertEqual(e["message"], "division by zero")
        self.assertEqual(e["line"], 3)
        self.assertIn("Traceback (most recent call last)", e["traceback"])
        self.assertNotIn("_cellblock_runner", e["traceback"])
        self.assertIn(b"ZeroDivisionError: division by zero", r.stderr)
        self.assertNotIn(b"_cellblock_runner", r.stderr)
        self.assertIn("x / y", e["traceback"])  # the cell's source lines are shown
        self.assertEqual(r.one("done")["exit_code"], 1)

    def test_syntax_error(self):
        r = h.run("x = (\n", mode="cell")
        e = r.one("exception")["exception"]
        self.assertEqual(e["type"], "SyntaxError")
        self.assertEqual(e["line"], 1)
        self.assertNotIn(b"_cellblock_runner", r.stderr)
        self.assertEqual(r.rc, 1)
        # As python shows it: no traceback, no frame of ast.py.
        self.assertNotIn("Traceback", e["traceback"])
        self.assertNotIn(b"Traceback", r.stderr)
        self.assertNotIn(b"ast.py", r.stderr)
        self.assertTrue(r.stderr.startswith(b'  File "<string>", line 1\n'), r)

    def test_sys_exit(self):
        r = h.run("import sys\nsys.exit(5)\n3", mode="cell")
        self.assertEqual(r.rc, 5)
        self.assertEqual(r.of("exception"), [])
        self.assertEqual(r.one("done")["exit_code"], 5)


class ExceptionDataTest(unittest.TestCase):
    def test_script_exception(self):
        code = "import json\nclass E(Exception):\n    pass\ndef f():\n    json.loads('{')\ntry:\n    f()\nexcept ValueError as e:\n    raise E('wrapped') from e\n"
        r = h.run(code, argv0="/tmp/cellblock-runner-test-exc.py")
        e = r.one("exception")["exception"]
        self.assertEqual(e["type"], "__main__.E")
        self.assertEqual(e["message"], "wrapped")
        self.assertEqual(e["line"], 9)
        self.assertIn("json.decoder.JSONDecodeError", e["traceback"])
        self.assertIn("direct cause", e["traceback"])
        self.assertTrue(e["traceback"].endswith("\nE: wrapped\n"), e["traceback"])

    def test_qualified_type(self):
        r = h.run("import json\njson.loads('x')")
        self.assertEqual(r.one("exception")["exception"]["type"], "json.decoder.JSONDecodeError")

    def test_caps(self):
        r = h.run("def f(n):\n    if n == 0:\n        raise ValueError('m' * 10000)\n    f(n - 1)\nf(200)",
                  limits={"message_bytes": 300, "traceback_bytes": 1000})
        e = r.one("exception")["exception"]
        self.assertLessEqual(len(e["message"].encode()), 300)
        self.assertLessEqual(len(e["traceback"].encode()), 1000)
        self.assertTrue(e["traceback"].startswith("[cellblock: cut, "), e["traceback"])
        self.assertTrue(e["traceback"].endswith("mmm\n"), e["traceback"])

    def test_no_exception_for_exit(self):
        for code in ("import sys; sys.exit(2)", "print(1)", "raise SystemExit('x')"):
            self.assertEqual(h.run(code).of("exception"), [], code)

    def test_keyboard_interrupt(self):
        r = h.run("raise KeyboardInterrupt")
        self.assertEqual(r.rc, -signal.SIGINT)
        self.assertEqual(r.one("exception")["exception"]["type"], "KeyboardInterrupt")
        self.assertEqual(r.one("done")["exit_code"], 130)


class DisplayTest(unittest.TestCase):
    def items(self, code, mode="script", **kw):
        r = h.run(RICH + code, mode=mode, **kw)
        self.assertEqual(r.rc, 0, r)
        return r, r.of("display")

    def test_png(self):
        r, items = self.items("import cellblock\ncellblock.display(Pic())")
        self.assertEqual(len(items), 1, r)
        d = items[0]["data"]
        self.assertEqual(base64.b64decode(d["image/png"]), png_bytes())
        self.assertEqual(d["text/plain"], "<Pic>")

    def test_cell_value_rich(self):
        r, items = self.items("Html()", mode="cell")
        self.assertEqual(items[0]["data"]["text/html"], "<b>bold</b>")
        self.assertEqual(items[0]["data"]["text/markdown"], "**bold**")
        self.assertIn("Html object", r.one("value")["value"]["repr"])

    def test_json(self):
        r, items = self.items("import cellblock\ncellblock.display(Json())")
        self.assertEqual(items[0]["data"]["application/json"], {"a": [1, 2.5, None, True]})

    def test_bad_png_dropped_with_note(self):
        r, items = self.items("import cellblock\ncellblock.display(BadPng())")
        self.assertNotIn("image/png", items[0]["data"])
        dropped = items[0]["metadata"]["cellblock"]["dropped"]
        self.assertEqual(dropped[0]["mime"], "image/png")
        self.assertIn("signature", dropped[0]["reason"])

    def test_raising_reprs(self):
        r, items = self.items("import cellblock\ncellblock.display(Raises())")
        d = items[0]["data"]
        self.assertEqual(list(d), ["text/plain"])
        self.assertIn("repr failed", d["text/plain"])
        self.assertIn("no html today", items[0]["metadata"]["cellblock"]["dropped"][0]["reason"])

    def test_item_cap(self):
        r, items = self.items("import cellblock\ncellblock.display(Big())", limits={"display_item_bytes": 1000})
        self.assertEqual(list(items[0]["data"]), ["text/plain"])
        self.assertEqual(items[0]["metadata"]["cellblock"]["dropped"][0]["mime"], "text/html")

    def test_count_and_total_caps(self):
        r, items = self.items("import cellblock\nfor i in range(10):\n    cellblock.display(Pic())",
                              limits={"display_items": 4})
        self.assertEqual(len(items), 4)
        self.assertEqual(r.one("done")["display_dropped"], 6)
        r, items = self.items("import cellblock\nfor i in range(5):\n    cellblock.display(Big())",
                              limits={"display_total_bytes": 12000})
        self.assertEqual(len(items), 5)
        self.assertEqual([("text/html" in i["data"]) for i in items], [True, True, False, False, False])

    def test_display_outside_run_prints(self):
        r = h.run("import subprocess, sys\nsubprocess.run([sys.executable, '-c', "
                  "'import cellblock; cellblock.display(1, \"a\")'])")
        self.assertEqual(r.stdout, b"1\n'a'\n")
        self.assertEqual(r.of("display"), [])

    def test_tools_without_any(self):
        r = h.run("import cellblock\ntry:\n    cellblock.tools.search(q=1)\nexcept cellblock.ToolError as e:\n"
                  "    print('ToolError', e)\nprint(hasattr(cellblock.tools, '__wrapped__'))")
        self.assertEqual(r.stdout, b"ToolError no tool 'search': this run declares no tools\nFalse\n", r)


@unittest.skipUnless(__import__("importlib.util").util.find_spec("matplotlib"), "matplotlib is not installed")
class MatplotlibTest(unittest.TestCase):
    def test_show_and_leftover(self):
        code = ("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()\nplt.figure()\n"
                "plt.figure()\nplt.bar([1], [2])\n")
        r = h.run(code)
        self.assertEqual(r.rc, 0, r)
        items = r.of("display")
        self.assertEqual(len(items), 2, r)  # the blank figure is skipped
        for it in items:
            self.assertTrue(base64.b64decode(it["data"]["image/png"]).startswith(b"\x89PNG"))
            self.assertIn("Figure", it["data"]["text/plain"])

    def test_not_imported(self):
        r = h.run("import sys\nprint('matplotlib' in sys.modules)")
        self.assertEqual(r.stdout, b"False\n")


class HostileTest(unittest.TestCase):
    def assertQuiet(self, r):
        self.assertNotIn(b"_cellblock_runner", r.stderr, r)
        self.assertNotIn(b"cellblock/_channel", r.stderr, r)

    def test_close_channel(self):
        r = h.run("import os\nfor fd in range(3, 64):\n    try:\n        os.close(fd)\n    except OSError:\n        pass\nprint('closed')", mode="cell")
        self.assertEqual(r.rc, 0, r)
        self.assertQuiet(r)

    def test_close_and_reuse_channel_fd(self):
        code = ("import os, cellblock\nfor fd in range(3, 64):\n    try:\n        os.close(fd)\n    except OSError:\n        pass\n"
                "r, w = os.pipe()\nprint(r, w)\ncellblock.display(1)\nos.close(w)\nprint(os.read(r, 100))\n1/0\n")
        r = h.run(code)
        self.assertIn(b"b''", r.stdout, r)  # nothing written into the program's pipe
        self.assertEqual(r.rc, 1)

    def test_flood_channel(self):
        code = ("import os\nfor fd in range(3, 30):\n    try:\n        os.fstat(fd)\n    except OSError:\n        continue\n"
                "    try:\n        os.write(fd, b'\\xff' * 100000)\n    except OSError:\n        pass\nprint('flooded')\n")
        r = h.run(code)
        self.assertEqual(r.rc, 0, r)
        self.assertQuiet(r)

    def test_replace_stdout_and_patch_modules(self):
        code = ("import sys, json, os, cellblock, cellblock._channel as c\nsys.stdout = None\n"
                "json.dumps = None\nos.write = None\nc.cap_text = None\ncellblock.display = None\n"
                "sys.modules['_cellblock_runner'] = None\n1/0")
        r = h.run(code)
        self.assertEqual(r.rc, 1, r)
        self.assertIn(b"ZeroDivisionError", r.stderr)
        self.assertQuiet(r)
        self.assertEqual(r.one("done")["exit_code"], 1)

    def test_nonblocking_channel(self):
        code = ("import os, cellblock\nfor fd in range(3, 30):\n    try:\n        os.set_blocking(fd, False)\n    except OSError:\n        pass\n"
                "for i in range(50):\n    cellblock.display('x' * 60000)\n")
        r = h.run(code, limits={"display_total_bytes": 100 << 20, "display_items": 100, "repr_bytes": 1 << 20})
        self.assertEqual(len(r.of("display")), 50, r)
        self.assertQuiet(r)

    def test_exit_from_thread(self):
        r = h.run("import threading, os\nthreading.Thread(target=os._exit, args=(9,)).start()\nimport time\ntime.sleep(5)")
        self.assertEqual(r.rc, 9)
        self.assertQuiet(r)

    def test_fork_child_never_writes(self):
        code = ("import os, cellblock\npid = os.fork()\nif pid == 0:\n    cellblock.display('child')\n"
                "    import sys; sys.stdout.flush()\n    os._exit(0)\nos.waitpid(pid, 0)\ncellblock.display('parent')\n")
        r = h.run(code)
        items = r.of("display")
        self.assertEqual([i["data"]["text/plain"] for i in items], ["'parent'"], r)
        self.assertEqual(r.stdout, b"'child'\n")

    def test_fork_child_outlives(self):
        # A forked child that keeps running must not hold the channel open.
        code = "import os, time\nif os.fork() == 0:\n    time.sleep(30)\n    os._exit(0)\nprint('parent')\n"
        r = h.run(code, timeout=20)
        self.assertEqual(r.rc, 0)

    def test_sigint_and_patched_excepthook(self):
        r = h.run("import sys\nsys.excepthook = None\n1/0")
        self.assertEqual(r.rc, 1)
        self.assertQuiet(r)

    def test_str_raises(self):
        r = h.run("class E(Exception):\n    def __str__(self):\n        raise RuntimeError\nraise E()")
        self.assertEqual(r.one("exception")["exception"]["message"], "<exception str() failed>")
        self.assertQuiet(r)

    def test_no_run_message(self):
        r = h.run("", send=False)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.stderr, b"")

    def test_garbage_run_message(self):
        r = h.run("1", env={"A": 1})
        self.assertEqual(r.rc, 2, r)
        self.assertIn(b"malformed run message", r.stderr)


# Modules for PreloadTest: one that writes while it is imported and
# registers an exit handler, one that raises, one that exits, one that
# reads the environment when it is imported.
PRELOAD_MODULES = {
    "cbmod.py": ("import atexit, os, sys\nprint('cbmod says hello')\nos.write(2, b'cbmod on fd 2\\n')\n"
                 "sys.stderr.write('cbmod on stderr\\n')\natexit.register(print, 'cbmod handler')\nVALUE = 42\n"),
    "cbfail.py": "raise ValueError('cbfail is broken')\n",
    "cbexit.py": "import sys\nsys.exit(3)\n",
    "cbenv.py": "import os\nSEEN = os.environ.get('CB_SETTING')\n",
    "cbpkg/__init__.py": "",
    "cbpkg/sub.py": "X = 1\n",
}


class PreloadTest(unittest.TestCase):
    """A jail built ahead of its run names modules to import before the
    runner says it is ready (CELLBLOCK_RUNNER_PRELOAD)."""

    @classmethod
    def setUpClass(cls):
        cls.dir = h.tempdir()
        for name, text in PRELOAD_MODULES.items():
            path = os.path.join(cls.dir.name, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def env(self, **extra):
        return h.base_env(PYTHONPATH=h.PY_DIR + os.pathsep + self.dir.name, **extra)

    def run_preloaded(self, code, preload, env=None, **kw):
        start = self.env()
        if preload is not None:
            start["CELLBLOCK_RUNNER_PRELOAD"] = preload
        return h.run(code, env=env or self.env(), start_env=start, **kw)

    def test_in_sys_modules_before_the_code(self):
        code = ("import sys\nprint('cbmod' in sys.modules, 'cbpkg.sub' in sys.modules, 'cbfail' in sys.modules)\n"
                "import os\nprint('CELLBLOCK_RUNNER_PRELOAD' in os.environ)\n"
                "import cbmod\nprint(cbmod.VALUE)\n")
        r = self.run_preloaded(code, "cbmod,cbpkg.sub,cbfail")
        self.assertEqual(r.rc, 0, r)
        # Nothing the imports wrote reaches the run's output.
        self.assertEqual(r.stdout, b"True True False\nFalse\n42\ncbmod handler\n", r)
        self.assertEqual(r.stderr, b"", r)
        ready = r.one("ready")
        self.assertEqual(ready["preload_failed"], [{"module": "cbfail", "error": "ValueError: cbfail is broken"}])

    def test_not_without_the_list(self):
        r = self.run_preloaded("import sys\nprint('cbmod' in sys.modules)", None)
        self.assertEqual(r.stdout, b"False\n", r)
        self.assertNotIn("preload_failed", r.one("ready"))

    def test_failures_leave_the_run_its_own_error(self):
        code = "import cbfail\n"
        r = self.run_preloaded(code, "cbfail,cbexit,cbmissing")
        self.assertEqual(r.rc, 1, r)
        self.assertIn(b"ValueError: cbfail is broken", r.stderr)
        self.assertEqual(r.one("exception")["exception"]["type"], "ValueError")
        failed = r.one("ready")["preload_failed"]
        self.assertEqual([f["module"] for f in failed], ["cbfail", "cbexit", "cbmissing"])
        self.assertEqual(failed[1]["error"], "SystemExit: 3")
        self.assertTrue(failed[2]["error"].startswith("ModuleNotFoundError: "), failed)

    def test_bad_names_skipped(self):
        code = "import sys\nprint(sorted(m for m in ('cbmod', 'os', 'cbpkg') if m in sys.modules))"
        r = self.run_preloaded(code, ",cbmod,,bad name,cbmod,1x,cbpkg.,os")
        self.assertEqual(r.rc, 0, r)
        self.assertIn(b"['cbmod', 'os']\n", r.stdout, r)
        self.assertNotIn("preload_failed", r.one("ready"))

    def test_exit_handlers_in_plain_pythons_order(self):
        # The program's handler, registered after the module was
        # imported, runs first; the module's still runs, before the end.
        code = "import atexit, cbmod\natexit.register(print, 'program handler')\nprint('body')\n"
        r = self.run_preloaded(code, "cbmod")
        self.assertEqual(r.stdout, b"body\nprogram handler\ncbmod handler\n", r)
        self.assertEqual(r.rc, 0)
        r = self.run_preloaded("import atexit, cbmod\natexit.unregister(print)\nprint('body')\n", "cbmod")
        self.assertEqual(r.stdout, b"body\n", r)

    def test_environment_read_at_import_is_the_jails(self):
        code = "import os, cbenv\nprint(cbenv.SEEN, os.environ.get('CB_SETTING'))"
        r = self.run_preloaded(code, "cbenv", env=self.env(CB_SETTING="request"))
        self.assertEqual(r.stdout, b"None request\n", r)
        r = self.run_preloaded(code, None, env=self.env(CB_SETTING="request"))
        self.assertEqual(r.stdout, b"request request\n", r)

    def test_reexec_drops_the_preload(self):
        # A run that changes how Python starts gets a new interpreter,
        # without the preloaded modules: it imports them as ever.
        code = "import sys\nprint('cbmod' in sys.modules)"
        r = self.run_preloaded(code, "cbmod", env=self.env(PYTHONHASHSEED="5"))
        self.assertEqual(r.stdout, b"False\n", r)
        self.assertEqual(len(r.of("ready")), 1)


class NonUTF8Test(unittest.TestCase):
    """Lone surrogates (what a repr, a message or a display text holds
    after bytes were decoded with surrogateescape) never reach the channel:
    every frame is strict UTF-8 JSON with no surrogate escape, the run is
    not failed, and the text is there with "?" in their place."""

    def run_clean(self, code, mode="cell"):
        r = h.run(code, mode=mode)
        self.assertEqual(r.of("<garbage>"), [], r)  # read_frames decodes UTF-8 strictly
        for f in r.frames:
            # A surrogate escape in a frame decodes to a lone surrogate,
            # which does not encode.
            json.dumps(f, ensure_ascii=False).encode("utf-8")
        self.assertQuiet(r)
        return r

    def assertQuiet(self, r):
        self.assertNotIn(b"_cellblock_runner", r.stderr, r)
        self.assertNotIn(b"cellblock/_channel", r.stderr, r)

    def test_repr(self):
        r = self.run_clean("class C:\n    def __repr__(self):\n        return 'a\\udcffb'\nC()")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.one("value")["value"]["repr"], "a?b")
        r = self.run_clean("{'k\\udcff': b'\\xff'.decode('utf-8', 'surrogateescape')}")
        v = r.one("value")["value"]
        self.assertEqual(v["json"], {"k?": "?"})
        self.assertEqual(r.one("done")["exit_code"], 0)

    def test_exception_message(self):
        for mode in ("cell", "script"):
            r = self.run_clean("def f():\n    raise ValueError('bad \\udcff here')\nf()", mode=mode)
            self.assertEqual(r.rc, 1, r)
            e = r.one("exception")["exception"]
            self.assertEqual((e["type"], e["message"], e["line"]), ("ValueError", "bad ? here", 2))
            self.assertTrue(e["traceback"].endswith("ValueError: bad ? here\n"), e["traceback"])
            # stderr is python's own, which escapes the surrogate.
            self.assertIn(b"ValueError: bad \\udcff here", r.stderr)

    def test_display_text(self):
        code = ("import cellblock\nclass D:\n    def __repr__(self):\n        return 't\\udcff'\n"
                "    def _repr_html_(self):\n        return '<b>\\udcff</b>'\n"
                "class M:\n    def _repr_mimebundle_(self, include=None, exclude=None):\n"
                "        return {'text/plain': 'm\\udcff'}, {'note\\udcff': 'v\\udcff'}\n"
                "cellblock.display(D())\ncellblock.display('s\\udcff')\ncellblock.display(M())\nprint('shown')")
        r = self.run_clean(code, mode="script")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.stdout, b"shown\n")
        items = r.of("display")
        self.assertEqual([i["data"] for i in items], [
            {"text/plain": "t?", "text/html": "<b>?</b>"},
            {"text/plain": "'s\\udcff'"},  # repr() of a str escapes it already
            {"text/plain": "m?"},
        ])
        self.assertEqual(items[2]["metadata"], {"note?": "v?"})


class ReexecTest(unittest.TestCase):
    def test_reexec_same_pid(self):
        env = h.base_env(PYTHONHASHSEED="7", PYTHONDONTWRITEBYTECODE="1")
        code = "import os, sys\nprint(os.environ['PYTHONHASHSEED'], sys.flags.hash_randomization, sys.flags.dont_write_bytecode)"
        r = h.run(code, env=env)
        self.assertEqual(r.stdout, b"7 1 1\n", r)
        self.assertEqual(len(r.of("ready")), 1)
        self.assertEqual(len(r.of("started")), 1)

    def test_no_reexec_for_other_vars(self):
        # The first runner imports select to see whether its run is
        # waiting (_preload); a re-executed one does not.
        r = h.run("import sys\nprint(sys.modules.get('select') is not None)", env=h.base_env(OTHER="1"))
        self.assertEqual(r.stdout, b"True\n", r)
        r = h.run("import sys\nprint(sys.modules.get('select') is not None)", env=h.base_env(PYTHONHASHSEED="0"))
        self.assertEqual(r.stdout, b"False\n", r)


if __name__ == "__main__":
    unittest.main()
