"""Tests of the runner's session mode (cellblock/_session.py), run by the Go
test TestPythonSuite for every CPython found, or by hand:
python -m unittest -v test_session (from py_tests).

The runner is started as the jail's init starts it, sent {"type":
"session"}, and then run frames, each with three descriptors attached
(SCM_RIGHTS): the run's stdin, stdout and stderr (see harness.Session).
"""

import os
import random
import signal
import sys
import tempfile
import time
import unittest

import harness as h

# What a traceback must never show: the runner's own files.
RUNNER_FILES = ("_cellblock_runner", "_session.py", "cellblock/_channel", "cellblock" + os.sep + "_session")


class SessionCase(unittest.TestCase):
    """A fresh session per test, closed (and checked to end as asked)
    after it."""

    def setUp(self):
        self.s = h.Session()

    def tearDown(self):
        s = self.s
        alive = s.proc.poll() is None
        rc = s.close()
        if alive:
            self.assertEqual(rc, 0, "the runner's status when its channel ended; log %r" % s.stderr())

    def run_ok(self, code, **kw):
        """A run that must end with exit 0, its output whole."""
        r = self.s.run(code, **kw)
        self.assertIsNotNone(r.done, r)
        self.assertEqual(r.exit_code(), 0, r)
        self.assertTrue(r.eof, "the run's output did not reach its end: %r" % r)
        return r

    def assertNoRunnerFrames(self, text):
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode("utf-8", "replace")
        for name in RUNNER_FILES:
            self.assertNotIn(name, text)

    def assertAlive(self):
        self.assertIsNone(self.s.proc.poll(), "the session's interpreter ended; log %r" % self.s.stderr())


class StateTest(SessionCase):
    def test_ready_then_idle(self):
        self.assertEqual(self.s.ready["protocol"], 1)
        self.assertEqual(self.s.ready["python"], sys.version.split()[0])
        self.assertEqual(self.s.idle, {"type": "idle"})
        self.assertEqual(self.s.stray, [])

    def test_state_persists(self):
        self.run_ok("import json\nrows = [1, 2, 3]\ndef total():\n    return sum(rows)\n"
                    "class Point:\n    def __init__(self, x):\n        self.x = x\n")
        r = self.run_ok("p = Point(total())\njson.dumps(rows), p.x")
        self.assertEqual(r.value(), "('[1, 2, 3]', 6)")
        r = self.run_ok("rows.append(4)\ntotal()")
        self.assertEqual(r.value(), "10")
        r = self.run_ok("import __main__, sys\n(__name__, __main__.rows is rows, sys.modules['__main__'].p.x)")
        self.assertEqual(r.value(), "('__main__', True, 6)")

    def test_value(self):
        r = self.run_ok("x = 6\nx * 7")
        self.assertEqual(r.one("value")["value"], {"type": "int", "repr": "42", "json": 42})
        self.assertEqual(self.run_ok("x = 1").of("value"), [])
        self.assertEqual(self.run_ok("None").of("value"), [])
        self.assertEqual(self.run_ok("print('a')").of("value"), [])
        self.assertEqual(self.run_ok("").of("value"), [])
        self.assertEqual(self.run_ok("x + 1", mode="script").of("value"), [])
        r = self.run_ok("{'a': [x, 'b']}")
        self.assertEqual(r.one("value")["value"]["json"], {"a": [1, "b"]})

    def test_inputs_per_run(self):
        r = self.run_ok("import cellblock\n(n + 1, dict(cellblock.inputs))", inputs={"n": 3})
        self.assertEqual(r.value(), "(4, {'n': 3})")
        r = self.run_ok("import cellblock\n(n, m, dict(cellblock.inputs))", inputs={"m": "x"})
        self.assertEqual(r.value(), "(3, 'x', {'m': 'x'})")  # n stays, a global now

    def test_frames_in_order(self):
        r = self.run_ok("print('x')\n5")
        self.assertEqual(r.started, {"type": "started", "seq": r.seq})
        self.assertEqual([f["type"] for f in r.frames], ["value", "vars", "done"])
        self.assertEqual(r.vars["seq"], r.seq)
        self.assertEqual(r.done, {"type": "done", "exit_code": 0})
        self.assertEqual(self.s.stray, [])


class OutputTest(SessionCase):
    def test_each_run_its_own_pipes(self):
        r1 = self.run_ok("import sys\nprint('one', end='')\nsys.stderr.write('err one')")
        r2 = self.run_ok("print('two', flush=True)\nimport os\nos.write(1, b'raw\\n')\nos.write(2, b'raw err')")
        r3 = self.run_ok("x = 1")
        self.assertEqual((bytes(r1.stdout), bytes(r1.stderr)), (b"one", b"err one"))
        self.assertEqual((bytes(r2.stdout), bytes(r2.stderr)), (b"two\nraw\n", b"raw err"))
        self.assertEqual((bytes(r3.stdout), bytes(r3.stderr)), (b"", b""))
        self.assertAlive()

    def test_output_ends_with_the_run(self):
        # r.eof: both pipes reached their end once done came, while the
        # interpreter lives on: it holds /dev/null on 0 to 2 between runs.
        r = self.run_ok("import os\nprint('x' * 100000)\nos.readlink('/proc/self/fd/1')")
        self.assertEqual(len(r.stdout), 100001)
        self.assertIn("pipe:", r.value())
        self.assertAlive()
        r = self.run_ok("import os\nos.readlink('/proc/self/fd/1') != os.readlink('/proc/self/fd/2')")
        self.assertEqual(r.value(), "True")

    def test_large_output_both_streams(self):
        r = self.run_ok("import sys\nfor i in range(2000):\n    print('o' * 100)\n    sys.stderr.write('e' * 100 + '\\n')")
        self.assertEqual(len(r.stdout), 2000 * 101)
        self.assertEqual(len(r.stderr), 2000 * 101)

    def test_printed_between_runs_is_not_the_next_runs(self):
        # A thread prints after its run is over (once descriptor 1 is
        # /dev/null again), into sys.stdout's buffer, and says so.
        r = self.run_ok(
            "import os, sys, threading, time, cellblock\n"
            "null = os.stat(os.devnull)\n"
            "def later():\n"
            "    while (os.fstat(1).st_dev, os.fstat(1).st_ino) != (null.st_dev, null.st_ino):\n"
            "        time.sleep(0.001)\n"
            "    print('between runs')\n"
            "    sys.stderr.write('between runs')\n"
            "    cellblock.display('printed')\n"
            "t = threading.Thread(target=later)\n"
            "t.start()\n")
        # Its display may come before the run's done (the runner puts
        # /dev/null back first) or after.
        d = r.of("display") or [self.s.expect("display")]
        self.assertEqual(d[0]["data"]["text/plain"], "'printed'")
        r = self.run_ok("t.join()\nprint('two')")
        self.assertEqual((bytes(r.stdout), bytes(r.stderr)), (b"two\n", b""))

    def test_stdin_per_run(self):
        r = self.run_ok("first = input()\nfirst", stdin=b"one\ntwo\n")
        self.assertEqual(r.value(), "'one'")
        # What the last run's stdin had buffered past its line is not this one's.
        r = self.run_ok("input()", stdin=b"three\n")
        self.assertEqual(r.value(), "'three'")
        r = self.run_ok("import sys\nsys.stdin.read()")
        self.assertEqual(r.value(), "''")
        big = b"y" * 300000
        r = self.run_ok("import sys\nlen(sys.stdin.buffer.read())", stdin=big)
        self.assertEqual(r.value(), str(len(big)))
        r = self.run_ok("import sys\nsys.stdin.read()", stdin=b"last")
        self.assertEqual(r.value(), "'last'")

    def test_stdin_unread(self):
        # A run that never reads its stdin ends all the same.
        self.run_ok("x = 1", stdin=b"z" * 200000)
        self.assertEqual(self.run_ok("input()", stdin=b"next\n").value(), "'next'")


class ExceptionTest(SessionCase):
    def test_traceback_is_the_programs(self):
        self.run_ok("def f(x):\n    return 1 / x\n")
        r = self.s.run("y = 0\nf(y)")
        self.assertEqual(r.exit_code(), 1, r)
        e = r.one("exception")["exception"]
        self.assertEqual((e["type"], e["message"], e["line"]), ("ZeroDivisionError", "division by zero", 2))
        tb = e["traceback"]
        self.assertTrue(tb.startswith("Traceback (most recent call last):\n"), tb)
        self.assertNoRunnerFrames(tb)
        self.assertNoRunnerFrames(r.stderr)
        self.assertEqual(bytes(r.stderr).decode(), tb)
        # Each frame shows its own cell's line: f's from the run that
        # defined it.
        self.assertIn('File "<cell 2>", line 2, in <module>\n    f(y)\n', tb)
        self.assertIn('File "<cell 1>", line 2, in f\n    return 1 / x\n', tb)
        self.assertEqual(tb.count('File "'), 2, tb)
        self.assertTrue(r.eof)
        r = self.run_ok("import sys\n(type(sys.last_value).__name__, y)")
        self.assertEqual(r.value(), "('ZeroDivisionError', 0)")

    def test_in_the_last_expression(self):
        r = self.s.run("d = {}\nd['missing']")
        e = r.one("exception")["exception"]
        self.assertEqual((e["type"], e["line"]), ("KeyError", 2))
        self.assertNoRunnerFrames(e["traceback"])
        self.assertEqual(e["traceback"].count('File "'), 1, e["traceback"])
        self.assertEqual(r.exit_code(), 1)

    def test_chained(self):
        r = self.s.run("try:\n    {}['k']\nexcept KeyError as e:\n    raise ValueError('v') from e\n")
        tb = r.one("exception")["exception"]["traceback"]
        self.assertIn("The above exception was the direct cause", tb)
        self.assertNoRunnerFrames(tb)

    def test_syntax_error(self):
        self.run_ok("x = 5")
        r = self.s.run("y = (\n")
        e = r.one("exception")["exception"]
        self.assertEqual((e["type"], e["line"]), ("SyntaxError", 1))
        # As python shows a syntax error of its own input: no traceback.
        self.assertNotIn("Traceback", e["traceback"])
        self.assertNotIn("ast.py", e["traceback"])
        self.assertIn('File "<cell 2>", line 1', e["traceback"])
        self.assertEqual(bytes(r.stderr).decode(), e["traceback"])
        self.assertEqual(r.exit_code(), 1)
        self.assertEqual(self.run_ok("x").value(), "5")

    def test_str_raises(self):
        r = self.s.run("class E(Exception):\n    def __str__(self):\n        raise RuntimeError('no')\nraise E()")
        self.assertEqual(r.exit_code(), 1, r)
        self.assertEqual(r.one("exception")["exception"]["type"], "__main__.E")
        self.assertAlive()

    def test_exception_then_state(self):
        r = self.s.run("a = 1\nraise RuntimeError('half way')\nb = 2")
        self.assertEqual(r.exit_code(), 1)
        self.assertEqual(self.run_ok("a, 'b' in globals()").value(), "(1, False)")


class ExitTest(SessionCase):
    def test_sys_exit_ends_the_run_only(self):
        self.run_ok("kept = 'yes'")
        r = self.s.run("import sys\nprint('before')\nsys.exit(3)\nprint('after')")
        self.assertEqual(r.exit_code(), 3, r)
        self.assertEqual(r.of("exception"), [])
        self.assertEqual(bytes(r.stdout), b"before\n")
        self.assertTrue(r.eof)
        self.assertEqual(self.s.run("raise SystemExit").exit_code(), 0)
        self.assertEqual(self.s.run("raise SystemExit(None)").exit_code(), 0)
        self.assertEqual(self.s.run("raise SystemExit('message')").exit_code(), 1)
        self.assertEqual(self.s.run("raise SystemExit(256 + 7)").exit_code(), 7)
        self.assertEqual(self.run_ok("kept").value(), "'yes'")
        self.assertAlive()

    def test_os_exit_ends_the_process(self):
        self.run_ok("x = 1")
        r = self.s.run("import os\nprint('bye', flush=True)\nos._exit(7)")
        self.assertIsNone(r.done, r)
        self.assertTrue(self.s.ended)
        self.assertEqual(bytes(r.stdout), b"bye\n")
        self.assertTrue(r.eof)
        self.assertEqual(self.s.proc.wait(30), 7)

    def test_os_exit_from_a_thread(self):
        r = self.s.run("import os, threading, time\nthreading.Thread(target=os._exit, args=(9,)).start()\ntime.sleep(30)")
        self.assertIsNone(r.done, r)
        self.assertEqual(self.s.proc.wait(30), 9)

    def test_channel_end_ends_the_session(self):
        self.run_ok("x = 1")
        self.assertEqual(self.s.close(), 0)
        self.s = h.Session()  # for tearDown


class InterruptTest(SessionCase):
    def interrupt(self, code, marker=b"ready"):
        r = self.s.start(code)
        r.wait_output(marker)
        self.s.proc.send_signal(signal.SIGINT)
        return r.wait()

    def test_keyboard_interrupt(self):
        self.run_ok("n = 41")
        r = self.interrupt("import time\nprint('ready', flush=True)\nwhile True:\n    time.sleep(0.01)")
        self.assertEqual(r.exit_code(), 130, r)
        e = r.one("exception")["exception"]
        self.assertEqual(e["type"], "KeyboardInterrupt")
        self.assertNoRunnerFrames(e["traceback"])
        self.assertNoRunnerFrames(r.stderr)
        self.assertIn('File "<cell 2>"', e["traceback"])
        self.assertEqual(r.vars["seq"], r.seq)
        self.assertTrue(r.eof)
        self.assertEqual(self.run_ok("n + 1").value(), "42")
        self.assertAlive()

    def test_busy_loop(self):
        r = self.interrupt("print('ready', flush=True)\nwhile True:\n    pass")
        self.assertEqual(r.exit_code(), 130, r)
        self.assertEqual(self.run_ok("'again'").value(), "'again'")

    def test_caught_by_the_program(self):
        r = self.interrupt("import time\ntry:\n    print('ready', flush=True)\n    time.sleep(30)\n"
                           "except KeyboardInterrupt:\n    caught = True\n'handled'")
        self.assertEqual((r.exit_code(), r.value()), (0, "'handled'"), r)
        self.assertEqual(self.run_ok("caught").value(), "True")

    def test_between_runs_ignored(self):
        self.run_ok("kept = 1")
        for _ in range(5):
            self.s.proc.send_signal(signal.SIGINT)
        # The interrupts may still be on their way as the next run comes;
        # none may end the session.
        r = self.s.run("kept")
        self.assertIn(r.exit_code(), (0, 130), r)
        self.assertEqual(self.run_ok("kept + 1").value(), "2")
        self.assertAlive()

    def test_at_any_moment(self):
        # The daemon's timeout may fire at any point of a run: as it is set
        # up, while its code runs, while it reports, or after its done. The
        # session must outlive every one.
        self.run_ok("kept = []")
        for i in range(150):
            r = self.s.start("kept.append(%d)\nlen(kept)" % i)
            if i % 3:
                end = time.monotonic() + random.random() * 0.003
                while time.monotonic() < end:
                    pass
            self.s.proc.send_signal(signal.SIGINT)
            r.wait()
            self.assertIsNotNone(r.done, "run %d lost the session: %r; log %r" % (i, r, self.s.stderr()))
            self.assertIn(r.exit_code(), (0, 130), r)
            self.assertTrue(r.eof, r)
        self.assertAlive()
        r = self.run_ok("len(kept) <= 150 and kept == sorted(kept)")
        self.assertEqual(r.value(), "True")

    def test_while_displaying(self):
        # A loop that sends frame after frame: the interrupt must not cut
        # one in two.
        limits = {"display_items": 1 << 30, "display_total_bytes": 1 << 40}
        for i in range(8):
            r = self.s.start("import cellblock\nprint('ready', flush=True)\nwhile True:\n"
                             "    cellblock.display('x' * 50000)", limits=limits)
            r.wait_output(b"ready")
            end = time.monotonic() + random.random() * 0.02
            while time.monotonic() < end:
                pass
            self.s.proc.send_signal(signal.SIGINT)
            r.wait()
            self.assertEqual(r.exit_code(), 130, "try %d: %r; log %r" % (i, r.done, self.s.stderr()))
            self.assertEqual(r.one("exception")["exception"]["type"], "KeyboardInterrupt")
            self.assertEqual(self.run_ok("'alive %d'" % i).value(), "'alive %d'" % i)
        self.assertNotIn("<garbage>", [f.get("type") for f in self.s.stray])

    def test_during_a_slow_repr(self):
        # The value's repr is the program's code: it may be interrupted too.
        r = self.s.start("import time\nclass Slow:\n    def __repr__(self):\n        print('ready', flush=True)\n"
                         "        time.sleep(30)\n        return 'slow'\nSlow()")
        r.wait_output(b"ready")
        self.s.proc.send_signal(signal.SIGINT)
        r.wait()
        self.assertIsNotNone(r.done, r)
        self.assertTrue(r.eof, r)
        self.assertEqual(self.run_ok("'after'").value(), "'after'")

    def test_programs_own_handler_kept(self):
        r = self.s.run("import signal\ngot = []\nsignal.signal(signal.SIGINT, lambda n, f: got.append(n))")
        self.assertEqual(r.exit_code(), 0, r)
        r = self.interrupt("import time\nprint('ready', flush=True)\nwhile not got:\n    time.sleep(0.01)\nlen(got)")
        self.assertEqual((r.exit_code(), r.value()), (0, "1"), r)


class VarsTest(SessionCase):
    def vars_of(self, r):
        self.assertIsNotNone(r.vars, r)
        return {v["name"]: (v["type"], v["repr"]) for v in r.vars["vars"]}

    def test_listed_with_bounded_reprs(self):
        r = self.run_ok("import json\nn = 6\nf = 2.5\nb = True\nz = None\ns = 'x' * 1000\nu = '\\u00e9' * 1000\n"
                        "by = b'\\xff' * 500\nl = [1, 2, 3]\nd = {'a': 1}\nt = (1,)\n"
                        "def fn():\n    pass\nclass C:\n    pass\nc = C()\n_private = 1\n__dunder__ = 2\n")
        v = self.vars_of(r)
        self.assertEqual(v["n"], ("int", "6"))
        self.assertEqual(v["f"], ("float", "2.5"))
        self.assertEqual(v["b"], ("bool", "True"))
        self.assertEqual(v["z"], ("NoneType", "None"))
        self.assertEqual(v["l"], ("list", "<list of 3 items>"))
        self.assertEqual(v["d"], ("dict", "<dict of 1 items>"))
        self.assertEqual(v["t"], ("tuple", "<tuple of 1 items>"))
        self.assertEqual(v["json"], ("module", "<module 'json'>"))
        self.assertEqual(v["fn"][0], "function")
        self.assertEqual(v["c"], ("__main__.C", "<__main__.C object>"))
        for name in ("s", "u", "by"):
            self.assertLessEqual(len(v[name][1].encode("utf-8")), 120, v[name])
        self.assertTrue(v["s"][1].startswith("'xxxx"))
        self.assertNotIn("_private", v)
        self.assertNotIn("__dunder__", v)
        self.assertNotIn("__builtins__", v)
        self.assertFalse(r.vars["truncated"])
        # In the order defined.
        names = [x["name"] for x in r.vars["vars"]]
        self.assertEqual(names[:3], ["json", "n", "f"])

    def test_never_runs_the_programs_code(self):
        d = tempfile.mkdtemp(prefix="cellblock-session-test-")
        mark = os.path.join(d, "touched")
        code = (
            "import types\nMARK = %r\n"
            "def touch(*a):\n    open(MARK, 'a').write('x')\n    raise RuntimeError('touched')\n"
            "class Evil:\n    __repr__ = __str__ = __format__ = __len__ = touch\n"
            "    @property\n    def __class__(self):\n        touch()\n"
            "class L(list):\n    __repr__ = __len__ = touch\n"
            "class S(str):\n    __repr__ = __len__ = __getitem__ = startswith = isidentifier = touch\n"
            "    __hash__ = str.__hash__\n"
            "class M(types.ModuleType):\n    def __getattribute__(self, k):\n        touch()\n"
            "class Meta(type):\n    __repr__ = touch\n"
            "class WithMeta(metaclass=Meta):\n    pass\n"
            "e = Evil()\nl = L([1])\ns = str.__new__(S, 'abc')\nm = M('m')\nw = WithMeta\n"
            "globals()[str.__new__(S, 'weird')] = 1\n" % mark)
        try:
            r = self.run_ok(code)
            self.assertFalse(os.path.exists(mark), "a variable's report ran the program's code")
            v = self.vars_of(r)
            self.assertEqual(v["e"], ("__main__.Evil", "<__main__.Evil object>"))
            self.assertEqual(v["l"], ("__main__.L", "<__main__.L object>"))
            self.assertEqual(v["s"], ("__main__.S", "<__main__.S object>"))
            self.assertEqual(v["m"], ("__main__.M", "<__main__.M object>"))
            self.assertEqual(v["w"][0], "__main__.Meta")
            self.assertNotIn("weird", v)
            # Again after a later run, and over GET-like reports of them.
            self.run_ok("x = 1")
            self.assertFalse(os.path.exists(mark))
        finally:
            if os.path.exists(mark):
                os.unlink(mark)
            os.rmdir(d)

    def test_truncated(self):
        r = self.run_ok("for i in range(250):\n    globals()['v%03d' % i] = i")
        self.assertEqual(len(r.vars["vars"]), 200)
        self.assertTrue(r.vars["truncated"])
        self.assertEqual(r.vars["vars"][0]["name"], "i")

    def test_after_an_exception_and_an_exit(self):
        r = self.s.run("a = 1\n1 / 0")
        self.assertIn("a", self.vars_of(r))
        r = self.s.run("b = 2\nimport sys\nsys.exit(4)")
        self.assertEqual(r.exit_code(), 4)
        self.assertIn("b", self.vars_of(r))
        self.assertEqual(r.frames[-2]["type"], "vars")


class FramingTest(SessionCase):
    def test_frames_without_three_fds_ignored(self):
        self.run_ok("kept = 'k'")
        s = self.s
        # None, two and four descriptors: each frame ignored, each
        # descriptor closed (the pipe's far end sees its end).
        s.send({"type": "run", "seq": 90, "mode": "cell", "code": "kept = 'lost'"})
        for n in (2, 4):
            r_fd, w_fd = os.pipe()
            s.send({"type": "run", "seq": 90 + n, "mode": "cell", "code": "kept = 'lost'"}, [w_fd] * n)
            os.close(w_fd)
            self.assertEqual(os.read(r_fd, 10), b"", "%d descriptors kept open" % n)
            os.close(r_fd)
        # Other types and shapes, with or without descriptors.
        s.send({"type": "later-version"})
        s.send([1, 2, 3])
        s.send("a string")
        r_fd, w_fd = os.pipe()
        s.send({"type": "unknown"}, [r_fd, w_fd, w_fd])
        os.close(w_fd)
        self.assertEqual(os.read(r_fd, 10), b"")
        os.close(r_fd)
        r = self.run_ok("kept")
        self.assertEqual(r.value(), "'k'")
        self.assertEqual(s.stray, [])
        self.assertAlive()

    def test_malformed_run_fails_cleanly(self):
        # A run frame with its descriptors but no seq: the runner gives up
        # (status 2), it does not guess.
        r_fd, w_fd = os.pipe()
        self.s.send({"type": "run", "mode": "cell", "code": "1"}, [r_fd, w_fd, w_fd])
        os.close(r_fd)
        os.close(w_fd)
        self.assertIsNone(self.s.next_frame())
        self.assertEqual(self.s.proc.wait(30), 2)

    def test_garbage_ends_the_session(self):
        self.s.send(b"\x00\x00\x00\x05{bad}")
        self.assertIsNone(self.s.next_frame())
        self.assertEqual(self.s.proc.wait(30), 0)

    def test_oversized_frame_ends_the_session(self):
        self.s.send((64 << 20).to_bytes(4, "big"))
        self.assertIsNone(self.s.next_frame())
        self.assertEqual(self.s.proc.wait(30), 0)

    def test_threads_after_the_run(self):
        # A thread the first run left sends display frames and prints all
        # through the next runs: every run still gets its own started,
        # vars and done, whole and in order.
        self.run_ok(
            "import threading, cellblock, sys, time\nstop = threading.Event()\n"
            "def noisy():\n    i = 0\n    while not stop.is_set():\n        i += 1\n"
            "        cellblock.display('late %d' % i)\n        print('late', i)\n"
            "        sys.stderr.write('late %d\\n' % i)\n        time.sleep(0.0005)\n"
            "t = threading.Thread(target=noisy)\nt.start()\n")
        for i in range(20):
            r = self.s.run("x = %d\nx" % i)
            self.assertEqual((r.exit_code(), r.value()), (0, str(i)), r)
            self.assertEqual(r.vars["seq"], r.seq)
            self.assertTrue(r.eof, r)
            for f in r.frames:
                self.assertIn(f["type"], ("display", "value", "vars", "done"), f)
        r = self.run_ok("stop.set()\nt.join()\n'stopped'")
        self.assertEqual(r.value(), "'stopped'")
        for f in self.s.stray:
            self.assertEqual(f["type"], "display", f)
        self.assertAlive()

    def test_repeated_seq(self):
        # seq is the daemon's to choose; the runner echoes it.
        r = self.run_ok("1", seq=7)
        self.assertEqual((r.started["seq"], r.vars["seq"]), (7, 7))
        r = self.run_ok("2", seq=7)
        self.assertEqual(r.value(), "2")

    def test_fork_child_writes_no_frames(self):
        r = self.run_ok("import os, cellblock\npid = os.fork()\nif pid == 0:\n    cellblock.display('child')\n"
                        "    os._exit(0)\nos.waitpid(pid, 0)\ncellblock.display('parent')\n")
        self.assertEqual([f["data"]["text/plain"] for f in r.of("display")], ["'parent'"])
        self.assertEqual(self.run_ok("'next'").value(), "'next'")


class EnvironmentTest(unittest.TestCase):
    def test_env_and_reexec(self):
        # A startup variable different from the jail's: the runner starts
        # again with it, and still serves the session.
        env = h.base_env(PYTHONHASHSEED="123", CELLBLOCK_TEST="x")
        with h.Session(env=env) as s:
            r = s.run("import os, sys\n(os.environ['PYTHONHASHSEED'], os.environ['CELLBLOCK_TEST'], "
                      "sys.flags.hash_randomization, 'CELLBLOCK_RUNNER_FD' in os.environ)")
            self.assertEqual(r.value(), "('123', 'x', 1, False)", r)
            self.assertEqual(s.run("x = 1\nx").value(), "1")

    def test_limits(self):
        with h.Session(limits={"repr_bytes": 100}) as s:
            r = s.run("'x' * 1000")
            self.assertLessEqual(len(r.value().encode()), 100)
            # A run's own limits replace the session's.
            r = s.run("'x' * 1000", limits={"repr_bytes": 500})
            self.assertLessEqual(len(r.value().encode()), 500)
            self.assertGreater(len(r.value().encode()), 100)


if __name__ == "__main__":
    unittest.main()
