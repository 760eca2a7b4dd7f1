"""Python callables as the tools of a run: their declarations, derived from
signatures and type hints, and the carrying out of one call.

A tool is declared to the daemon as {"name", "description",
"input_schema"}. The schema is a JSON Schema object made from the
callable's parameters: each named parameter is a property (required when
it has no default), typed from its annotation as far as JSON can say it
(str, int, float, bool, None, lists, tuples, sets, dicts, Optional and
Union, Literal, Enum, TypedDict and dataclasses); **kwargs allows other
properties, without it they are refused by the daemon before the caller
hears of the call. The description is the docstring; a Google-style
"Args:" section also describes each property.

A call arrives as a JSON object of arguments. call() passes positional-only
parameters by position and the rest by keyword, runs a coroutine function
to its end, and turns the outcome into the answer: the result as JSON, or
the error text the code's cellblock.ToolError carries.
"""

from __future__ import annotations

import asyncio
import collections.abc
import dataclasses
import enum
import functools
import inspect
import json
import math
import re
import types
import typing
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

__all__ = ["ToolSpec", "tool_specs", "schema_for", "jsonable", "NotJSON", "answer_for", "MAX_ERROR"]

# The daemon keeps at most this many bytes of a failed call's message.
MAX_ERROR = 4096

_KEYWORDS = frozenset((
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in",
    "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while", "with", "yield"))
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


def valid_name(name: Any) -> bool:
    """A name the daemon takes for a tool: an ASCII identifier of at most
    128 characters that starts with a letter and is no Python keyword."""
    return isinstance(name, str) and len(name) <= 128 and bool(_NAME.match(name)) and name not in _KEYWORDS


class ToolSpec:
    """One tool: its name, the callable and what the daemon is told of it."""

    __slots__ = ("name", "func", "invoke", "description", "input_schema", "_positional", "_var_keyword")

    def __init__(self, name: str, func: Callable[..., Any], *, strict: bool = True,
                 invoke: Optional[Callable[[Dict[str, Any]], Any]] = None) -> None:
        """strict: type the arguments from the hints (else only their
        names). invoke, when given, carries out a call with its arguments
        as a dict instead of func."""
        if not valid_name(name):
            raise ValueError("tools: %r is not a tool name: an ASCII identifier that starts with a letter and is "
                             "no Python keyword (the code calls tools.NAME)" % (name,))
        if not callable(func):
            raise TypeError("tools[%r] must be callable, not %s" % (name, type(func).__name__))
        self.name = name
        self.func = func
        self.invoke = invoke
        self.description, self.input_schema, self._positional, self._var_keyword = _declare(func, strict)

    def declaration(self) -> Dict[str, Any]:
        """The tool as the run request declares it."""
        d: Dict[str, Any] = {"name": self.name, "input_schema": self.input_schema}
        if self.description:
            d["description"] = self.description
        return d

    def arguments(self, args: Mapping[str, Any]) -> Tuple[List[Any], Dict[str, Any]]:
        """The positional and keyword arguments of a call whose JSON
        arguments are args."""
        kwargs = dict(args)
        positional = []
        for name in self._positional:
            if name not in kwargs:
                break
            positional.append(kwargs.pop(name))
        return positional, kwargs


def tool_specs(tools: Optional[Mapping[str, Callable[..., Any]]]) -> Dict[str, ToolSpec]:
    """ToolSpecs of {name: callable}, checked."""
    if not tools:
        return {}
    if not isinstance(tools, collections.abc.Mapping):
        raise TypeError("tools must be a dict of name to callable, not %s" % type(tools).__name__)
    return {name: ToolSpec(name, func) for name, func in tools.items()}


def _signature(func: Callable[..., Any]) -> Optional[inspect.Signature]:
    try:
        return inspect.signature(func)
    except (TypeError, ValueError):
        return None


def _hints(func: Callable[..., Any]) -> Dict[str, Any]:
    """The callable's type hints, resolved; {} when they cannot be (a
    string annotation that does not evaluate on this Python)."""
    target = func
    if not (inspect.isfunction(target) or inspect.ismethod(target)):
        target = getattr(func, "__call__", func)
    while isinstance(target, functools.partial):
        target = target.func
    try:
        return typing.get_type_hints(target)
    except Exception:
        return {}


def _declare(func: Callable[..., Any], strict: bool = True) -> Tuple[str, Dict[str, Any], List[str], bool]:
    """(description, input schema, names of positional-only parameters,
    whether it takes **kwargs) of a callable."""
    doc = inspect.getdoc(func) or ""
    if doc and inspect.getdoc(type(func)) == doc and not (inspect.isroutine(func) or isinstance(func, type)):
        doc = ""  # a callable object's class docstring says nothing of this call
    summary, arg_docs = _split_doc(doc)
    sig = _signature(func)
    if sig is None:
        return summary, {"type": "object"}, [], True
    hints = _hints(func)
    props: Dict[str, Any] = {}
    required: List[str] = []
    positional: List[str] = []
    var_keyword = False
    for name, p in sig.parameters.items():
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            continue
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            var_keyword = True
            continue
        if p.kind is inspect.Parameter.POSITIONAL_ONLY:
            positional.append(name)
        ann = hints.get(name, p.annotation)
        s = schema_for(ann) if strict and ann is not inspect.Parameter.empty else {}
        if p.default is None and s and not _allows_null(s):
            s = {"anyOf": [s, {"type": "null"}]}  # def f(x: str = None)
        if name in arg_docs:
            s = dict(s, description=arg_docs[name])
        if p.default is inspect.Parameter.empty:
            required.append(name)
        else:
            try:
                json.dumps(p.default, allow_nan=False)
                s = dict(s, default=p.default)
            except (TypeError, ValueError):
                pass
        props[name] = s
    schema: Dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    if not var_keyword:
        schema["additionalProperties"] = False
    return summary, schema, positional, var_keyword


def _allows_null(s: Dict[str, Any]) -> bool:
    return s.get("type") == "null" or any(isinstance(a, dict) and _allows_null(a) for a in s.get("anyOf", []))


_ARGS_HEADER = re.compile(r"^(Args|Arguments|Parameters|Params):\s*$")
_ARG_LINE = re.compile(r"^\s+\*{0,2}([A-Za-z_][A-Za-z0-9_]*)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def _split_doc(doc: str) -> Tuple[str, Dict[str, str]]:
    """The docstring as the tool's description, and per-parameter
    descriptions from a Google-style "Args:" section (left in the
    description too)."""
    args: Dict[str, str] = {}
    lines = doc.splitlines()
    i = 0
    while i < len(lines):
        if _ARGS_HEADER.match(lines[i].strip()) and lines[i] == lines[i].lstrip():
            i += 1
            current = None
            while i < len(lines) and (not lines[i].strip() or lines[i][:1].isspace()):
                m = _ARG_LINE.match(lines[i])
                indent = len(lines[i]) - len(lines[i].lstrip())
                if m and (current is None or indent <= current[1]):
                    current = (m.group(1), indent)
                    args[m.group(1)] = m.group(2).strip()
                elif current is not None and lines[i].strip():
                    args[current[0]] = (args[current[0]] + " " + lines[i].strip()).strip()
                i += 1
            continue
        i += 1
    return doc.strip(), args


def schema_for(tp: Any, _depth: int = 0) -> Dict[str, Any]:
    """The JSON Schema of values of type tp, as far as JSON can say it;
    {} (anything) for what it cannot."""
    if _depth > 16 or tp is Any or tp is inspect.Parameter.empty:
        return {}
    if tp is None or tp is type(None):
        return {"type": "null"}
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer"}
    if tp is float:
        return {"type": "number"}
    if tp is str:
        return {"type": "string"}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        values = [m.value for m in tp]
        if all(isinstance(v, (str, int, float, bool)) or v is None for v in values):
            return {"enum": values}
        return {}
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union or (_UnionType is not None and origin is _UnionType):
        return {"anyOf": [schema_for(a, _depth + 1) for a in args]}
    if origin is typing.Literal:
        if all(isinstance(v, (str, int, float, bool)) or v is None for v in args):
            return {"enum": list(args)}
        return {}
    if _is_annotated(tp):
        return schema_for(args[0], _depth + 1) if args else {}
    if tp in (list, set, frozenset) or origin in (list, set, frozenset, collections.abc.Sequence,
                                                    collections.abc.Set, collections.abc.MutableSequence,
                                                    collections.abc.Iterable, collections.abc.Collection):
        s: Dict[str, Any] = {"type": "array"}
        if args:
            s["items"] = schema_for(args[0], _depth + 1)
        return s
    if tp is tuple or origin is tuple:
        if args and args[-1] is Ellipsis:
            return {"type": "array", "items": schema_for(args[0], _depth + 1)}
        if args and args != ((),):
            return {"type": "array", "prefixItems": [schema_for(a, _depth + 1) for a in args],
                    "minItems": len(args), "maxItems": len(args)}
        return {"type": "array"}
    if tp is dict or origin in (dict, collections.abc.Mapping, collections.abc.MutableMapping):
        s = {"type": "object"}
        if len(args) == 2:
            s["additionalProperties"] = schema_for(args[1], _depth + 1)
        return s
    if _is_typeddict(tp):
        hints = _safe_hints(tp)
        req = getattr(tp, "__required_keys__", set(hints))
        s = {"type": "object", "properties": {k: schema_for(v, _depth + 1) for k, v in hints.items()}}
        if req:
            s["required"] = [k for k in hints if k in req]
        return s
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        hints = _safe_hints(tp)
        fields = dataclasses.fields(tp)
        s = {"type": "object", "properties": {f.name: schema_for(hints.get(f.name, Any), _depth + 1) for f in fields}}
        req = [f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        if req:
            s["required"] = req
        return s
    if tp is bytes:
        return {"type": "string"}
    return {}


def _is_annotated(tp: Any) -> bool:
    return type(tp).__name__ == "_AnnotatedAlias"


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__annotations__") and hasattr(tp, "__total__")


def _safe_hints(tp: Any) -> Dict[str, Any]:
    try:
        return typing.get_type_hints(tp)
    except Exception:
        return dict(getattr(tp, "__annotations__", {}))


# X | Y (3.10 on).
_UnionType = getattr(types, "UnionType", None)


class NotJSON(TypeError):
    """A tool's result that has no JSON form."""


def jsonable(v: Any, _depth: int = 0) -> Any:
    """v as JSON data: dicts (with string keys), lists, strings, finite
    numbers, booleans and None as they are; tuples, sets and other
    sequences as lists; dataclasses, named tuples and objects with
    model_dump() (pydantic) or _asdict() as objects; enums as their value.
    Anything else raises NotJSON."""
    if _depth > 100:
        raise NotJSON("it nests more than 100 deep")
    if v is None or isinstance(v, (str, bool)):
        return v
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            raise NotJSON("%r is not a number JSON has" % v)
        return float(v)
    if isinstance(v, enum.Enum):
        return jsonable(v.value, _depth + 1)
    if isinstance(v, dict) or isinstance(v, collections.abc.Mapping):
        out = {}
        for k, x in v.items():
            if isinstance(k, enum.Enum):
                k = k.value
            if isinstance(k, (int, float, bool)) or k is None:
                k = json.dumps(k)
            if not isinstance(k, str):
                raise NotJSON("a key of type %s is not a JSON object key" % type(k).__name__)
            out[k] = jsonable(x, _depth + 1)
        return out
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return jsonable({f.name: getattr(v, f.name) for f in dataclasses.fields(v)}, _depth + 1)
    if isinstance(v, tuple) and hasattr(v, "_asdict"):
        return jsonable(v._asdict(), _depth + 1)
    if isinstance(v, (list, tuple, set, frozenset, collections.abc.Sequence)) and not isinstance(v, (bytes, bytearray)):
        items = list(v)
        if isinstance(v, (set, frozenset)):
            try:
                items = sorted(items)
            except TypeError:
                pass
        return [jsonable(x, _depth + 1) for x in items]
    dump = getattr(v, "model_dump", None)
    if callable(dump):
        try:
            return jsonable(dump(mode="json"), _depth + 1)
        except TypeError:
            return jsonable(dump(), _depth + 1)
    asdict = getattr(v, "_asdict", None)
    if callable(asdict):
        return jsonable(asdict(), _depth + 1)
    raise NotJSON("a %s object has no JSON form" % type(v).__name__)


def call(spec: ToolSpec, arguments: Any) -> Any:
    """Carry out one call of spec with its JSON arguments and return what
    the callable returned (a coroutine function's, awaited)."""
    if not isinstance(arguments, dict):
        arguments = {}
    if spec.invoke is not None:
        out = spec.invoke(arguments)
        return _await(out) if inspect.isawaitable(out) else out
    args, kwargs = spec.arguments(arguments)
    out = spec.func(*args, **kwargs)
    if inspect.isawaitable(out):
        out = _await(out)
    return out


def _await(aw: Any) -> Any:
    async def wait() -> Any:
        return await aw
    return asyncio.run(wait())


def error_text(e: BaseException) -> str:
    """The message the code's ToolError carries for a callable's exception:
    its type and text, cut to what the daemon keeps."""
    text = "%s: %s" % (type(e).__name__, e) if str(e) else type(e).__name__
    b = text.encode("utf-8", "replace")
    if len(b) > MAX_ERROR:
        text = b[:MAX_ERROR - 3].decode("utf-8", "ignore") + "..."
    return text


def answer_for(name: str, outcome: Any, failed: bool, *, fallback_str: bool = False) -> Dict[str, Any]:
    """The body that answers a call: {"result": JSON} or {"error": text}.
    outcome is what the callable returned, or its exception when failed.
    A result with no JSON form is an error, or with fallback_str its
    str() (as DSPy's interpreter does)."""
    if failed:
        return {"error": error_text(outcome)}
    try:
        return {"result": jsonable(outcome)}
    except NotJSON as e:
        if fallback_str:
            try:
                return {"result": str(outcome)}
            except Exception as e2:  # a __str__ that raises
                return {"error": "tool %s returned a %s object whose str() failed: %s" % (
                    name, type(outcome).__name__, error_text(e2))}
        return {"error": "tool %s returned a %s object, which is not JSON: %s" % (name, type(outcome).__name__, e)}
