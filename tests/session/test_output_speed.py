"""``audio.output.speed`` reaches the synthesiser: faster speech is shorter, in a session and in each engine."""

from __future__ import annotations

import asyncio
import json
import shutil
from typing import Any

import pytest

from bargein.engines.base import Engines, SpeechSynthesizer
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.session.realtime_session import RealtimeSession
from bargein.values import CancelToken
from tests.support.realtime_client import validate_server_event


async def reply_audio_ms(speed: float) -> float:
    session = RealtimeSession(Engines(FakeVad(), FakeRecognizer(), FakeLanguageModel(filler="and some more words"),
                                      FakeSynthesizer(ms_per_char=5, chunk_ms=50)))
    session.start()
    for message in ({"type": "session.update", "session": {"audio": {"output": {"speed": speed}}}},
                    {"type": "conversation.item.create", "item": {"type": "message", "role": "user",
                                                                  "content": [{"type": "input_text", "text": "hi"}]}},
                    {"type": "response.create"}):
        await session.handle_message(json.dumps(message))

    async def until_done() -> float:
        audio_ms = 0.0
        while True:
            item = await session.outbound.get()
            session.on_sent(item)
            validate_server_event(item.event)
            audio_ms += item.audio_ms
            if item.event["type"] == "response.done":
                return audio_ms

    try:
        return await asyncio.wait_for(until_done(), 20)
    finally:
        await session.close()


async def test_session_speed_shortens_the_spoken_reply() -> None:
    normal, fast = await reply_audio_ms(1.0), await reply_audio_ms(1.5)
    assert normal > 0 and fast == pytest.approx(normal / 1.5, rel=0.05)


async def spoken_seconds(tts: SpeechSynthesizer, speed: float) -> float:
    chunks: list[Any] = [c async for c in tts.synthesize("The quick brown fox jumps over the lazy dog.",
                                                          voice=None, cancel=CancelToken(), speed=speed)]
    return sum(len(c.audio) / c.sample_rate for c in chunks)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("flite") is None, reason="flite is not installed")
async def test_flite_speed() -> None:
    from bargein.engines.speak.flite_tts import FliteSynthesizer

    tts = FliteSynthesizer()
    normal, fast = await spoken_seconds(tts, 1.0), await spoken_seconds(tts, 1.5)
    assert fast < normal * 0.8


@pytest.mark.slow
async def test_kokoro_speed() -> None:
    from bargein.engines.speak.kokoro_tts import load_kokoro

    tts = load_kokoro()
    try:
        normal, fast = await spoken_seconds(tts, 1.0), await spoken_seconds(tts, 1.4)
        assert fast < normal * 0.85
    finally:
        await tts.aclose()
