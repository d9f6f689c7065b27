"""Function calling with the official ``openai`` client over a real server (the README's example): the
model calls the client's tool, the client answers, the reply uses the answer. Fake ASR/LLM/TTS."""

from __future__ import annotations

import json
from typing import Any

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from tests.support.realtime_client import openai_client, validate_server_event
from tests.support.server import running_server

WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


async def test_official_client_tool_call_round_trip() -> None:
    llm = FakeLanguageModel(calls={"weather": ("get_weather", '{"city": "Paris"}')})
    engines = Engines(FakeVad(), FakeRecognizer(), llm, FakeSynthesizer(ms_per_char=5, chunk_ms=100))
    seen: list[dict[str, Any]] = []
    with running_server(engines) as host:
        async with openai_client(host).realtime.connect(model="bargein") as connection:
            await connection.session.update(session={"type": "realtime", "tools": [WEATHER]})
            await connection.conversation.item.create(item={
                "type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "What's the weather in Paris?"}]})
            await connection.response.create()
            async for server_event in connection:
                seen.append(server_event.model_dump(exclude_none=True))
                if server_event.type == "response.done":
                    call = server_event.response.output[-1]
                    break
            assert call.type == "function_call" and call.name == "get_weather"
            city = json.loads(call.arguments)["city"]
            await connection.conversation.item.create(item={
                "type": "function_call_output", "call_id": call.call_id, "output": f"Sunny in {city}"})
            await connection.response.create()
            async for server_event in connection:
                seen.append(server_event.model_dump(exclude_none=True))
                if server_event.type == "response.output_audio_transcript.done":
                    transcript = server_event.transcript
                if server_event.type == "response.done":
                    break
    assert transcript == "The tool said: Sunny in Paris."
    for event in seen:
        validate_server_event(event)
    assert not [e for e in seen if e["type"] == "error" or e["type"].startswith("bargein.")]
