"""The main job end to end: the embedded models (Whisper, llama.cpp, Kokoro) behind the real server.

The official openai client streams a LibriVox clip at real-time pace; the server must recognise it,
answer in words, and speak the answer; then a second utterance must cut that answer. The default session
ends turns with the semantic endpoint, which waits up to 1.5 s of silence after a turn that sounds
unfinished (Smart Turn hears clip 0880 so), so each clip is followed by 2 s of silence.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.engines.factory import load_engines
from bargein.engines.transcribe.wer import word_error_rate
from testdata.speech import librivox_clip, librivox_reference, pcm16_24k
from tests.support.realtime_client import (
    BARGEIN_EVENTS,
    EventLog,
    collect,
    openai_client,
    stream_realtime,
    validate_server_event,
)
from tests.support.server import running_server
from tests.support.spoken_turn import assert_heard_answered_and_spoken, spoken_turn

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def real_engines() -> Iterator[Engines]:
    # the faster LLM keeps the suite quick; the default model is exercised by `bargein serve` and bench/
    yield load_engines(Settings(llm_model="smollm2-135m"))


async def test_real_models_hear_answer_and_speak(real_engines: Engines) -> None:
    # the server's default turn detection is the semantic endpoint here, so real Smart Turn ends the turn
    with running_server(real_engines, Settings(turn_detection="semantic_vad")) as host:
        log, done = await spoken_turn(host, "0880")
    assert_heard_answered_and_spoken(log, done, "0880")
    metrics = log.of("bargein.turn.metrics")[0]
    assert metrics["tokens"] > 0 and metrics["first_audio_ms"] is not None
    assert log.of("session.created")[0]["session"]["audio"]["input"]["turn_detection"]["type"] == "semantic_vad"


STORY_TRIES = 3
"""Replies the test may try to cut: a sampled story from the small model is sometimes a sentence or two, over
before the interruption starts; the reply to that interruption is the next story to cut."""


async def test_real_models_barge_in(real_engines: Engines) -> None:
    with running_server(real_engines) as host:
        async with openai_client(host).realtime.connect(model="bargein", extra_query=BARGEIN_EVENTS) as connection:
            log = EventLog()
            reader = asyncio.create_task(collect(connection, log))
            await connection.session.update(session={
                "type": "realtime", "instructions": "Tell a long story of at least five sentences."})
            await stream_realtime(connection, pcm16_24k(librivox_clip("0880"), silence_after_s=2.0))
            tried: list[str] = []
            for _ in range(STORY_TRIES):
                first = await log.wait_for(lambda e: e["type"] == "response.output_audio.delta"
                                           and e["response_id"] not in tried, timeout=120)
                tried.append(first["response_id"])
                await stream_realtime(connection, bytes(960 * 40))
                await stream_realtime(connection, pcm16_24k(librivox_clip("0930"), silence_after_s=2.0))
                cut = await log.wait_for(lambda e: e["type"] == "response.done"
                                         and e["response"]["id"] == tried[-1], timeout=120)
                if cut["response"]["status"] != "completed":
                    break
            await asyncio.sleep(0.5)
            reader.cancel()
    for received in log.events:
        validate_server_event(received.event)
    if cut["response"]["status"] == "completed":
        pytest.fail(f"all {STORY_TRIES} stories ended before the interruption: too short to test barge-in")
    assert cut["response"]["status"] == "cancelled"
    index = next(i for i, r in enumerate(log.events) if r.event is cut)
    assert not [r for r in log.events[index:] if r.event["type"] == "response.output_audio.delta"
                and r.event["response_id"] == first["response_id"]]
    second = log.of("conversation.item.input_audio_transcription.completed")[-1]["transcript"]
    assert word_error_rate([librivox_reference("0930")], [second]) <= 0.35, second
