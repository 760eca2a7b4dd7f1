"""Interpreter satisfies DSPy's CodeInterpreter protocol as DSPy defines it
(dspy/primitives/code_interpreter.py), and takes the constructor
arguments of DSPy's PythonInterpreter (dspy/primitives/python_interpreter.py)
in their order, with their defaults, so that swapping the class is the
whole change. DSPy cannot be installed where this was written; the
protocol is restated here from its definition, and when DSPy is
importable the same checks run against DSPy's own classes, with a real
dspy.RLM step on a fake LM."""

import inspect
import typing
import unittest

from support import require_daemon, socket

import cellblock_client as cb
from cellblock_client import Interpreter


@typing.runtime_checkable
class CodeInterpreter(typing.Protocol):
    """DSPy's protocol, restated: a tools property (a dict of callables),
    start(), execute(code, variables=None) and shutdown()."""

    @property
    def tools(self) -> typing.Dict[str, typing.Callable[..., typing.Any]]: ...

    def start(self) -> None: ...

    def execute(self, code: str, variables: typing.Optional[typing.Dict[str, typing.Any]] = None) -> typing.Any: ...

    def shutdown(self) -> None: ...


# dspy.PythonInterpreter.__init__'s parameters, in order, with defaults.
PYTHON_INTERPRETER_PARAMS = [
    ("deno_command", None), ("enable_read_paths", None), ("enable_write_paths", None), ("enable_env_vars", None),
    ("enable_network_access", None), ("sync_files", True), ("tools", None), ("output_fields", None),
    ("callbacks", None),
]


def _dspy():
    try:
        import dspy  # noqa: F401
        return dspy
    except ImportError:
        return None


class TestProtocol(unittest.TestCase):
    def test_runtime_protocol(self):
        interp = Interpreter(socket="/nonexistent.sock")  # makes nothing until start()
        self.assertIsInstance(interp, CodeInterpreter)
        self.assertEqual(interp.tools, {})

    def test_signatures(self):
        def params(f):
            return [(p.name, p.kind, p.default) for p in inspect.signature(f).parameters.values()]
        P = inspect.Parameter
        self.assertEqual(params(Interpreter.start), [("self", P.POSITIONAL_OR_KEYWORD, P.empty)])
        self.assertEqual(params(Interpreter.shutdown), [("self", P.POSITIONAL_OR_KEYWORD, P.empty)])
        for f in (Interpreter.execute, Interpreter.__call__):
            self.assertEqual(params(f), [("self", P.POSITIONAL_OR_KEYWORD, P.empty),
                                         ("code", P.POSITIONAL_OR_KEYWORD, P.empty),
                                         ("variables", P.POSITIONAL_OR_KEYWORD, None)])
        self.assertEqual(params(Interpreter.invoke_tool)[1:], [("tool_name", P.POSITIONAL_OR_KEYWORD, P.empty),
                                                               ("kwargs", P.POSITIONAL_OR_KEYWORD, P.empty)])
        self.assertIsInstance(inspect.getattr_static(Interpreter, "tools"), property)
        got = [(p.name, p.default) for p in inspect.signature(Interpreter.__init__).parameters.values()
               if p.kind is P.POSITIONAL_OR_KEYWORD][1:]
        self.assertEqual(got, PYTHON_INTERPRETER_PARAMS)
        self.assertTrue(hasattr(Interpreter, "__enter__") and hasattr(Interpreter, "__exit__"))
        # Class metadata, as RLM reads it from its interpreter_factory.
        self.assertIsInstance(Interpreter.execution_instructions, str)
        self.assertIsInstance(Interpreter(socket="/x").execution_instructions, str)

    def test_constructor_like_python_interpreter(self):
        tools = {"f": lambda x: x}
        interp = Interpreter(None, ["a.txt"], ["b.txt"], ["HOME"], ["example.org"], False, tools,
                             [{"name": "answer", "type": "str"}], [], socket="/x")
        self.assertEqual(interp.enable_read_paths, ["a.txt"])
        self.assertEqual(interp.enable_write_paths, ["b.txt"])
        self.assertEqual(interp.enable_env_vars, ["HOME"])
        self.assertEqual(interp.enable_network_access, ["example.org"])
        self.assertFalse(interp.sync_files)
        self.assertEqual(interp.tools, tools)
        self.assertIsNot(interp.tools, tools)  # a copy, as DSPy's
        interp.tools.update({"g": len})  # RLM updates the dict in place
        self.assertIn("g", interp.tools)
        self.assertEqual(interp.output_fields, [{"name": "answer", "type": "str"}])
        with self.assertRaises(TypeError):
            Interpreter(deno_command={"not": "a list"})

    def test_final_output(self):
        FinalOutput = cb.FinalOutput
        self.assertEqual(FinalOutput({"a": 1}).output, {"a": 1})
        self.assertEqual(FinalOutput(1), FinalOutput(1))
        self.assertNotEqual(FinalOutput(1), FinalOutput(2))

    def test_dspy_own_protocol_and_classes(self):
        dspy = _dspy()
        if dspy is None:
            self.skipTest("DSPy is not importable here (it cannot be installed without network)")
        from dspy.primitives import code_interpreter as ci
        self.assertIsInstance(Interpreter(socket="/x"), ci.CodeInterpreter)
        ci._validate_interpreter_factory(Interpreter)
        self.assertIs(cb.FinalOutput, ci.FinalOutput)
        self.assertIs(cb.CodeExecutionError, ci.CodeExecutionError)
        self.assertIs(cb.CodeInterpreterError, ci.CodeInterpreterError)

    def test_dspy_rlm_step_with_a_fake_lm(self):
        dspy = _dspy()
        if dspy is None:
            self.skipTest("DSPy is not importable here (it cannot be installed without network)")
        require_daemon(self)
        from dspy.utils.dummies import DummyLM
        lm = DummyLM([
            {"reasoning": "Look at the data", "code": "x = len(context)\nprint(f'x = {x}')"},
            {"reasoning": "Answer", "code": "SUBMIT(x * 2)"},
        ])
        with dspy.context(lm=lm):
            rlm = dspy.RLM("context -> answer: int", max_iters=4,
                           interpreter_factory=lambda: Interpreter(socket=socket()))
            result = rlm(context="abcde")
        self.assertEqual(result.answer, 10)
        self.assertEqual(len(result.trajectory), 2)


if __name__ == "__main__":
    unittest.main()
