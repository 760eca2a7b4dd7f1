"""Tests of tool calls in the runner (cellblock/_tools.py; PROTOCOL.md,
"Tools"), run by the Go test TestPythonSuite for every CPython found, or by
hand: python -m unittest -v test_tools (from py_tests).

The test plays the daemon: it sends a run message that declares tools and
answers the runner's tool_call frames with tool_result frames.
"""

import json
import os
import queue
import socket
import subprocess
import sys
import threading
import unittest

import harness as h

ADD = {"name": "add", "description": "Add two numbers.",
       "input_schema": {"type": "object", "properties": {"x": {"type": "number", "description": "the first"},
                                                         "y": {"type": "number"}},
                        "required": ["x", "y"]}}
ECHO = {"name": "echo", "description": "Echo the arguments."}


def answer_all(call):
    """The default tools: add and echo; anything else fails."""
    args = call["arguments"]
    if call["name"] == "add":
        return {"ok": True, "result": args["x"] + args["y"]}
    if call["name"] == "echo":
        return {"ok": True, "result": args}
    return {"ok": False, "error": "no such tool here"}


class Live:
    """A run through the runner whose tool calls are answered as they
    come: answer(call) returns the tool_result's members (ok, result or
    error), or None to leave the call unanswered."""

    def __init__(self, code, tools=(ADD, ECHO), answer=answer_all, mode="script", tool_limits=None,
                 inputs=None, timeout=60):
        parent, child = socket.socketpair()
        env = h.base_env()
        start_env = dict(env)
        start_env["CELLBLOCK_RUNNER_FD"] = str(child.fileno())
        self.sock = parent
        self.answer = answer
        self.frames = []
        self.calls = []
        self.wlock = threading.Lock()
        self.p = subprocess.Popen([h.PYTHON, h.RUNNER], env=start_env, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(child.fileno(),))
        child.close()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        msg = {"type": "run", "mode": mode, "code": code, "argv0": "-c", "argv": [], "env": env}
        if tools is not None:
            msg["tools"] = list(tools)
        if tool_limits is not None:
            msg["tool_limits"] = tool_limits
        if inputs is not None:
            msg["inputs"] = inputs
        self.send(msg)
        try:
            out, err = self.p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            out, err = self.p.communicate()
        self.stdout, self.stderr, self.rc = out.decode(), err.decode(), self.p.returncode
        try:
            parent.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        self.reader.join(timeout)
        parent.close()

    def send(self, obj):
        with self.wlock:
            try:
                self.sock.sendall(h.frame(obj))
            except OSError:
                pass

    def _read(self):
        buf = b""
        while True:
            try:
                b = self.sock.recv(1 << 20)
            except OSError:
                b = b""
            if not b:
                return
            buf += b
            while len(buf) >= 4:
                n = int.from_bytes(buf[:4], "big")
                if len(buf) < 4 + n:
                    break
                f, buf = json.loads(buf[4:4 + n].decode()), buf[4 + n:]
                self.frames.append(f)
                if f.get("type") == "tool_call":
                    self.calls.append(f)
                    a = self.answer(f)
                    if a is not None:
                        reply = {"type": "tool_result", "id": f["id"]}
                        reply.update(a)
                        self.send(reply)

    def of(self, t):
        return [f for f in self.frames if f.get("type") == t]

    def __repr__(self):
        return "Live(rc=%r, stdout=%r, stderr=%r, frames=%r)" % (self.rc, self.stdout, self.stderr[-3000:],
                                                                   self.frames[:20])


class CallTest(unittest.TestCase):
    def ok(self, r):
        self.assertEqual(r.rc, 0, r)
        return r

    def test_call_returns_the_result(self):
        r = self.ok(Live("import cellblock\nprint(cellblock.tools.add(x=2, y=3))"))
        self.assertEqual(r.stdout, "5\n")
        (call,) = r.calls
        self.assertEqual(call["name"], "add")
        self.assertEqual(call["arguments"], {"x": 2, "y": 3})
        self.assertRegex(call["id"], r"^[A-Za-z0-9_.-]{1,64}$")
        self.assertEqual(set(call), {"type", "id", "name", "arguments"})

    def test_json_round_trip(self):
        r = self.ok(Live("import cellblock\nv = cellblock.tools.echo(a=[1, 2.5, None, True], b={'k': 'é'})\n"
                         "print(repr(v))"))
        self.assertEqual(r.stdout, "{'a': [1, 2.5, None, True], 'b': {'k': 'é'}}\n")

    def test_error_raises_tool_error(self):
        def fail(call):
            return {"ok": False, "error": "the tool broke: disk full"}
        r = self.ok(Live("import cellblock\ntry:\n    cellblock.tools.echo(a=1)\n"
                         "except cellblock.ToolError as e:\n    print(type(e).__name__, e)", answer=fail))
        self.assertEqual(r.stdout, "ToolError the tool broke: disk full\n")

    def test_uncaught_tool_error_is_the_exception(self):
        r = Live("import cellblock\ncellblock.tools.echo(a=1)", answer=lambda c: {"ok": False, "error": "nope"})
        self.assertEqual(r.rc, 1, r)
        (exc,) = r.of("exception")
        self.assertEqual(exc["exception"]["type"], "cellblock.ToolError")
        self.assertEqual(exc["exception"]["message"], "nope")

    def test_calls_from_many_threads(self):
        # Every call waits until all 16 are in; the answers go back in
        # reverse order: each must reach its own caller.
        held = queue.Queue()
        lock = threading.Lock()
        pending = []

        def answer(call):
            with lock:
                pending.append(call)
                if len(pending) < 16:
                    return None
                calls = list(pending)
            for c in reversed(calls):
                held.put(c)
            return None

        def flush():
            while True:
                c = held.get()
                if c is None:
                    return
                live.send({"type": "tool_result", "id": c["id"], "ok": True, "result": c["arguments"]["i"] * 10})

        code = """
import cellblock, threading
out = {}
def work(i):
    out[i] = cellblock.tools.echo(i=i)
ts = [threading.Thread(target=work, args=(i,)) for i in range(16)]
for t in ts: t.start()
for t in ts: t.join()
print(sorted(out.items()) == [(i, i * 10) for i in range(16)])
"""
        live = None

        class L(Live):
            def __init__(self, *a, **kw):
                nonlocal live
                live = self
                threading.Thread(target=flush, daemon=True).start()
                super().__init__(*a, **kw)
        r = L(code, answer=answer)
        held.put(None)
        self.ok(r)
        self.assertEqual(r.stdout, "True\n", r)
        self.assertEqual(len({c["id"] for c in r.calls}), 16)

    def test_undeclared_name(self):
        r = self.ok(Live("""
import cellblock
try:
    cellblock.tools.rm_rf
except cellblock.ToolError as e:
    print("ToolError:", e)
print(hasattr(cellblock.tools, "rm_rf"), hasattr(cellblock.tools, "add"), "add" in cellblock.tools)
"""))
        self.assertEqual(r.stdout, "ToolError: no tool 'rm_rf' in this run; it declares add, echo\nFalse True True\n")
        self.assertEqual(r.calls, [])

    def test_dir_doc_and_repr(self):
        r = self.ok(Live("""
import cellblock
t = cellblock.tools
print(dir(t))
print(repr(t))
print(t.add.__doc__)
print(t.add.__name__)
import inspect
print(inspect.signature(t.add))
print(inspect.signature(t.echo))
"""))
        lines = r.stdout.split("\n")
        self.assertEqual(lines[0], "['add', 'echo']")
        self.assertEqual(lines[1], "<cellblock tools: add(*, x: float, y: float), echo(**arguments)>")
        self.assertIn("add(*, x: float, y: float)\n\nAdd two numbers.", r.stdout)
        self.assertIn("  x: float, required: the first", r.stdout)
        self.assertIn("\nadd\n", r.stdout)
        self.assertIn("\n(*, x, y)\n(**_cb_more)\n", r.stdout)

    def test_call_tool_takes_any_name(self):
        r = self.ok(Live("""
import cellblock
print(cellblock.call_tool("echo", {"odd-name": 1}, b=2))
try:
    cellblock.call_tool("undeclared", {})
except cellblock.ToolError as e:
    print(e)
"""))
        self.assertEqual(r.stdout, "{'odd-name': 1, 'b': 2}\nno such tool here\n")
        self.assertEqual([c["name"] for c in r.calls], ["echo", "undeclared"])

    def test_missing_argument_is_a_type_error(self):
        r = self.ok(Live("""
import cellblock
try:
    cellblock.tools.add(x=1)
except TypeError as e:
    print("TypeError", "y" in str(e))
try:
    cellblock.tools.add(1, 2)
except TypeError as e:
    print("TypeError")
"""))
        self.assertEqual(r.stdout, "TypeError True\nTypeError\n")
        self.assertEqual(r.calls, [])

    def test_optional_arguments_are_left_out(self):
        opt = {"name": "find", "input_schema": {"type": "object", "properties": {"q": {"type": "string"},
                                                                               "limit": {"type": "integer"}},
                                                "required": ["q"], "additionalProperties": False}}
        r = self.ok(Live("import cellblock\nprint(cellblock.tools.find(q='a'))\nprint(cellblock.tools.find(q='b', limit=3))",
                         tools=[opt], answer=lambda c: {"ok": True, "result": sorted(c["arguments"])}))
        self.assertEqual(r.stdout, "['q']\n['limit', 'q']\n")

    def test_arguments_must_be_json(self):
        r = self.ok(Live("""
import cellblock
for bad in (object(), float("nan"), {1, 2}):
    try:
        cellblock.tools.echo(v=bad)
    except TypeError as e:
        print("TypeError")
"""))
        self.assertEqual(r.stdout, "TypeError\nTypeError\nTypeError\n")
        self.assertEqual(r.calls, [])

    def test_arguments_over_the_cap(self):
        r = self.ok(Live("""
import cellblock
try:
    cellblock.tools.echo(v="x" * 2000)
except cellblock.ToolError as e:
    print(e)
print(cellblock.tools.echo(v="y"))
""", tool_limits={"argument_bytes": 1000, "timeout_ms": 5000}))
        self.assertEqual(r.stdout, "the arguments of echo are 2008 bytes as JSON; a call may pass at most 1000\n{'v': 'y'}\n")
        self.assertEqual(len(r.calls), 1)

    def test_forked_child_cannot_call(self):
        r = self.ok(Live("""
import cellblock, os
print(cellblock.tools.add(x=1, y=1))
pid = os.fork()
if pid == 0:
    try:
        cellblock.tools.add(x=1, y=2)
        os._exit(9)
    except cellblock.ToolError as e:
        os._exit(7 if "forked child" in str(e) else 8)
_, st = os.waitpid(pid, 0)
print(os.WEXITSTATUS(st))
print(cellblock.tools.add(x=2, y=2))
"""))
        self.assertEqual(r.stdout, "2\n7\n4\n")
        self.assertEqual(len(r.calls), 2)

    def test_cell_mode_binds_tools(self):
        r = self.ok(Live("tools.add(x=40, y=2)", mode="cell"))
        self.assertEqual(r.of("value")[0]["value"]["repr"], "42")
        r = self.ok(Live("print('tools' in globals())"))
        self.assertEqual(r.stdout, "False\n")
        r = self.ok(Live("tools", mode="cell", inputs={"tools": "mine"}))
        self.assertEqual(r.of("value")[0]["value"]["repr"], "'mine'")

    def test_no_tools_costs_nothing(self):
        r = self.ok(Live("""
import sys, cellblock
try:
    cellblock.tools.add
except cellblock.ToolError as e:
    print(e)
print('cellblock._tools' in sys.modules, repr(cellblock.tools), dir(cellblock.tools))
""", tools=None))
        self.assertEqual(r.stdout, "no tool 'add': this run declares no tools\nFalse <cellblock tools: none in this run> []\n")

    def test_waiting_calls_end_with_the_run(self):
        # A thread waits for an answer that never comes when the code
        # ends: it is told the run is over, and the process exits at once
        # (the tool timeout is a minute).
        r = Live("""
import cellblock, threading, sys
def wait():
    try:
        cellblock.tools.echo(never=1)
    except cellblock.ToolError as e:
        sys.stderr.write("late: %s\\n" % e)
t = threading.Thread(target=wait)
t.start()
import time
while not t.is_alive(): pass
time.sleep(0.2)
print("main done")
""", answer=lambda c: None, tool_limits={"argument_bytes": 1 << 20, "timeout_ms": 60000}, timeout=30)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.stdout, "main done\n")
        self.assertIn("late: the run is over", r.stderr)
        done = r.of("done")
        self.assertEqual(len(done), 1)

    def test_reader_gone_before_exit(self):
        # The reader thread is stopped before done: the program's own exit
        # handlers see no thread of the runner's.
        r = self.ok(Live("""
import atexit, cellblock, _thread, threading
cellblock.tools.add(x=1, y=2)
atexit.register(lambda: print("threads", _thread._count(), [t.name for t in threading.enumerate()]))
"""))
        self.assertEqual(r.stdout, "threads 0 ['MainThread']\n")

    def test_forged_results_are_the_daemons_only(self):
        # What the program writes on the channel goes to the daemon, not
        # to its own reader: a forged tool_result answers nothing.
        r = self.ok(Live(h_find_channel() + """
import struct, json, threading, cellblock
got = []
t = threading.Thread(target=lambda: got.append(cellblock.tools.echo(n=1)))
t.start()
m = json.dumps({"type": "tool_result", "id": "c1", "ok": True, "result": "forged"}).encode()
os.write(fd, struct.pack(">I", len(m)) + m)
t.join()
print(got)
""", answer=lambda c: {"ok": True, "result": "real"}))
        self.assertEqual(r.stdout, "['real']\n")
        self.assertEqual(len(r.of("tool_result")), 1)


def h_find_channel():
    """Code that sets fd to the runner's channel."""
    return "import os\nfrom cellblock import _channel\nfd = _channel.channel.fd\n"


class SessionToolsTest(unittest.TestCase):
    def setUp(self):
        self.s = h.Session()

    def tearDown(self):
        self.assertEqual(self.s.close(), 0, self.s.stderr())

    def run_with_tools(self, code, tools, answer=answer_all, **kw):
        return drive(self.s.start(code, tools=tools, **kw), answer)

    def test_tools_per_run(self):
        r = self.run_with_tools("x = tools.add(x=1, y=2)\nx", [ADD])
        self.assertEqual(r.value(), "3", r)
        r = self.run_with_tools("tools.add(x=x, y=10)", [ADD])
        self.assertEqual(r.value(), "13", r)
        # A run without tools: none, and the global is still the object.
        r = self.s.run("import cellblock\n(repr(tools), dir(cellblock.tools))")
        self.assertEqual(r.value(), "('<cellblock tools: none in this run>', [])", r)
        r = self.s.run("f = None\ntry:\n    tools.add\nexcept Exception as e:\n    f = type(e).__name__\nf")
        self.assertEqual(r.value(), "'_NoTool'", r)

    def test_old_function_after_its_run(self):
        r = self.run_with_tools("import cellblock\nf = cellblock.tools.echo\nf(a=1)", [ECHO])
        self.assertEqual(r.value(), "{'a': 1}", r)
        r = self.s.run("import cellblock\ntry:\n    f(a=2)\nexcept cellblock.ToolError as e:\n    m = str(e)\nm")
        self.assertEqual(r.value(), "'tool echo was declared by a run that is over'", r)

    def test_interrupt_while_waiting(self):
        import signal
        calls = []

        def later(call):
            calls.append(call)
            os.kill(self.s.proc.pid, signal.SIGINT)
            return None
        r = drive(self.s.start("import cellblock\ntry:\n    cellblock.tools.echo(a=1)\n"
                               "except KeyboardInterrupt:\n    r = 'interrupted'\nr", tools=[ECHO]), later)
        self.assertEqual(r.value(), "'interrupted'", r)
        # The call's late answer is dropped, and the session reads on in
        # step.
        self.s.send({"type": "tool_result", "id": calls[0]["id"], "ok": True, "result": 1})
        self.assertEqual(self.s.run("6 * 7").value(), "42")


def drive(run, answer):
    """SessionRun.wait, answering the run's tool calls (answer(call) gives
    the members of the tool_result, or None for no answer)."""
    sess = run.sess
    while run.done is None:
        f = sess.next_frame(60)
        if f is None:
            break
        t = f.get("type")
        if t == "tool_call":
            a = answer(f)
            if a is not None:
                reply = {"type": "tool_result", "id": f["id"]}
                reply.update(a)
                sess.send(reply)
            continue
        if run.started is None:
            if t == "started" and f.get("seq") == run.seq:
                run.started = f
            else:
                sess.stray.append(f)
            continue
        run.frames.append(f)
        if t == "vars" and f.get("seq") == run.seq:
            run.vars = f
        elif t == "done":
            run.done = f
    for th in run._threads:
        th.join(10)
    run.eof = not any(th.is_alive() for th in run._threads)
    return run


if __name__ == "__main__":
    unittest.main()
