"""A safe calculator: arithmetic expressions read with :mod:`ast`, never ``eval``.

Only numbers, the four operations, ``//``, ``%``, powers, parentheses, a few named functions and
constants are allowed; everything else is refused with a reason. Work is bounded: the expression's
length and node count, the size of exponents and of every intermediate result, so no input can
make the server compute for long or build a huge integer.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable
from typing import Any

from bargein.tools.quoting import quoted

MAX_EXPRESSION_CHARS = 200
MAX_NODES = 100
MAX_EXPONENT = 1_000
MAX_MAGNITUDE = 1e100
"""Results (and every intermediate value) beyond this are refused rather than computed."""
MAX_ROUND_DIGITS = 400
"""``round(x, digits)`` beyond this many digits either way is refused (no value here needs more)."""

Number = int | float

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_FUNCTIONS: dict[str, Callable[..., Number]] = {
    "sqrt": math.sqrt, "abs": abs, "round": round, "min": min, "max": max, "floor": math.floor,
    "ceil": math.ceil, "log": math.log, "log10": math.log10, "log2": math.log2, "exp": math.exp,
    "sin": math.sin, "cos": math.cos, "tan": math.tan, "radians": math.radians, "degrees": math.degrees,
    "factorial": math.factorial,
}
_CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
"""A comma inside a number (1,000); commas between arguments are followed by a space or not by 3 digits."""
_SPOKEN = (("×", "*"), ("÷", "/"), ("−", "-"), ("^", "**"), ("x", "*"))


class CalculationError(ValueError):
    """The expression is not allowed or cannot be computed."""


def evaluate(expression: str) -> Number:
    """The value of an arithmetic ``expression``; raise :class:`CalculationError` with a reason otherwise."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculationError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    text = _normalise(expression)
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise CalculationError(f"{quoted(expression)} is not an arithmetic expression") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise CalculationError("the expression is too long")
    try:
        return _check(_eval(tree.body))
    except (ZeroDivisionError, OverflowError, ValueError, TypeError) as error:
        if isinstance(error, CalculationError):
            raise
        raise CalculationError(f"cannot compute {quoted(expression)}: {error}") from None


def format_number(value: Number) -> str:
    """A number as a person would say it: whole numbers without a decimal point, others to 10 digits."""
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.10g}"
    return str(value)


def _normalise(expression: str) -> str:
    text = _THOUSANDS.sub("", expression.strip().lower())
    for spoken, symbol in _SPOKEN:
        if spoken == "x":  # "3 x 4" is a product; a name holding x (exp) is left alone
            text = " ".join(symbol if token == "x" else token for token in text.split(" "))
        else:
            text = text.replace(spoken, symbol)
    return text


def _check(value: Any) -> Number:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CalculationError("the expression does not give a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculationError("the result is not a finite number")
    if abs(value) > MAX_MAGNITUDE:
        raise CalculationError("the result is too large")
    return value


def _eval(node: ast.expr) -> Number:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
            and not isinstance(node.value, bool):
        return _check(node.value)
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _eval(node.operand)
        return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise CalculationError(f"exponents above {MAX_EXPONENT} are not computed")
        if isinstance(node.op, ast.Pow) and isinstance(left, int) and isinstance(right, int) \
                and right > 0 and left != 0 and math.log10(abs(left)) * right > math.log10(MAX_MAGNITUDE):
            raise CalculationError("the result is too large")
        return _check(_BINARY[type(node.op)](left, right))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS \
            and not node.keywords and 0 < len(node.args) <= 4:
        args = [_eval(arg) for arg in node.args]
        if node.func.id == "factorial" and (not float(args[0]).is_integer() or args[0] > 100):
            raise CalculationError("factorial takes a whole number up to 100")
        if node.func.id == "factorial":
            args = [int(args[0])]
        if node.func.id == "round" and len(args) > 1 and abs(args[1]) > MAX_ROUND_DIGITS:
            # int.__round__ computes 10 ** -digits: round(5, -10**99) would never finish
            raise CalculationError(f"round takes at most {MAX_ROUND_DIGITS} digits either way")
        return _check(_FUNCTIONS[node.func.id](*args))
    raise CalculationError(f"{ast.unparse(node)[:40]!r} is not allowed in a calculation")
