"""The tool registry: what a model is offered (Realtime ``function`` tool definitions) and how calls are run.

Built-in tools run on the server, in microseconds, on the caller's thread. A call's arguments are
checked against the tool's schema first (see :mod:`bargein.tools.arguments`); a call that cannot be
run gives an output that says why, so the model can tell the user instead of inventing an answer.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from bargein.tools.arguments import ArgumentError, check_arguments
from bargein.tools.calculator import CalculationError, evaluate, format_number
from bargein.tools.clock import Clock, about_date, time_in_place, utc_now
from bargein.tools.places import UnknownPlace
from bargein.tools.quoting import quoted
from bargein.tools.units import ConversionError, describe_conversion

Handler = Callable[[dict[str, Any]], str]
AsyncHandler = Callable[[dict[str, Any]], Awaitable[str]]


@dataclass(frozen=True)
class Tool:
    """A server-side tool: its Realtime definition and the function that answers a call."""

    name: str
    description: str
    parameters: dict[str, Any]
    handler: Handler
    slow: AsyncHandler | None = None
    """A handler that waits on I/O (the memory store): run by :meth:`ToolRegistry.run_async` instead."""
    beside_client_tools: bool = False
    """Offered to sessions that bring their own tools too (the memory tools)."""

    def definition(self) -> dict[str, Any]:
        """The tool as a Realtime ``function`` tool (the shape of ``session.tools`` entries)."""
        return {"type": "function", "name": self.name, "description": self.description,
                "parameters": self.parameters}


@dataclass(frozen=True)
class ToolOutcome:
    """The result of one call: the output text given back to the model, and whether it failed."""

    output: str
    ok: bool


def _object(properties: dict[str, Any], *required: str) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required),
            "additionalProperties": False}


def builtin_tools(now: Clock = utc_now) -> tuple[Tool, ...]:
    """The tools bargein runs itself: clock, calendar, calculator and unit conversion."""
    return (
        Tool("get_current_time",
             "The time zone of a city or country, and its current local time, date and weekday.",
             _object({"place": {"type": "string", "description": "a city or country, e.g. Tokyo"}}, "place"),
             lambda args: time_in_place(str(args["place"]), now)),
        Tool("about_date",
             "The weekday of a calendar date the user names and how many days from today it lies.",
             _object({"date": {"type": "string", "description": "the date as YYYY-MM-DD"}}, "date"),
             lambda args: about_date(str(args["date"]), now)),
        Tool("calculate",
             "Arithmetic on plain numbers, computed exactly: e.g. 3.5 * 60, sqrt(2), 15 / 100 * 80. "
             "Not for converting units.",
             _object({"expression": {"type": "string", "description": "numbers, + - * / ** ( ) and "
                                     "sqrt, round, min, max, log"}}, "expression"),
             lambda args: f"{args['expression']} = {format_number(evaluate(str(args['expression'])))}"),
        Tool("convert_units",
             "Convert an amount from one unit to another (length, weight, volume, speed, area, time, "
             "temperature, data), e.g. miles to kilometres or pounds to kilograms.",
             _object({"value": {"type": "number"},
                      "from_unit": {"type": "string", "description": "e.g. miles, kg, fahrenheit"},
                      "to_unit": {"type": "string", "description": "e.g. km, pounds, celsius"}},
                     "value", "from_unit", "to_unit"),
             # the value as the schema let it through: float() of an integer of hundreds of digits overflows,
             # and convert() refuses one that large with a reason before any arithmetic
             lambda args: describe_conversion(args["value"], str(args["from_unit"]), str(args["to_unit"]))),
    )


_EXPECTED_FAILURES = (ArgumentError, CalculationError, ConversionError, UnknownPlace, ValueError, OverflowError)


class ToolRegistry:
    """A fixed set of tools by name."""

    def __init__(self, tools: Iterable[Tool]) -> None:
        self._tools: Mapping[str, Tool] = {tool.name: tool for tool in tools}

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def names(self) -> list[str]:
        """The tool names, in registration order."""
        return list(self._tools)

    def definitions(self) -> list[dict[str, Any]]:
        """Every tool as a Realtime ``function`` tool definition."""
        return [tool.definition() for tool in self._tools.values()]

    def beside_client_tools(self) -> ToolRegistry | None:
        """The tools also offered beside a session's own tools (None: there are none)."""
        kept = [tool for tool in self._tools.values() if tool.beside_client_tools]
        return ToolRegistry(kept) if kept else None

    async def run_async(self, name: str, arguments: str) -> ToolOutcome:
        """:meth:`run`, awaiting a tool's slow handler; failures come back as an explaining output."""
        tool = self._tools.get(name)
        if tool is None or tool.slow is None:
            return self.run(name, arguments)
        try:
            checked = check_arguments(arguments, tool.parameters)
            return ToolOutcome(await tool.slow(checked.values), ok=True)
        except _EXPECTED_FAILURES as error:
            return ToolOutcome(json.dumps({"error": str(error)}), ok=False)

    def run(self, name: str, arguments: str) -> ToolOutcome:
        """Run ``name`` with the JSON ``arguments``; failures come back as an explaining output, never raise."""
        tool = self._tools.get(name)
        if tool is None:
            return ToolOutcome(json.dumps({"error": f"there is no tool named {quoted(name)}"}), ok=False)
        try:
            checked = check_arguments(arguments, tool.parameters)
            return ToolOutcome(tool.handler(checked.values), ok=True)
        except _EXPECTED_FAILURES as error:
            return ToolOutcome(json.dumps({"error": str(error)}), ok=False)


def default_registry(now: Clock = utc_now, extra: Iterable[Tool] = ()) -> ToolRegistry:
    """The built-in tools, ready to run, and ``extra`` ones (a session's memory tools)."""
    return ToolRegistry([*builtin_tools(now), *extra])
