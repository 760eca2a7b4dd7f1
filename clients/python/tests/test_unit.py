"""Parts of the client that need no daemon: tool schemas from signatures,
results as JSON, requests from options, the interpreter's generated code."""

import dataclasses
import enum
import sys
import typing
import unittest
from typing import Any, Dict, List, Literal, Optional, Tuple, Union

import support  # noqa: F401 - puts the package on sys.path

import cellblock_client as cb
from cellblock_client import _interpreter, _tools, _types


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass
class Point:
    x: int
    y: int = 0


class Movie(typing.TypedDict):
    title: str
    year: int


def documented(query: str, limit: int = 10, tags: Optional[List[str]] = None, *, mode: Literal["a", "b"] = "a",
               color: Color = Color.RED, where: Point = None, extra: Dict[str, float] = None) -> list:
    """Search the catalogue.

    Args:
        query: what to look for,
            over two lines
        limit: how many results
    """
    return []


class TestSchemas(unittest.TestCase):
    def test_signature_and_hints(self):
        spec = _tools.ToolSpec("search", documented)
        d = spec.declaration()
        self.assertEqual(d["name"], "search")
        self.assertTrue(d["description"].startswith("Search the catalogue."))
        s = d["input_schema"]
        self.assertEqual(s["type"], "object")
        self.assertEqual(s["required"], ["query"])
        self.assertIs(s["additionalProperties"], False)
        p = s["properties"]
        self.assertEqual(p["query"], {"type": "string", "description": "what to look for, over two lines"})
        self.assertEqual(p["limit"], {"type": "integer", "description": "how many results", "default": 10})
        self.assertEqual(p["tags"]["anyOf"], [{"type": "array", "items": {"type": "string"}}, {"type": "null"}])
        self.assertEqual(p["mode"], {"enum": ["a", "b"], "default": "a"})
        self.assertEqual(p["color"], {"enum": ["red", "blue"]})
        self.assertEqual(p["where"]["anyOf"][0], {"type": "object", "properties": {"x": {"type": "integer"},
                                                                                  "y": {"type": "integer"}},
                                                 "required": ["x"]})
        self.assertEqual(p["extra"]["anyOf"][0], {"type": "object", "additionalProperties": {"type": "number"}})

    def test_types(self):
        f = _tools.schema_for
        self.assertEqual(f(bool), {"type": "boolean"})
        self.assertEqual(f(float), {"type": "number"})
        self.assertEqual(f(None), {"type": "null"})
        self.assertEqual(f(Any), {})
        self.assertEqual(f(Tuple[int, str]), {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}],
                                              "minItems": 2, "maxItems": 2})
        self.assertEqual(f(Tuple[int, ...]), {"type": "array", "items": {"type": "integer"}})
        self.assertEqual(f(Union[int, str]), {"anyOf": [{"type": "integer"}, {"type": "string"}]})
        self.assertEqual(f(Movie), {"type": "object", "properties": {"title": {"type": "string"},
                                                                     "year": {"type": "integer"}},
                                    "required": ["title", "year"]})
        self.assertEqual(f(typing.Set[int]), {"type": "array", "items": {"type": "integer"}})
        self.assertEqual(f(object), {})
        if sys.version_info >= (3, 10):
            self.assertEqual(f(eval("int | None")), {"anyOf": [{"type": "integer"}, {"type": "null"}]})

    def test_kinds_of_callables(self):
        def kw(**kwargs):
            pass
        self.assertNotIn("additionalProperties", _tools.ToolSpec("kw", kw).input_schema)

        def pos(a, /, b, *args):
            pass
        spec = _tools.ToolSpec("pos", pos)
        self.assertEqual(spec.arguments({"a": 1, "b": 2}), ([1], {"b": 2}))
        self.assertEqual(spec.input_schema["required"], ["a", "b"])

        class Callable:
            """A class's docstring is not the call's."""

            def __call__(self, x: int) -> int:
                return x
        spec = _tools.ToolSpec("c", Callable())
        self.assertEqual(spec.input_schema["properties"], {"x": {"type": "integer"}})
        self.assertEqual(spec.description, "")
        spec = _tools.ToolSpec("m", "abc".startswith)  # a builtin: no signature to read, perhaps
        self.assertEqual(spec.input_schema["type"], "object")
        lax = _tools.ToolSpec("d", documented, strict=False).input_schema["properties"]
        self.assertNotIn("type", lax["query"])

    def test_names(self):
        for bad in ("", "_x", "1x", "class", "a-b", "x" * 129, "é"):
            with self.assertRaises(ValueError):
                _tools.ToolSpec(bad, documented)
        self.assertTrue(_tools.valid_name("search_2"))


class TestJSON(unittest.TestCase):
    def test_jsonable(self):
        j = _tools.jsonable
        self.assertEqual(j({"a": (1, {2, 1}), 3: Color.RED, "p": Point(1)}), {"a": [1, [1, 2]], "3": "red",
                                                                               "p": {"x": 1, "y": 0}})
        for bad in (object(), float("inf"), {(1, 2): 1}, b"bytes"):
            with self.assertRaises(_tools.NotJSON):
                j(bad)

    def test_answers(self):
        self.assertEqual(_tools.answer_for("t", [1], False), {"result": [1]})
        self.assertEqual(_tools.answer_for("t", ValueError("v"), True), {"error": "ValueError: v"})
        self.assertEqual(_tools.answer_for("t", KeyError(), True), {"error": "KeyError"})
        self.assertTrue(_tools.answer_for("t", object(), False)["error"].startswith("tool t returned a object"))
        self.assertTrue(_tools.answer_for("t", object(), False, fallback_str=True)["result"].startswith("<object"))
        long = _tools.answer_for("t", ValueError("é" * 5000), True)["error"]
        self.assertLessEqual(len(long.encode()), _tools.MAX_ERROR)


class TestTypes(unittest.TestCase):
    def test_sizes_and_times(self):
        self.assertEqual(_types.parse_size("128M"), 128 << 20)
        self.assertEqual(_types.parse_size("1.5G"), 3 << 29)
        self.assertEqual(_types.parse_size("512MiB"), 512 << 20)
        self.assertEqual(_types.parse_size(1000), 1000)
        for bad in ("12Q", "-1", "", True):
            with self.assertRaises((ValueError, TypeError)):
                _types.parse_size(bad)
        self.assertEqual(_types.to_millis(0.0001), 1)
        self.assertEqual(_types.to_millis(2), 2000)
        with self.assertRaises(ValueError):
            _types.to_millis(-1)

    def test_requests(self):
        req = _types.run_fields("x", cell=True, inputs={"a": 1}, files={"t.txt": "é", "b.bin": b"\x00"}, timeout=1.5,
                                tool_timeout=2)
        self.assertEqual(req["mode"], "cell")
        self.assertEqual(req["timeout_ms"], 1500)
        self.assertEqual(req["tool_limits"], {"timeout_ms": 2000})
        self.assertEqual(req["files"], [{"path": "t.txt", "content": "é"},
                                        {"path": "b.bin", "content": "AA==", "encoding": "base64"}])
        jail = _types.jail_fields(python="3.11", with_="requests", memory="1G", allow_net=["a:443"], secrets="TOKEN",
                                  env={"K": "V"})
        self.assertEqual(jail, {"python": "3.11", "dependencies": ["requests"], "memory_bytes": 1 << 30,
                                "network": {"allow": ["a:443"]}, "secrets": ["TOKEN"], "env": {"K": "V"}})
        self.assertEqual(_types.run_fields("x"), {"code": "x"})

    def test_result_from_json(self):
        r = cb.Result.from_json({
            "exit_code": 1, "stdout": "o", "error": None, "value": {"type": "NoneType", "repr": "None", "json": None},
            "exception": {"type": "E", "message": "m", "traceback": "t", "line": None},
            "session": {"id": "s", "execution_count": 2, "state": "alive",
                        "expires_at": "2026-11-26T17:53:12.23715898Z"},
            "tool_calls": [{"name": "t", "duration_ms": 3, "ok": True, "outcome": "ok"}],
            "denials": [{"kind": "syscall", "detail": "ptrace", "count": 1}],
            "files": [{"path": "a", "size": 1, "sha256": "00", "mime": "text/plain"}],
            "a_new_field": [1]})
        self.assertTrue(r.value.has_json)
        self.assertIsNone(r.value.json)
        self.assertEqual(r.session.expires_at.microsecond, 237158)
        self.assertEqual(r.denials[0].detail, "ptrace")
        self.assertEqual(r.a_new_field, [1])
        self.assertFalse(r.ok)
        with self.assertRaises(AttributeError):
            r.not_there


class TestInterpreterCode(unittest.TestCase):
    """The code the Interpreter defines in the session compiles and calls
    tools with the tool's own parameters."""

    def test_tool_function(self):
        def tool(a, /, b: int, c: str = "x", *args, d=object(), **more):
            """Doc."""
        src = _interpreter._tool_function("tool", tool)
        calls = []
        ns = {"_cellblock_call": lambda name, args: calls.append((name, args)) or "ok",
              "_cellblock_absent": object()}
        exec(compile(_interpreter._BASE_PRELUDE.split("import cellblock")[0] + src, "<t>", "exec"), ns)
        self.assertEqual(ns["tool"](1, 2, e=5), "ok")
        self.assertEqual(ns["tool"](1, b=3, c="y"), "ok")
        self.assertEqual(calls, [("tool", {"a": 1, "b": 2, "c": "x", "e": 5}), ("tool", {"a": 1, "b": 3, "c": "y"})])
        self.assertEqual(ns["tool"].__doc__, "Doc.")

    def test_submit_function(self):
        src = _interpreter._submit_function([{"name": "answer", "type": "str"}, {"name": "n", "type": "int"},
                                             {"name": "bad name"}])
        got = []
        ns = {"_cellblock_submit": got.append}
        exec(src, ns)
        ns["SUBMIT"]("a", n=2)
        self.assertEqual(got, [{"answer": "a", "n": 2}])
        exec(_interpreter._submit_function(None), ns)
        ns["SUBMIT"](5)
        self.assertEqual(got[-1], {"output": 5})

    def test_prelude_compiles(self):
        it = _interpreter.Interpreter(tools={"f": lambda x: x}, output_fields=[{"name": "a"}], socket="/nonexistent")
        compile(it._make_prelude(), "<prelude>", "exec")

    def test_network_patterns(self):
        self.assertEqual(_interpreter._network(["api.example.org", "h:8080", "[::1]:443", "[::1]", " "]),
                         ["api.example.org:443", "api.example.org:80", "h:8080", "[::1]:443", "[::1]:443",
                          "[::1]:80"])


if __name__ == "__main__":
    unittest.main()
