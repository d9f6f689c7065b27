"""The LLM's spoken apology is told to the client as an ``error`` (code ``llm_unavailable``) that no client
takes as fatal: the OpenAI Agents SDK, unmodified, reports it and its session goes on to the next answer."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.engines.health import Health
from bargein.engines.resilience import Deadlines, make_resilient
from tests.support.faults import FaultyLanguageModel
from tests.support.server import running_server

agents = pytest.importorskip("agents")
realtime = pytest.importorskip("agents.realtime")
DEADLINES = Deadlines(llm_first_token_s=0.5, llm_next_token_s=0.5, tts_first_chunk_s=0.5, tts_next_chunk_s=0.5,
                      asr_s=0.5, vad_frame_s=0.5)


async def one_reply(session: Any, text: str) -> tuple[list[str], list[str]]:
    """Send ``text`` and read the session's events to the reply's end: the raw event types and the errors."""
    await session.send_message(text)
    types: list[str] = []
    errors: list[str] = []
    async with asyncio.timeout(20):
        async for session_event in session:
            if session_event.type == "error":
                errors.append(str(session_event.error))
            if session_event.type == "raw_model_event" and session_event.data.type == "raw_server_event":
                types.append(session_event.data.data["type"])
                if types[-1] == "response.done":
                    return types, errors
    raise AssertionError("no response.done")


async def test_the_agents_sdk_hears_the_apology_is_told_why_and_goes_on() -> None:
    llm = FaultyLanguageModel(FakeLanguageModel(token_delay_s=0.005))
    engines = make_resilient(Engines(FakeVad(), FakeRecognizer(("hello",)), llm, FakeSynthesizer(ms_per_char=5)),
                             fallback_tts=FakeSynthesizer(ms_per_char=5), deadlines=DEADLINES,
                             health=Health(first_backoff_s=0.1, max_backoff_s=0.2))
    agent = realtime.RealtimeAgent(name="helper", instructions="Be brief.")
    runner = realtime.RealtimeRunner(agent, config={"tracing_disabled": True})
    with running_server(engines) as host:
        session = await runner.run(model_config={"url": f"ws://{host}/v1/realtime?model=bargein",
                                                 "api_key": "sk-local", "initial_model_settings": {
                                                     "turn_detection": None}})
        async with session:
            llm.fault = "raise"
            types, errors = await one_reply(session, "tell me")
            assert "response.output_audio.delta" in types, "the apology is heard"
            assert types.index("error") < types.index("response.done")
            assert len(errors) == 1 and "llm_unavailable" in errors[0]
            llm.fault = None
            types, errors = await one_reply(session, "are you back")
            assert "response.output_audio.delta" in types and not errors and "error" not in types
