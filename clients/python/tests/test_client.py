"""Client and Session against the real daemon: every call, every error
type a client can meet, tools, streaming, sessions."""

import dataclasses
import os
import subprocess
import threading
import time
import unittest

from support import ROOT, DaemonTest, socket

import cellblock_client as cb


class TestRuns(DaemonTest):
    def test_script_run(self):
        r = self.client.run("import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(3)")
        self.assertEqual(r.stdout, "out\n")
        self.assertEqual(r.stderr, "err\n")
        self.assertEqual(r.exit_code, 3)
        self.assertFalse(r.ok)
        self.assertIsNone(r.error)
        self.assertTrue(r.run_id.startswith("r"))
        self.assertTrue(r.python)
        self.assertIsNotNone(r.limits)
        self.assertIsNotNone(r.phases)
        self.assertGreaterEqual(r.duration_ms, 0)
        self.assertGreater(r.memory_peak_bytes, 0)
        self.assertEqual(r.raw["exit_code"], 3)

    def test_cell_value_and_exception(self):
        r = self.client.run("x = 6\nx * 7", cell=True)
        self.assertTrue(r.ok)
        self.assertEqual((r.value.type, r.value.repr, r.value.json, r.value.has_json), ("int", "42", 42, True))
        r = self.client.run("object()", cell=True)
        self.assertFalse(r.value.has_json)
        r = self.client.run("def f():\n    return 1 / 0\nf()", cell=True)
        self.assertEqual(r.exception.type, "ZeroDivisionError")
        self.assertEqual(r.exception.message, "division by zero")
        self.assertIn("Traceback", r.exception.traceback)
        self.assertEqual(r.exception.line, 2)

    def test_inputs_files_env_args_stdin(self):
        r = self.client.run(
            "import os, sys\nprint(n + 1, cfg['a'])\nprint(open('data/in.txt').read())\n"
            "print(open('blob.bin', 'rb').read())\nprint(os.environ['GREETING'], sys.argv[1:], sys.stdin.read())",
            inputs={"n": 41, "cfg": {"a": [1, 2]}}, files={"data/in.txt": "hello", "blob.bin": b"\x00\xff"},
            env={"GREETING": "hi"}, args=["a", "b"], stdin="from stdin")
        self.assertTrue(r.ok, r.stderr)
        self.assertEqual(r.stdout, "42 [1, 2]\nhello\nb'\\x00\\xff'\nhi ['a', 'b'] from stdin\n")

    def test_timeout_memory_pids(self):
        r = self.client.run("import time\ntime.sleep(30)", timeout=0.5)
        self.assertTrue(r.timed_out)
        self.assertEqual(r.limits.timeout_ms, 500)
        r = self.client.run("b = bytearray(200 << 20)\nprint(len(b))", memory="64M")
        self.assertTrue(r.oom_killed, r)
        self.assertEqual(r.limits.memory_bytes, 64 << 20)
        r = self.client.run("print(1)", pids=16, cpus=0.5, tmp="8M", output_bytes="64K")
        self.assertEqual((r.limits.pids, r.limits.cpus, r.limits.tmp_bytes, r.limits.output_bytes),
                         (16, 0.5, 8 << 20, 64 << 10))

    def test_python_version(self):
        info = self.client.info()
        version = info["pythons"][0]["version"]
        r = self.client.run("import platform\nprint(platform.python_version())", python=version)
        self.assertEqual(r.stdout.strip(), version)
        self.assertEqual(r.python, version)

    def test_files_out_and_artifact(self):
        r = self.client.run("import os\nos.makedirs('out', exist_ok=True)\n"
                            "open('out/report.txt', 'w').write('the report')")
        self.assertTrue(r.ok, r.stderr)
        (f,) = r.files
        self.assertEqual((f.path, f.size), ("report.txt", 10))
        self.assertEqual(self.client.artifact(f.sha256), b"the report")

    def test_display(self):
        r = self.client.run("import cellblock\nclass H:\n    def _repr_html_(self):\n        return '<b>x</b>'\n"
                            "cellblock.display(H())")
        self.assertEqual(r.display[0].data["text/html"], "<b>x</b>")

    def test_denials(self):
        r = self.client.run("import socket\ntry:\n    socket.create_connection(('example.org', 80), timeout=2)\n"
                            "except OSError as e:\n    print('refused')")
        self.assertIn("refused", r.stdout)
        self.assertIsInstance(r.denials, list)

    def test_info_health_sessions(self):
        info = self.client.info()
        self.assertIn("version", info)
        self.assertIn("maxima", info)
        self.assertEqual(self.client.health()["status"], "ok")
        with self.client.session() as s:
            self.assertIn(s.id, [x["id"] for x in self.client.sessions()])

    def test_socket_search(self):
        old = os.environ.get("CELLBLOCK_SOCKET")
        try:
            os.environ["CELLBLOCK_SOCKET"] = "/nonexistent/a.sock"
            self.assertEqual(cb.Client().socket, "/nonexistent/a.sock")
            self.assertEqual(cb.Client("/x.sock").socket, "/x.sock")
            del os.environ["CELLBLOCK_SOCKET"]
            self.assertEqual(cb.Client().socket, "/run/cellblock/cellblockd.sock")
        finally:
            if old is not None:
                os.environ["CELLBLOCK_SOCKET"] = old

    def test_many_runs_reuse_connections(self):
        for i in range(20):
            self.assertEqual(self.client.run("print(%d)" % i).stdout, "%d\n" % i)


class TestErrors(DaemonTest):
    """Every error type a client call can meet, raised as its class."""

    def check(self, cls, etype, fn, field=None):
        with self.assertRaises(cls) as cm:
            fn()
        e = cm.exception
        self.assertIsInstance(e, cb.CellblockError)
        self.assertEqual(e.type, etype)
        self.assertTrue(e.message)
        if field is not None:
            self.assertEqual(e.field, field)
        return e

    def test_bad_request(self):
        e = self.check(cb.BadRequestError, "bad_request", lambda: self.client.run(""), "code")
        self.assertEqual(e.status, 400)
        self.assertIsInstance(e, ValueError)
        self.check(cb.BadRequestError, "bad_request", lambda: self.client.run("1", with_=[" "]), "dependencies[0]")
        self.check(cb.BadRequestError, "bad_request", lambda: self.client.run("1", env={"PATH": "/x"}), "env")

    def test_too_large(self):
        self.check(cb.TooLargeError, "too_large", lambda: self.client.run("#" * (1 << 20) + "\n"), "code")

    def test_over_limit(self):
        self.check(cb.OverLimitError, "over_limit", lambda: self.client.run("1", timeout=10 ** 6), "timeout_ms")
        info = self.client.info()
        if not info.get("network_policy", {}).get("allow"):
            self.check(cb.OverLimitError, "over_limit", lambda: self.client.run("1", allow_net="example.org:443"),
                       "network")

    def test_unknown_python(self):
        self.check(cb.UnknownPythonError, "unknown_python", lambda: self.client.run("1", python="2.1"))

    def test_not_found(self):
        self.check(cb.NotFoundError, "not_found", lambda: self.client.artifact("0" * 64))

    def test_unreachable(self):
        with cb.Client("/nonexistent/cellblockd.sock") as c:
            e = self.check(cb.UnreachableError, "unreachable", c.info)
        self.assertIsInstance(e, ConnectionError)
        self.assertIn("/nonexistent/cellblockd.sock", str(e))

    def test_session_not_found(self):
        s = self.client.session()
        s.close()
        self.check(cb.SessionNotFoundError, "session_not_found", lambda: s.run("1"), "session")
        self.check(cb.SessionNotFoundError, "session_not_found", s.info)
        s.close()  # again: no error

    def test_session_busy(self):
        entered, release = threading.Event(), threading.Event()
        seen = {}

        def wait() -> str:
            entered.set()
            release.wait(30)
            return "done"

        with self.client.session(tools={"wait": wait}) as s:
            t = threading.Thread(target=lambda: seen.setdefault("r", s.run("tools.wait()")))
            t.start()
            self.assertTrue(entered.wait(30))
            try:
                self.check(cb.SessionBusyError, "session_busy", lambda: s.run("1"))
            finally:
                release.set()
                t.join(60)
            self.assertEqual(seen["r"].value.json, "done")

    def test_session_lost(self):
        with self.client.session() as s:
            s.run("x = 1")
            r = s.run("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
            self.assertEqual(r.session.state, "lost")
            self.check(cb.SessionLostError, "session_lost", lambda: s.run("x"))

    def test_forbidden(self):
        if os.geteuid() != 0 or not os.path.exists("/usr/bin/python3"):
            self.skipTest("needs root to run a client as uid 65534")
        prog = ("import sys; sys.path.insert(0, sys.argv[1]); import cellblock_client as c\n"
                "try:\n    c.Client(sys.argv[2]).info()\nexcept c.ForbiddenError as e:\n"
                "    print(e.type, isinstance(e, PermissionError))\n")
        p = subprocess.run(["/usr/bin/python3", "-c", prog, ROOT, socket()], user=65534, group=0, extra_groups=[],
                           capture_output=True, text=True, timeout=60)
        if "Permission denied" in p.stderr or "unreachable" in p.stdout:
            self.skipTest("uid 65534 cannot reach the socket here: %s" % p.stderr[-200:])
        self.assertEqual(p.stdout.strip(), "forbidden True", p.stderr)

    def test_error_classes(self):
        # The types no call here can provoke on a healthy shared daemon map
        # to their classes all the same.
        for etype, cls in [("busy", cb.BusyError), ("unavailable", cb.UnavailableError),
                           ("internal", cb.InternalError), ("canceled", cb.CanceledError),
                           ("in_use", cb.InUseError), ("dependency_error", cb.DependencyError),
                           ("forbidden", cb.ForbiddenError), ("something_new", cb.CellblockError)]:
            e = cb._errors.error_from({"type": etype, "message": "m", "field": "f"}, status=400)
            self.assertIs(type(e), cls)
            self.assertEqual((e.type, e.message, e.field, e.status), (etype, "m", "f", 400))
            self.assertEqual(str(e), "%s: f: m" % etype)


def add(x: float, y: float) -> float:
    """Add two numbers."""
    return x + y


@dataclasses.dataclass
class Point:
    x: int
    y: int


class TestTools(DaemonTest):
    def test_tools_are_called(self):
        def greet(name: str, *, punctuation: str = "!") -> str:
            return "hello " + name + punctuation

        async def double(n: int) -> int:
            return n * 2

        def pos(a, /, b):
            return [a, b]

        def any_kwargs(**kw):
            return sorted(kw)

        r = self.client.run(
            "import cellblock\nprint(tools.add(x=2, y=3), tools.greet(name='bob'), tools.double(n=21))\n"
            "print(tools.pos(a=1, b=2), tools.any_kwargs(p=1, q=2))\nhelp(tools.add)",
            cell=True, tools={"add": add, "greet": greet, "double": double, "pos": pos, "any_kwargs": any_kwargs})
        self.assertTrue(r.ok, r.stderr)
        self.assertTrue(r.stdout.startswith("5 hello bob! 42\n[1, 2] ['p', 'q']\n"), r.stdout)
        self.assertIn("Add two numbers.", r.stdout)
        self.assertEqual([c.name for c in r.tool_calls], ["add", "greet", "double", "pos", "any_kwargs"])
        self.assertTrue(all(c.ok and c.outcome == "ok" for c in r.tool_calls))

    def test_callable_raises(self):
        def lookup(key: str) -> str:
            raise KeyError(key)

        r = self.client.run("import cellblock\ntry:\n    tools.lookup(key='k')\nexcept cellblock.ToolError as e:\n"
                            "    print('ToolError:', e)\ntools.lookup(key='again')", cell=True, tools={"lookup": lookup})
        self.assertEqual(r.stdout, "ToolError: KeyError: 'k'\n")
        self.assertEqual(r.exception.type, "cellblock.ToolError")
        self.assertEqual(r.exception.message, "KeyError: 'again'")
        self.assertEqual([(c.ok, c.outcome) for c in r.tool_calls], [(False, "error"), (False, "error")])

    def test_arguments_refused_by_schema(self):
        called = []

        def typed(n: int) -> int:
            called.append(n)
            return n

        r = self.client.run("import cellblock\ntry:\n    tools.typed(n='not a number')\nexcept cellblock.ToolError as e:\n"
                            "    print('refused')\ntry:\n    cellblock.call_tool('typed', {'n': 1, 'extra': 2})\n"
                            "except cellblock.ToolError:\n    print('refused')\nprint(tools.typed(n=7))",
                            cell=True, tools={"typed": typed})
        self.assertEqual(r.stdout, "refused\nrefused\n7\n", r.stderr)
        self.assertEqual(called, [7])

    def test_slow_callable(self):
        def slow(seconds: float) -> str:
            time.sleep(seconds)
            return "slept"

        r = self.client.run("import cellblock\nprint(tools.slow(seconds=0.3))\ntry:\n    tools.slow(seconds=5)\n"
                            "except cellblock.ToolError as e:\n    print('ToolError:', e)",
                            cell=True, tools={"slow": slow}, tool_timeout=1, timeout=30)
        self.assertTrue(r.stdout.startswith("slept\nToolError: "), r.stdout + r.stderr)
        self.assertEqual([c.outcome for c in r.tool_calls], ["ok", "timeout"])

    def test_callable_answers_non_json(self):
        tools = {
            "obj": lambda: object(),
            "nan": lambda: float("nan"),
            "a_set": lambda: {3, 1, 2},
            "point": lambda: Point(1, 2),
            "tup": lambda: (1, "a"),
            "deep": lambda: _nested(80),
        }
        r = self.client.run(
            "import cellblock\nfor name in ['obj', 'nan', 'deep']:\n    try:\n        cellblock.call_tool(name, {})\n"
            "    except cellblock.ToolError as e:\n        print(name, 'ToolError:', str(e)[:60])\n"
            "print(tools.a_set(), tools.point(), tools.tup())", cell=True, tools=tools)
        lines = r.stdout.splitlines()
        self.assertTrue(lines[0].startswith("obj ToolError: tool obj returned a object object, which is not JSON"),
                        lines)
        self.assertTrue(lines[1].startswith("nan ToolError: tool nan returned a float object, which is not JSON"),
                        lines)
        self.assertTrue(lines[2].startswith("deep ToolError: the tool's result could not be passed"), lines)
        self.assertEqual(lines[3], "[1, 2, 3] {'x': 1, 'y': 2} [1, 'a']")

    def test_bad_tool_names(self):
        with self.assertRaises(ValueError):
            self.client.run("1", tools={"_private": add})
        with self.assertRaises(ValueError):
            self.client.run("1", tools={"class": add})
        with self.assertRaises(TypeError):
            self.client.run("1", tools={"x": 3})


def _nested(n):
    v = []
    for _ in range(n):
        v = [v]
    return v


class TestStreaming(DaemonTest):
    def test_output_arrives_in_order_while_the_run_goes_on(self):
        chunks = []
        seen_at_call = []

        def checkpoint() -> int:
            seen_at_call.append("".join(t for s, t in chunks if s == "stdout"))
            return len(seen_at_call)

        code = ("import sys\nfor i in range(50):\n    print('line', i, flush=True)\n"
                "    print('err', i, file=sys.stderr, flush=True)\nimport cellblock\ncellblock.tools.checkpoint()\n"
                "print('after', flush=True)")
        r = self.client.run(code, tools={"checkpoint": checkpoint}, on_output=lambda s, t: chunks.append((s, t)))
        self.assertTrue(r.ok, r.stderr)
        want = "".join("line %d\n" % i for i in range(50))
        # Everything printed before the call had arrived when the call did.
        self.assertEqual(seen_at_call, [want])
        self.assertEqual("".join(t for s, t in chunks if s == "stdout"), want + "after\n")
        self.assertEqual("".join(t for s, t in chunks if s == "stderr"), "".join("err %d\n" % i for i in range(50)))
        self.assertEqual(r.stdout, want + "after\n")

    def test_on_output_without_tools(self):
        chunks = []
        r = self.client.run("print('a')\nprint('b')", on_output=lambda s, t: chunks.append(t))
        self.assertEqual("".join(chunks), "a\nb\n")
        self.assertEqual(r.stdout, "a\nb\n")

    def test_refused_streamed_run_raises(self):
        with self.assertRaises(cb.BadRequestError):
            self.client.run("", on_output=lambda s, t: None)


class TestSessions(DaemonTest):
    def test_session_kept_across_100_calls(self):
        calls = []

        def record(i: int) -> int:
            calls.append(i)
            return i

        with self.client.session(tools={"record": record}) as s:
            s.run("n = 0")
            for i in range(100):
                r = s.run("n += 1\ntools.record(i=n)")
                self.assertEqual(r.value.json, i + 1)
            self.assertEqual(r.session.execution_count, 101)
            self.assertEqual(r.session.id, s.id)
            self.assertEqual(calls, list(range(1, 101)))
            self.assertIn(cb.Variable("n", "int", "100"), s.variables())
            self.assertEqual(s.info()["execution_count"], 101)

    def test_session_options_files_put_get(self):
        with self.client.session(env={"MODE": "test"}, memory="256M", files={"in.txt": "x"}, inputs={"k": 5},
                                 timeout=10, idle_timeout=60) as s:
            self.assertTrue(s.python)
            r = s.run("import os\n(os.environ['MODE'], open('in.txt').read(), k)")
            self.assertEqual(r.value.json, ["test", "x", 5])
            w = s.put("sub/dir/data.bin", b"\x01\x02")
            self.assertEqual(w["size"], 2)
            s.put("text.txt", "héllo")
            self.assertEqual(s.get("sub/dir/data.bin"), b"\x01\x02")
            self.assertEqual(s.run("open('text.txt', encoding='utf-8').read()").value.json, "héllo")
            s.run("open('made.txt', 'w').write('made here')")
            self.assertEqual(s.get("made.txt"), b"made here")
            with self.assertRaises(cb.NotFoundError):
                s.get("missing.txt")
            with self.assertRaises(cb.BadRequestError):
                s.put("out/x", b"")
            r = s.run("print('script mode')", cell=False)
            self.assertIsNone(r.value)
        self.assertTrue(s.closed)

    def test_session_run_cannot_set_jail_fields(self):
        with self.client.session() as s:
            with self.assertRaises(TypeError):
                s.run("1", memory="1G")  # fixed when the session was made


if __name__ == "__main__":
    unittest.main()
