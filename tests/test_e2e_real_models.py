"""The main job end to end: the embedded models (Whisper, llama.cpp, Kokoro) behind the real server.

The official openai client streams a LibriVox clip at real-time pace; the server must recognise it,
answer in words, and speak the answer; then a second utterance must cut that answer.
"""

from __future__ import annotations

import asyncio
import base64
import re
from collections.abc import Iterator

import numpy as np
import pytest

from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.engines.factory import load_engines
from bargein.engines.transcribe.wer import word_error_rate
from tests.support.realtime_client import (
    BARGEIN_EVENTS,
    EventLog,
    collect,
    openai_client,
    stream_realtime,
    validate_server_event,
)
from tests.support.server import running_server
from tests.support.speech import librivox_clip, librivox_reference, pcm16_24k

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def real_engines() -> Iterator[Engines]:
    # the faster LLM keeps the suite quick; the default model is exercised by `bargein serve` and bench/
    yield load_engines(Settings(llm_model="smollm2-135m"))


async def test_real_models_hear_answer_and_speak(real_engines: Engines) -> None:
    with running_server(real_engines) as host:
        async with openai_client(host).realtime.connect(model="bargein", extra_query=BARGEIN_EVENTS) as connection:
            log = EventLog()
            reader = asyncio.create_task(collect(connection, log))
            await stream_realtime(connection, pcm16_24k(librivox_clip("0880"), silence_after_s=1.0))
            done = await log.wait_for(lambda e: e["type"] == "response.done", timeout=120)
            reader.cancel()
    for received in log.events:
        validate_server_event(received.event)
    heard = log.of("conversation.item.input_audio_transcription.completed")[0]["transcript"]
    assert word_error_rate([librivox_reference("0880")], [heard]) <= 0.35, heard
    assert done["response"]["status"] == "completed"
    reply = log.of("response.output_audio_transcript.done")[0]["transcript"]
    assert len(re.findall(r"[A-Za-z]+", reply)) >= 2, reply
    audio = np.frombuffer(b"".join(base64.b64decode(d["delta"]) for d in log.of("response.output_audio.delta")),
                          dtype="<i2").astype(np.float32) / 32768
    assert len(audio) / 24_000 > 0.5, "a spoken answer lasts more than half a second"
    assert float(np.sqrt(np.mean(audio**2))) > 0.01, "and it is not silence"
    metrics = log.of("bargein.turn.metrics")[0]
    assert metrics["tokens"] > 0 and metrics["first_audio_ms"] is not None


async def test_real_models_barge_in(real_engines: Engines) -> None:
    with running_server(real_engines) as host:
        async with openai_client(host).realtime.connect(model="bargein", extra_query=BARGEIN_EVENTS) as connection:
            log = EventLog()
            reader = asyncio.create_task(collect(connection, log))
            await connection.session.update(session={
                "type": "realtime", "instructions": "Tell a long story of at least five sentences."})
            await stream_realtime(connection, pcm16_24k(librivox_clip("0880"), silence_after_s=0.6))
            first = await log.wait_for(lambda e: e["type"] == "response.output_audio.delta", timeout=120)
            await stream_realtime(connection, bytes(960 * 40))
            await stream_realtime(connection, pcm16_24k(librivox_clip("0930"), silence_after_s=1.0))
            cut = await log.wait_for(lambda e: e["type"] == "response.done"
                                     and e["response"]["id"] == first["response_id"], timeout=120)
            await asyncio.sleep(0.5)
            reader.cancel()
    for received in log.events:
        validate_server_event(received.event)
    if cut["response"]["status"] == "completed":
        pytest.fail("the story ended before the interruption: the reply was too short to test barge-in")
    assert cut["response"]["status"] == "cancelled"
    index = next(i for i, r in enumerate(log.events) if r.event is cut)
    assert not [r for r in log.events[index:] if r.event["type"] == "response.output_audio.delta"
                and r.event["response_id"] == first["response_id"]]
    second = log.of("conversation.item.input_audio_transcription.completed")[-1]["transcript"]
    assert word_error_rate([librivox_reference("0930")], [second]) <= 0.35, second
