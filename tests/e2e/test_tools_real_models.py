"""Tool calling with bargein's embedded models, from a spoken question (synthesised by Kokoro, heard by Whisper):
the OpenAI Agents SDK's function tool called by the default language model, and a built-in tool run by the
server for the official client, each answered with the tool's result."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from bargein.audio.codecs import float_to_int16
from bargein.audio.resample import resample
from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.engines.factory import load_engines
from bargein.values import CancelToken
from tests.support.realtime_client import SERVER_EVENT, openai_client, stream_realtime
from tests.support.server import running_server

pytestmark = pytest.mark.slow
agents = pytest.importorskip("agents")
realtime = pytest.importorskip("agents.realtime")


@pytest.fixture(scope="module")
def real_engines() -> Iterator[Engines]:
    yield load_engines(Settings())  # the default models: the tool-calling LLM is the point here


async def spoken(engines: Engines, text: str) -> bytes:
    """``text`` as the wire format (pcm16 24 kHz), spoken by the server's own synthesiser, with 1.5 s of silence."""
    chunks = [chunk async for chunk in engines.tts.synthesize(text, voice=None, cancel=CancelToken())]
    audio = np.concatenate([chunk.audio for chunk in chunks])
    audio = resample(audio, chunks[0].sample_rate, 24_000)
    return float_to_int16(np.concatenate([audio, np.zeros(36_000, np.float32)])).tobytes()


async def test_agents_sdk_with_real_models_calls_the_tool_and_speaks_its_result(real_engines: Engines) -> None:
    asked: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        asked.append(city)
        return f"It is 31 degrees and sunny in {city}."

    agent = realtime.RealtimeAgent(name="weather", instructions="You answer questions about the weather.",
                                   tools=[get_weather])
    runner = realtime.RealtimeRunner(agent, config={"tracing_disabled": True})
    pcm = await spoken(real_engines, "What's the weather like in Paris today?")
    raw: list[dict[str, Any]] = []
    errors: list[str] = []
    with running_server(real_engines) as host:
        session = await runner.run(model_config={"url": f"ws://{host}/v1/realtime", "api_key": "sk-local"})
        async with session:
            async def speak() -> None:
                for offset in range(0, len(pcm), 4_800):
                    await session.send_audio(pcm[offset:offset + 4_800])
                    await asyncio.sleep(0.1)

            speaker = asyncio.create_task(speak())
            async with asyncio.timeout(180):
                async for event in session:
                    if event.type == "error":
                        errors.append(str(event.error))
                    if event.type == "raw_model_event" and event.data.type == "raw_server_event":
                        raw.append(event.data.data)
                        done = event.data.data
                        if done["type"] == "response.done" and asked and \
                                not any(o["type"] == "function_call" for o in done["response"]["output"]):
                            break
            speaker.cancel()
    assert not errors
    for event in raw:
        SERVER_EVENT.validate_python(event)
    assert asked and asked[0].lower() == "paris"
    answer = [e["transcript"] for e in raw if e["type"] == "response.output_audio_transcript.done"][-1]
    assert "31" in answer or "sunny" in answer.lower(), answer


async def _ask_aloud(engines: Engines, pcm: bytes) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    with running_server(engines) as host:
        async with openai_client(host).realtime.connect(model="bargein") as connection:
            await stream_realtime(connection, pcm)
            async with asyncio.timeout(120):
                async for event in connection:
                    events.append(event.model_dump(exclude_none=True))
                    if event.type == "response.done":
                        break
    for event in events:
        SERVER_EVENT.validate_python(event)
    assert not [e for e in events if e["type"].startswith("response.function_call")]  # run on the server
    return events


async def test_official_client_hears_a_builtin_tool_answer(real_engines: Engines) -> None:
    pcm = await spoken(real_engines, "What is seventeen times twenty three?")
    answers = []
    # the 0.5B model's choice to call the calculator is a near tie on this prompt (about one run in four it
    # repeats the question instead, measured here): a second session may ask again, and one of the two
    # must be the calculator's answer, spoken
    for _attempt in range(2):
        events = await _ask_aloud(real_engines, pcm)
        answers.append([e["transcript"] for e in events if e["type"] == "response.output_audio_transcript.done"][-1])
        if "391" in answers[-1]:
            break
    assert "391" in answers[-1], answers
