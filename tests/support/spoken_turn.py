"""One spoken turn through a real server and the checks every real-model end-to-end test makes of it."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from bargein.engines.transcribe.wer import word_error_rate
from testdata.speech import librivox_clip, librivox_reference, pcm16_24k
from tests.support.realtime_client import (
    BARGEIN_EVENTS,
    EventLog,
    assert_spoken_reply,
    collect,
    openai_client,
    stream_realtime,
    validate_server_event,
)


async def spoken_turn(host: str, clip: str, *, timeout: float = 120) -> tuple[EventLog, dict[str, Any]]:
    """Stream a LibriVox clip in real time through the official client; the events and ``response.done``.

    2 s of silence follow the clip: the default semantic endpoint waits up to 1.5 s after a turn that
    sounds unfinished."""
    async with openai_client(host).realtime.connect(model="bargein", extra_query=BARGEIN_EVENTS) as connection:
        log = EventLog()
        reader = asyncio.create_task(collect(connection, log))
        await stream_realtime(connection, pcm16_24k(librivox_clip(clip), silence_after_s=2.0))
        done = await log.wait_for(lambda e: e["type"] == "response.done", timeout=timeout)
        reader.cancel()
    return log, done


def assert_heard_answered_and_spoken(log: EventLog, done: dict[str, Any], clip: str) -> None:
    """Valid events; the clip recognised (WER <= 35 %); a reply of words, spoken audibly for > 0.5 s."""
    for received in log.events:
        validate_server_event(received.event)
    heard = log.of("conversation.item.input_audio_transcription.completed")[0]["transcript"]
    assert word_error_rate([librivox_reference(clip)], [heard]) <= 0.35, heard
    assert done["response"]["status"] == "completed", done
    reply = log.of("response.output_audio_transcript.done")[0]["transcript"]
    assert len(re.findall(r"[A-Za-z]+", reply)) >= 2, reply
    assert_spoken_reply(log)
