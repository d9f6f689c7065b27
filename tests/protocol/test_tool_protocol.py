"""Function calling and the other GA additions on the wire: checked input, and output that validates
against the official ``openai.types.realtime`` models."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.realtime import (
    RealtimeServerEvent,
    RealtimeSessionCreateRequest,
    RealtimeTranscriptionSessionCreateRequest,
)
from openai.types.realtime.conversation_item import ConversationItem
from pydantic import TypeAdapter, ValidationError

from bargein.protocol.client_events import ResponseCreate, parse_client_event
from bargein.protocol.errors import ProtocolError
from bargein.protocol.session_config import SessionConfig
from bargein.protocol.tool_items import (
    argument_deltas,
    arguments_delta,
    arguments_done,
    function_call_item,
    function_call_output_item,
    validate_tool_choice,
    validate_tools,
)
from bargein.tools.registry import default_registry

SERVER_EVENT: TypeAdapter[Any] = TypeAdapter(RealtimeServerEvent)
ITEM: TypeAdapter[Any] = TypeAdapter(ConversationItem)
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


@pytest.mark.parametrize(("tools", "fragment"), [
    ("not a list", "must be a list"),
    ([{"type": "function", "name": "has space"}], "tools.0.name"),
    ([{"type": "function", "name": "f", "parameters": {"type": "array"}}], "type 'object'"),
    ([{"type": "function", "name": "f", "parameters": {"type": "object", "properties": {"a": 3}}}], "properties"),
    ([{"type": "function", "name": "f", "surprise": 1}], "surprise"),
    ([{"type": "mcp", "server_label": "x"}], "MCP tools are not supported"),
    ([WEATHER, WEATHER], "twice"),
    ([{**WEATHER, "name": f"t{i}"} for i in range(40)], "at most"),
])
def test_malformed_tools_are_refused_with_the_field_named(tools: Any, fragment: str) -> None:
    with pytest.raises(ProtocolError, match=fragment):
        validate_tools(tools)


def test_tool_choice_must_name_an_offered_tool() -> None:
    tools = validate_tools([WEATHER])
    assert validate_tool_choice({"type": "function", "name": "get_weather"}, tools) == {
        "type": "function", "name": "get_weather"}
    assert validate_tool_choice("required", tools) == "required"
    with pytest.raises(ProtocolError, match="not among the tools"):
        validate_tool_choice({"type": "function", "name": "other"}, tools)
    with pytest.raises(ProtocolError):
        validate_tool_choice("sometimes", tools)


def test_session_update_with_tools_echoes_a_valid_ga_session() -> None:
    config = SessionConfig().updated({"tools": [WEATHER, *default_registry().definitions()],
                                      "tool_choice": "auto", "audio": {"output": {"speed": 1.2}},
                                      "include": ["item.input_audio_transcription.logprobs"]})
    wire = config.wire()
    RealtimeSessionCreateRequest.model_validate(wire)
    assert wire["tools"][0] == WEATHER and wire["audio"]["output"]["speed"] == 1.2
    with pytest.raises(ValidationError, match=r"tools\.0\.name"):
        SessionConfig().updated({"tools": [{"type": "function", "name": "no spaces allowed"}]})
    with pytest.raises(ValidationError):
        SessionConfig().updated({"include": ["something.else"]})


def test_transcription_session_shows_the_transcription_shape() -> None:
    wire = SessionConfig().updated({"type": "transcription"}).wire()
    RealtimeTranscriptionSessionCreateRequest.model_validate(wire)
    assert set(wire) == {"type", "audio"} and set(wire["audio"]) == {"input"}
    event = {"type": "session.updated", "event_id": "event_1", "session": wire}
    SERVER_EVENT.validate_python(event)


def test_function_call_events_validate_against_the_official_types() -> None:
    arguments = json.dumps({"city": "Paris"})
    item = function_call_item("item_1", "call_1", "get_weather", arguments)
    ITEM.validate_python(item)
    ITEM.validate_python(function_call_output_item("item_2", "call_1", "sunny"))
    deltas = argument_deltas(arguments, size=5)
    assert "".join(deltas) == arguments and len(deltas) > 1
    for delta in deltas:
        SERVER_EVENT.validate_python(arguments_delta("resp_1", "item_1", 0, "call_1", delta))
    SERVER_EVENT.validate_python(arguments_done("resp_1", "item_1", 0, "call_1", "get_weather", arguments))
    SERVER_EVENT.validate_python({"type": "response.output_item.done", "event_id": "e", "response_id": "resp_1",
                                  "output_index": 0, "item": item})


def test_response_create_takes_out_of_band_input_tools_and_metadata() -> None:
    raw = json.dumps({"type": "response.create", "response": {
        "conversation": "none", "metadata": {"topic": "summary"}, "tools": [WEATHER], "tool_choice": "none",
        "input": [{"type": "item_reference", "id": "item_9"},
                  {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                  {"type": "function_call_output", "call_id": "call_1", "output": "22 C"}]}})
    message = parse_client_event(raw)
    assert isinstance(message, ResponseCreate) and message.response is not None
    assert message.response.conversation == "none" and message.response.metadata == {"topic": "summary"}
    assert message.response.input is not None and len(message.response.input) == 3
    with pytest.raises(ProtocolError):
        parse_client_event(json.dumps({"type": "response.create", "response": {
            "input": [{"type": "function_call_output", "output": "no call id"}]}}))
