"""bargein's own ``bargein.*`` events reach only a client that asks for them (``bargein_events=1``)."""

from __future__ import annotations

import asyncio
from typing import Any

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer
from bargein.engines.listen.silero_vad import SileroVad
from testdata.speech import librivox_clip, pcm16_24k
from tests.support.realtime_client import BARGEIN_EVENTS, EventLog, collect, openai_client, stream_realtime
from tests.support.server import running_server


async def one_spoken_turn(host: str, query: dict[str, str]) -> list[str]:
    async with openai_client(host).realtime.connect(model="bargein-test", extra_query=query) as connection:
        log = EventLog()
        reader = asyncio.create_task(collect(connection, log))
        await log.wait_for(lambda e: e["type"] == "session.created")
        await stream_realtime(connection, pcm16_24k(librivox_clip("0880"), silence_after_s=1.2))
        await log.wait_for(lambda e: e["type"] == "response.done", timeout=30)
        await asyncio.sleep(0.3)  # the turn's metrics follow its response.done
        reader.cancel()
    return log.types()


async def test_only_clients_that_opt_in_get_bargein_events() -> None:
    engines = Engines(SileroVad(), FakeRecognizer(("he was not an ill disposed young man",)),
                      FakeLanguageModel(token_delay_s=0.005), FakeSynthesizer(ms_per_char=20, chunk_ms=100))
    no_query: dict[str, Any] = {}
    with running_server(engines) as host:
        plain = await one_spoken_turn(host, no_query)
        opted_in = await one_spoken_turn(host, BARGEIN_EVENTS)
    assert "response.done" in plain and not [t for t in plain if t.startswith("bargein.")]
    assert [t for t in opted_in if t.startswith("bargein.")]
