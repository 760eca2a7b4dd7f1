"""Interpreter against the real daemon, driven as DSPy's RLM drives its
interpreter: tools injected into .tools and output_fields set after it is
made, the inputs passed as variables on every step, errors caught and
shown to the model, SUBMIT ending the loop, shutdown."""

import os
import shutil
import tempfile
import unittest

from support import DaemonTest, socket

import cellblock_client as cb
from cellblock_client import CodeExecutionError, CodeInterpreterError, FinalOutput, Interpreter


class RLMStyleLoop:
    """The steps of dspy.RLM.forward with a scripted model: the
    interpreter's tools are updated in place, output_fields set and
    _tools_registered reset (RLM's _inject_execution_context), every step
    executes with the inputs as variables, CodeExecutionError and
    SyntaxError become "[Error] ..." history, a FinalOutput ends it."""

    def __init__(self, interpreter, tools, output_fields):
        self.interp = interpreter
        self.interp.tools.update(tools)
        if hasattr(self.interp, "output_fields"):
            self.interp.output_fields = output_fields
        if hasattr(self.interp, "_tools_registered"):
            self.interp._tools_registered = False

    def forward(self, steps, **inputs):
        history = []
        self.interp.start()
        for code in steps:
            try:
                result = self.interp.execute(code, variables=dict(inputs))
            except (CodeExecutionError, SyntaxError) as e:
                history.append("[Error] " + str(e))
                continue
            if isinstance(result, FinalOutput):
                return result.output, history
            history.append(str(result) if result else "(no output - did you forget to print?)")
        return None, history


class TestRLMLoop(DaemonTest):
    def test_multi_step_loop(self):
        queries = []

        def llm_query(prompt: str) -> str:
            """Ask a sub-model."""
            queries.append(prompt)
            return "summary of " + prompt[:10]

        def search(query: str, k: int = 2) -> list:
            return ["doc%d:%s" % (i, query) for i in range(k)]

        interp = Interpreter(client=self.client, timeout=20)
        self.assertEqual(interp.tools, {})
        loop = RLMStyleLoop(interp, {"llm_query": llm_query, "search": search},
                            [{"name": "answer", "type": "str"}, {"name": "count", "type": "int"}])
        steps = [
            # variables in; stdout out
            "print(len(context), question)",
            # a tool call, by name, positional and keyword
            "hits = search(question)\nsummary = llm_query(prompt=context[:40])\nprint(hits, summary)",
            # an error in the code
            "print(undefined_name)",
            # a recovery: the state before the error is there
            "print(len(hits))",
            # a syntax error
            "for x in hits print(x)",
            # the final expression's value, as DSPy returns it
            "len(hits) + 40",
            # SUBMIT, positional and keyword
            "SUBMIT(summary, count=len(hits))",
            "print('never reached')",
        ]
        try:
            output, history = loop.forward(steps, context="the long context " * 100, question="what?")
        finally:
            interp.shutdown()
        context = "the long context " * 100
        self.assertEqual(output, {"answer": "summary of " + context[:10], "count": 2})
        self.assertEqual(history[0], "1700 what?\n")
        self.assertEqual(history[1], "['doc0:what?', 'doc1:what?'] summary of %s\n" % context[:10])
        self.assertTrue(history[2].startswith("[Error] Traceback"), history[2])
        self.assertIn("NameError: name 'undefined_name' is not defined", history[2])
        self.assertEqual(history[3], "2\n")
        self.assertTrue(history[4].startswith("[Error] Invalid Python syntax. message: "), history[4])
        self.assertEqual(history[5], "42")
        self.assertEqual(len(history), 6)
        self.assertEqual(queries, [context[:40]])
        with self.assertRaises(CodeInterpreterError):
            interp.execute("print(1)")
        with self.assertRaises(CodeInterpreterError):
            interp.start()

    def test_errors_are_the_right_classes(self):
        with Interpreter(client=self.client) as interp:
            with self.assertRaises(CodeExecutionError) as cm:
                interp.execute("raise ValueError('bad value')")
            self.assertIsInstance(cm.exception, CodeInterpreterError)
            self.assertIsInstance(cm.exception, RuntimeError)
            self.assertIn("ValueError: bad value", str(cm.exception))
            with self.assertRaises(SyntaxError) as cm2:
                interp.execute("def f(:\n  pass")
            self.assertEqual(cm2.exception.lineno, 1)
            with self.assertRaises(IndentationError):
                interp.execute("if True:\nprint(1)")
            self.assertIsNone(interp.execute("x = 1"))
            self.assertEqual(interp("print(x)"), "1\n")
            with self.assertRaises(CodeInterpreterError) as cm3:
                interp.execute("1", variables={"json": 1})
            self.assertNotIsInstance(cm3.exception, CodeExecutionError)
            with self.assertRaises(CodeInterpreterError):
                interp.execute("1", variables={"not an identifier": 1})

    def test_tool_errors_and_non_json(self):
        def failing(x: int) -> int:
            raise ValueError("cannot %d" % x)

        def odd() -> object:
            return object()

        with Interpreter(tools={"failing": failing, "odd": odd}, client=self.client) as interp:
            out = interp.execute("try:\n    failing(3)\nexcept RuntimeError as e:\n    print(type(e).__name__, e)\n"
                                 "print(odd().startswith('<object object'))")
            self.assertEqual(out, "ToolError ValueError: cannot 3\nTrue\n")
            with self.assertRaises(CodeExecutionError) as cm:
                interp.execute("failing(4)")
            self.assertIn("ToolError: ValueError: cannot 4", str(cm.exception))

    def test_state_timeout_and_lost_session(self):
        with Interpreter(client=self.client, timeout=1) as interp:
            interp.execute("kept = 'yes'")
            with self.assertRaises(CodeExecutionError) as cm:
                interp.execute("import time\ntime.sleep(30)")
            self.assertIn("TimeoutError", str(cm.exception))
            self.assertEqual(interp.execute("print(kept)"), "yes\n")
            with self.assertRaises(CodeInterpreterError) as cm:
                interp.execute("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
            self.assertNotIsInstance(cm.exception, CodeExecutionError)
            # Final for the instance: state was lost.
            with self.assertRaises(CodeInterpreterError):
                interp.execute("print(kept)")

    def test_variables_large_and_inexact(self):
        with Interpreter(client=self.client) as interp:
            big = "x" * (3 << 20)
            out = interp.execute("print(len(big), m[1], m['k'], s, t, n)",
                                 variables={"big": big, "m": {1: float("inf"), "k": None}, "s": {3, 1, 2},
                                            "t": (1, 2), "n": -0.5})
            self.assertEqual(out, "3145728 inf None [1, 2, 3] [1, 2] -0.5\n")
            # Injected again at every step, as DSPy does: the code's change
            # to it does not stay.
            interp.execute("big = 'changed'", variables={"big": big})
            self.assertEqual(interp.execute("print(len(big))", variables={"big": big}), "3145728\n")
            with self.assertRaises(CodeInterpreterError):
                interp.execute("1", variables={"o": object()})

    def test_recursion_from_a_tool_is_refused(self):
        interp = Interpreter(client=self.client)

        def again() -> str:
            try:
                interp.execute("1")
            except CodeInterpreterError as e:
                return "refused: " + str(e)
            return "ran"

        interp.tools["again"] = again
        with interp:
            self.assertTrue(interp.execute("print(again())").startswith("refused: "))

    def test_files_env_and_network(self):
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        read = os.path.join(tmp, "input.csv")
        with open(read, "w") as f:
            f.write("a,b\n1,2\n")
        read_dir = os.path.join(tmp, "docs")
        os.makedirs(os.path.join(read_dir, "sub"))
        with open(os.path.join(read_dir, "sub", "n.txt"), "w") as f:
            f.write("nested")
        write = os.path.join(tmp, "result.txt")  # does not exist yet: made empty, as DSPy does
        write_dir = os.path.join(tmp, "outdir")
        os.makedirs(write_dir)
        os.environ["DSPY_TEST_VISIBLE"] = "seen"
        self.addCleanup(os.environ.pop, "DSPY_TEST_VISIBLE", None)
        interp = Interpreter(enable_read_paths=[read, read_dir], enable_write_paths=[write, write_dir],
                             enable_env_vars=["DSPY_TEST_VISIBLE", "NOT_SET_ANYWHERE"], client=self.client)
        with interp:
            out = interp.execute("import os\nprint(open('/work/input.csv').read().splitlines()[1], "
                                 "open('docs/sub/n.txt').read(), os.environ.get('DSPY_TEST_VISIBLE'), "
                                 "'NOT_SET_ANYWHERE' in os.environ, repr(open('result.txt').read()))")
            self.assertEqual(out, "1,2 nested seen False ''\n")
            interp.execute("open('/work/result.txt', 'w').write('written in the sandbox')\n"
                           "os.makedirs('outdir/deep', exist_ok=True)\nopen('outdir/deep/f.txt', 'w').write('F')\n"
                           "open('input.csv', 'w').write('changed')")
            with open(write) as f:
                self.assertEqual(f.read(), "written in the sandbox")
            with open(os.path.join(write_dir, "deep", "f.txt")) as f:
                self.assertEqual(f.read(), "F")
            with open(read) as f:
                self.assertEqual(f.read(), "a,b\n1,2\n")  # read paths are not written back
            text = interp.execution_instructions
            for want in ("/work/input.csv", "/work/result.txt", "written back", "DSPY_TEST_VISIBLE",
                         "no network", "SUBMIT(output)", interp._python_version):
                self.assertIn(want, text)
        with self.assertRaises(CodeInterpreterError):
            Interpreter(enable_read_paths=[read, os.path.join(tmp, "other", "input.csv")])

    def test_tools_and_output_fields_change_between_runs(self):
        with Interpreter(client=self.client) as interp:
            self.assertEqual(interp.execute("SUBMIT('plain')"), FinalOutput({"output": "plain"}))
            interp.tools["shout"] = lambda text: text.upper()
            interp.output_fields = [{"name": "a"}, {"name": "b", "type": "list"}]
            self.assertEqual(interp.execute("SUBMIT(b=[1], a=shout('x'))"), FinalOutput({"a": "X", "b": [1]}))
            self.assertEqual(interp.execute("SUBMIT({1, 2}, b=(3,))").output, {"a": [1, 2], "b": [3]})

    def test_socket_argument(self):
        with Interpreter(socket=socket()) as interp:
            self.assertEqual(interp.execute("print('via socket=')"), "via socket=\n")


class TestDSPyClasses(unittest.TestCase):
    def test_own_classes_without_dspy(self):
        try:
            import dspy  # noqa: F401
            self.skipTest("DSPy is importable: its own classes are used")
        except ImportError:
            pass
        self.assertIs(cb.FinalOutput, cb._interpreter.FinalOutput)
        self.assertEqual(cb.FinalOutput.__module__, "cellblock_client")
        self.assertTrue(issubclass(cb.CodeExecutionError, cb.CodeInterpreterError))
        self.assertTrue(issubclass(cb.CodeInterpreterError, RuntimeError))
        self.assertEqual(FinalOutput({"a": 1}), FinalOutput({"a": 1}))
        self.assertEqual(repr(FinalOutput(1)), "FinalOutput(1)")
        self.assertEqual(Interpreter.execution_instructions, cb._interpreter.GENERIC_INSTRUCTIONS)


if __name__ == "__main__":
    unittest.main()
