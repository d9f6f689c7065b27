"""Reading a model's tool-call arguments: lenient JSON parsing, then checking (and mending) against the schema.

Small models write almost-JSON: code fences, single quotes, trailing commas, Python's ``True``, a number
as a string. :func:`parse_arguments` accepts those and :func:`check_arguments` coerces what can be coerced
unambiguously (``"3"`` for a number, ``3`` for a string) and refuses the rest with a message a person
can read. Only the subset of JSON Schema that function tools use is checked: object, properties,
required, type, enum, additionalProperties.
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from bargein.tools.quoting import quoted

MAX_ARGUMENT_CHARS = 8_192
"""Longer argument strings are refused before parsing: no tool here needs more."""

_FENCE = "```"
_TRAILING_COMMA = re.compile(r",\s*([}\]])")


class ArgumentError(ValueError):
    """The arguments cannot be read or do not fit the tool's schema."""


@dataclass(frozen=True)
class CheckedArguments:
    """Arguments that fit the schema, as an object and as the JSON text sent to the client."""

    values: dict[str, Any]
    json: str
    repaired: bool
    """True when the text the model wrote had to be mended to get here."""


def parse_arguments(text: str) -> tuple[dict[str, Any], bool]:
    """The JSON object in ``text`` and whether it needed mending; raise :class:`ArgumentError` if none."""
    if len(text) > MAX_ARGUMENT_CHARS:
        raise ArgumentError(f"the arguments are {len(text)} characters long (at most {MAX_ARGUMENT_CHARS})")
    stripped = text.strip()
    if not stripped:
        return {}, stripped != text and bool(text)
    try:
        value = json.loads(stripped)
        repaired = False
    except (ValueError, TypeError, RecursionError):  # not JSON, a number past the digit limit, or nested too deep
        value = _mend(stripped)
        repaired = True
    if not isinstance(value, dict):
        raise ArgumentError(f"the arguments must be a JSON object, not {type(value).__name__}")
    try:  # NaN, Infinity, 1e999 (or a mended Python literal's set, bytes, complex) would not reach the client as JSON
        json.dumps(value, allow_nan=False)
    except (ValueError, TypeError, RecursionError):
        raise ArgumentError("the arguments hold a value JSON cannot carry (a number that is not finite, a set, "
                            "bytes, a complex number)") from None
    return value, repaired


def _unfenced(text: str) -> str:
    """``text`` (stripped) without the Markdown code fence around it, if it has one.

    Not a regular expression: the obvious one (a lazy body between optional whitespace) backtracks in cubic
    time, minutes for a fence followed by a few thousand newlines, which a looping model does write.
    """
    if len(text) < 2 * len(_FENCE) or not (text.startswith(_FENCE) and text.endswith(_FENCE)):
        return text
    body = text[len(_FENCE):-len(_FENCE)]
    return body.removeprefix("json").strip()


def _mend(text: str) -> Any:
    text = _unfenced(text)
    start = text.find("{")
    if start < 0:
        raise ArgumentError(f"no JSON object in the arguments: {quoted(text)}")
    text = _TRAILING_COMMA.sub(r"\1", _closed(text[start:]))
    try:
        return json.loads(text)
    except (ValueError, TypeError, RecursionError):
        pass
    try:  # single quotes, True/False/None: a Python literal, never evaluated as code
        return ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as error:
        raise ArgumentError(f"the arguments are not valid JSON: {quoted(text)}") from error


def _closed(text: str) -> str:
    """``text`` cut after its first complete JSON value, or with the brackets it left open closed
    (a model that ran out of tokens stops mid-object)."""
    stack: list[str] = []
    in_string = escaped = False
    for index, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
            continue
        if char == '"':
            in_string = True
        elif char in "{[":
            stack.append("}" if char == "{" else "]")
        elif char in "}]" and stack:
            stack.pop()
            if not stack:
                return text[:index + 1]
    return text + ('"' if in_string else "") + "".join(reversed(stack))


def check_arguments(text: str, schema: dict[str, Any] | None) -> CheckedArguments:
    """Parse ``text`` and fit it to ``schema`` (an object schema; ``None`` accepts any object)."""
    values, repaired = parse_arguments(text)
    if schema:
        values, coerced = _fit_object(values, schema)
        repaired = repaired or coerced
    return CheckedArguments(values, json.dumps(values, ensure_ascii=False) if repaired else text.strip() or "{}",
                            repaired)


def _fit_object(values: dict[str, Any], schema: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    properties = schema.get("properties") or {}
    missing = [name for name in schema.get("required") or [] if name not in values]
    if missing:
        raise ArgumentError(f"missing required argument(s): {', '.join(missing)}")
    fitted: dict[str, Any] = {}
    changed = False
    for name, value in values.items():
        spec = properties.get(name)
        if spec is None:
            if schema.get("additionalProperties") is False:
                changed = True  # an argument the tool does not take: dropped, visibly (repaired)
                continue
            fitted[name] = value
            continue
        fitted[name], coerced = _fit_value(name, value, spec)
        changed = changed or coerced
    return fitted, changed


_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "number": (int, float), "integer": (int,), "boolean": (bool,),
    "object": (dict,), "array": (list,), "null": (type(None),),
}


def _fit_value(name: str, value: Any, spec: dict[str, Any]) -> tuple[Any, bool]:
    wanted = spec.get("type")
    coerced = False
    if isinstance(wanted, str) and wanted in _TYPES:
        ok = isinstance(value, _TYPES[wanted]) and not (wanted in ("number", "integer") and isinstance(value, bool))
        if not ok:
            value = _coerce(name, value, wanted)
            coerced = True
    enum = spec.get("enum")
    if isinstance(enum, list) and value not in enum:
        raise ArgumentError(f"argument {name!r} must be one of {enum}, not {quoted(value)}")
    return value, coerced


def _coerce(name: str, value: Any, wanted: str) -> Any:
    if wanted == "string" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if wanted in ("number", "integer") and isinstance(value, str):
        try:
            number = float(value.strip().replace(",", ""))
        except ValueError:
            raise ArgumentError(f"argument {name!r} must be a number, not {quoted(value)}") from None
        if not math.isfinite(number):
            raise ArgumentError(f"argument {name!r} must be a finite number, not {quoted(value)}")
        if wanted == "integer":
            if not number.is_integer():
                raise ArgumentError(f"argument {name!r} must be a whole number, not {quoted(value)}")
            return int(number)
        return number
    if wanted == "integer" and isinstance(value, float) and value.is_integer():
        return int(value)
    if wanted == "boolean" and isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ArgumentError(f"argument {name!r} must be of type {wanted}, not {type(value).__name__}")
