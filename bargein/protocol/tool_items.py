"""Function calling on the wire (OpenAI Realtime GA shapes): tool definitions, tool choice, the
``function_call`` / ``function_call_output`` items, and the server events that stream a call.

Kept apart from the message items of :mod:`bargein.protocol.client_events` because tools have their own
validation: a tool definition is checked when it arrives (in ``session.update`` or ``response.create``),
so a malformed one gets an ``error`` naming the field instead of failing later inside the model.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from bargein.protocol.errors import ProtocolError
from bargein.protocol.server_events import ServerEvent, event

MAX_TOOLS = 32
MAX_TOOL_SCHEMA_CHARS = 16_384
MAX_OUTPUT_CHARS = 32_768
"""A tool's output is read by the model: longer outputs are refused rather than silently cut."""
TOOL_NAME_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"


class FunctionTool(BaseModel):
    """A function the model may call: name, what it does, its parameters as a JSON Schema object."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["function"] = "function"
    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str = Field("", max_length=4_096)
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})

    @field_validator("parameters")
    @classmethod
    def _object_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value.get("type", "object") != "object":
            raise ValueError("a function's parameters must be a JSON Schema of type 'object'")
        properties = value.get("properties", {})
        if not isinstance(properties, dict) or not all(isinstance(spec, dict) for spec in properties.values()):
            raise ValueError("'properties' must map each parameter name to a JSON Schema object")
        if not isinstance(value.get("required", []), list):
            raise ValueError("'required' must be a list of parameter names")
        if len(str(value)) > MAX_TOOL_SCHEMA_CHARS:
            raise ValueError(f"the parameters schema is longer than {MAX_TOOL_SCHEMA_CHARS} characters")
        return value


class ToolChoiceFunction(BaseModel):
    """Force a call of one named function."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["function"]
    name: str = Field(pattern=TOOL_NAME_PATTERN)


ToolChoice = Literal["auto", "none", "required"] | ToolChoiceFunction
_TOOLS: TypeAdapter[list[FunctionTool]] = TypeAdapter(list[FunctionTool])
_CHOICE: TypeAdapter[ToolChoice] = TypeAdapter(ToolChoice)


def _first_problem(error: ValidationError, where: str) -> ProtocolError:
    first = error.errors()[0]
    location = ".".join(str(part) for part in (where, *first["loc"]) if part != "function")
    return ProtocolError(f"invalid {location}: {first['msg']}", code="invalid_value", param=location)


def validate_tools(tools: Any, *, where: str = "session.tools") -> list[dict[str, Any]]:
    """The tools as checked JSON objects, or :class:`ProtocolError` naming the first malformed one."""
    if not isinstance(tools, list):
        raise ProtocolError(f"{where} must be a list of tools", code="invalid_value", param=where)
    if len(tools) > MAX_TOOLS:
        raise ProtocolError(f"{where} holds {len(tools)} tools (at most {MAX_TOOLS})", code="invalid_value",
                            param=where)
    for index, tool in enumerate(tools):
        if isinstance(tool, dict) and tool.get("type") == "mcp":
            raise ProtocolError(f"{where}.{index}: MCP tools are not supported; declare function tools",
                                code="unsupported_value", param=f"{where}.{index}.type")
    try:
        checked = _TOOLS.validate_python(tools)
    except ValidationError as error:
        raise _first_problem(error, where) from None
    names = [tool.name for tool in checked]
    if len(set(names)) != len(names):
        raise ProtocolError(f"{where} names a tool twice", code="invalid_value", param=where)
    return [tool.model_dump() for tool in checked]


def validate_tool_choice(choice: Any, tools: list[dict[str, Any]], *,
                         where: str = "session.tool_choice") -> str | dict[str, Any]:
    """A checked ``tool_choice``; a named function must be among ``tools``."""
    try:
        checked = _CHOICE.validate_python(choice)
    except ValidationError as error:
        raise _first_problem(error, where) from None
    if isinstance(checked, ToolChoiceFunction):
        if checked.name not in {tool["name"] for tool in tools}:
            raise ProtocolError(f"{where} names {checked.name!r}, which is not among the tools",
                                code="invalid_value", param=f"{where}.name")
        return checked.model_dump()
    return checked


class FunctionCallItem(BaseModel):
    """A function call the client adds to the conversation (for example replaying an earlier one)."""

    model_config = ConfigDict(extra="forbid")
    id: str | None = Field(None, max_length=64)
    type: Literal["function_call"]
    object: Literal["realtime.item"] | None = None
    status: Literal["completed", "incomplete", "in_progress"] | None = None
    call_id: str | None = Field(None, max_length=64)
    name: str = Field(pattern=TOOL_NAME_PATTERN)
    arguments: str = Field(max_length=MAX_TOOL_SCHEMA_CHARS)


class FunctionCallOutputItem(BaseModel):
    """The client's answer to a function call: the output for ``call_id``, as free text."""

    model_config = ConfigDict(extra="forbid")
    id: str | None = Field(None, max_length=64)
    type: Literal["function_call_output"]
    object: Literal["realtime.item"] | None = None
    status: Literal["completed", "incomplete", "in_progress"] | None = None
    call_id: str = Field(min_length=1, max_length=64)
    output: str = Field(max_length=MAX_OUTPUT_CHARS)


# --- server events --------------------------------------------------------------------------------------


def function_call_item(item_id: str, call_id: str, name: str, arguments: str, *,
                       status: Literal["completed", "incomplete", "in_progress"] = "completed") -> dict[str, Any]:
    """A ``function_call`` item as the server shows it."""
    return {"id": item_id, "object": "realtime.item", "type": "function_call", "status": status,
            "call_id": call_id, "name": name, "arguments": arguments}


def function_call_output_item(item_id: str, call_id: str, output: str) -> dict[str, Any]:
    """A ``function_call_output`` item as the server shows it."""
    return {"id": item_id, "object": "realtime.item", "type": "function_call_output", "status": "completed",
            "call_id": call_id, "output": output}


def arguments_delta(response_id: str, item_id: str, output_index: int, call_id: str, delta: str) -> ServerEvent:
    """``response.function_call_arguments.delta``."""
    return event("response.function_call_arguments.delta", response_id=response_id, item_id=item_id,
                 output_index=output_index, call_id=call_id, delta=delta)


def arguments_done(response_id: str, item_id: str, output_index: int, call_id: str, name: str,
                   arguments: str) -> ServerEvent:
    """``response.function_call_arguments.done``."""
    return event("response.function_call_arguments.done", response_id=response_id, item_id=item_id,
                 output_index=output_index, call_id=call_id, name=name, arguments=arguments)


def argument_deltas(arguments: str, size: int = 16) -> list[str]:
    """The arguments cut into the pieces sent as deltas (a whole call arrives from the model at once)."""
    return [arguments[start:start + size] for start in range(0, len(arguments), size)] or [""]
