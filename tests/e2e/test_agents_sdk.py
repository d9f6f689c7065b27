"""The OpenAI Agents SDK (``openai-agents``), unmodified, as a bargein client: its realtime runner holds a
spoken turn and runs a function tool the model calls, then speaks the tool's answer.

The server side is real (uvicorn, Silero VAD, the session); ASR, LLM and TTS are the deterministic fakes
(named as such), so the assertions can be exact. Every raw server event the SDK receives is validated
against the official GA union, and the SDK must report no error.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeEndOfTurn, FakeLanguageModel, FakeRecognizer, FakeSynthesizer
from bargein.engines.listen.silero_vad import SileroVad
from testdata.speech import librivox_clip, pcm16_24k
from tests.support.realtime_client import SERVER_EVENT
from tests.support.server import running_server
from tests.support.traffic import record_traffic

agents = pytest.importorskip("agents")
realtime = pytest.importorskip("agents.realtime")


async def run_agent_turn(host: str, asked: list[str]) -> tuple[list[str], list[dict[str, Any]], list[str]]:
    """Speak one turn to a RealtimeAgent with a weather tool; its session events, raw events and errors."""

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        asked.append(city)
        return f"It is sunny in {city}."

    agent = realtime.RealtimeAgent(name="helper", instructions="Be brief.", tools=[get_weather])
    runner = realtime.RealtimeRunner(agent, config={"tracing_disabled": True})
    kinds: list[str] = []
    raw: list[dict[str, Any]] = []
    errors: list[str] = []
    session = await runner.run(model_config={"url": f"ws://{host}/v1/realtime?model=bargein", "api_key": "sk-local"})
    async with session:
        pcm = pcm16_24k(librivox_clip("0880"), silence_after_s=1.5)

        async def speak() -> None:
            step = 4_800  # 100 ms, at real-time pace
            for offset in range(0, len(pcm), step):
                await session.send_audio(pcm[offset:offset + step])
                await asyncio.sleep(0.1)

        speaker = asyncio.create_task(speak())
        turns_ended = 0
        async with asyncio.timeout(40):
            async for session_event in session:
                kinds.append(session_event.type)
                if session_event.type == "error":
                    errors.append(str(session_event.error))
                if session_event.type == "raw_model_event":
                    data = session_event.data
                    if data.type == "raw_server_event":
                        raw.append(data.data)
                    elif data.type == "error":
                        errors.append(str(data.error))
                    elif data.type == "turn_ended":
                        turns_ended += 1
                        if turns_ended == 2:  # the tool call's turn, then the answer's
                            break
        speaker.cancel()
    return kinds, raw, errors


async def test_agents_sdk_realtime_runner_calls_a_function_tool_over_a_spoken_turn(
        monkeypatch: pytest.MonkeyPatch) -> None:
    traffic = record_traffic(monkeypatch)
    llm = FakeLanguageModel(token_delay_s=0.005, calls={"young": ("get_weather", '{"city": "Paris"}')})
    engines = Engines(SileroVad(), FakeRecognizer(("he was not an ill disposed young man",)), llm,
                      FakeSynthesizer(ms_per_char=20, chunk_ms=100),
                      FakeEndOfTurn((0.99,)))  # the client asks for semantic_vad: the server needs the model
    asked: list[str] = []
    with running_server(engines) as host:
        kinds, raw, errors = await run_agent_turn(host, asked)

    assert not errors
    traffic.validate()  # every event both ways, as the server saw them
    assert "response.function_call_arguments.done" in traffic.types()
    assert "function_call_output" in [e.get("item", {}).get("type") for e in traffic.client]
    for event in raw:
        SERVER_EVENT.validate_python(event)
    assert not [e for e in raw if e["type"].startswith("bargein.") or e["type"] == "error"]
    assert asked == ["Paris"]
    assert "tool_start" in kinds and "tool_end" in kinds and "audio" in kinds
    # the SDK sent the tool's output back and asked for a reply: the model saw it and spoke it
    assert [m.content for m in llm.seen[-1] if m.role == "tool"] == ["It is sunny in Paris."]
    transcripts = [e["transcript"] for e in raw if e["type"] == "response.output_audio_transcript.done"]
    assert transcripts[-1] == "The tool said: It is sunny in Paris.."
    calls = [e for e in raw if e["type"] == "response.function_call_arguments.done"]
    assert [c["name"] for c in calls] == ["get_weather"]
