"""End to end with the official openai client: real speech streamed at real-time pace, real Silero VAD.

ASR, LLM and TTS are the deterministic fakes here (named as such), so the assertions can be exact;
the real models have their own tests.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer
from bargein.engines.listen.silero_vad import SileroVad
from testdata.speech import librivox_clip, pcm16_24k
from tests.support.realtime_client import (
    BARGEIN_EVENTS,
    EventLog,
    collect,
    openai_client,
    stream_realtime,
    validate_server_event,
)
from tests.support.server import running_server

pytestmark = pytest.mark.slow  # the real Silero VAD

LONG_REPLY = ("This is a long answer that keeps going for a while, so that there is plenty of time to cut in "
              "before it ends, and it still goes on after that.")


def fake_engines(*, filler: str = "", transcripts: tuple[str, ...] = ("he was not an ill disposed young man",)) \
        -> tuple[Engines, FakeLanguageModel]:
    llm = FakeLanguageModel(filler=filler, token_delay_s=0.005)
    engines = Engines(SileroVad(), FakeRecognizer(transcripts), llm, FakeSynthesizer(ms_per_char=60, chunk_ms=100))
    return engines, llm


def assert_no_audio_after_done(log: EventLog) -> None:
    done_at: dict[str, int] = {}
    for index, received in enumerate(log.events):
        event = received.event
        if event["type"] == "response.done":
            done_at[event["response"]["id"]] = index
        if event["type"] == "response.output_audio.delta":
            assert event["response_id"] not in done_at, "audio delta after its response.done"


async def test_spoken_turn_gets_transcript_reply_and_audio() -> None:
    engines, llm = fake_engines()
    with running_server(engines) as host:
        async with openai_client(host).realtime.connect(model="bargein-test", extra_query=BARGEIN_EVENTS) as connection:
            log = EventLog()
            reader = asyncio.create_task(collect(connection, log))
            await log.wait_for(lambda e: e["type"] == "session.created")
            await stream_realtime(connection, pcm16_24k(librivox_clip("0880"), silence_after_s=1.2))
            done = await log.wait_for(lambda e: e["type"] == "response.done", timeout=30)
            reader.cancel()

    for received in log.events:
        validate_server_event(received.event)
    types = log.types()
    assert types[0] == "session.created"
    assert types.index("input_audio_buffer.speech_started") < types.index("input_audio_buffer.speech_stopped")
    assert types.index("input_audio_buffer.speech_stopped") < types.index("input_audio_buffer.committed")
    started = log.of("input_audio_buffer.speech_started")
    assert len(started) == 1, "one utterance must give one turn"
    # the clip's speech starts within its first half second and lasts about 3 s
    assert 0 <= started[0]["audio_start_ms"] <= 600
    assert 2200 <= log.of("input_audio_buffer.speech_stopped")[0]["audio_end_ms"] <= 3300
    completed = log.of("conversation.item.input_audio_transcription.completed")
    assert completed[0]["transcript"] == "he was not an ill disposed young man"
    assert done["response"]["status"] == "completed"
    deltas = log.of("response.output_audio.delta")
    assert deltas and all(d["response_id"] == done["response"]["id"] for d in deltas)
    transcript = log.of("response.output_audio_transcript.done")[0]["transcript"]
    assert transcript == "You said: he was not an ill disposed young man."
    assert llm.seen[-1][-1].content == "he was not an ill disposed young man"


async def test_barge_in_cancels_reply_and_history_keeps_only_heard_text() -> None:
    engines, llm = fake_engines(filler=LONG_REPLY, transcripts=("he was not an ill disposed young man",
                                                                 "he might even have been made amiable himself"))
    full_reply = "You said: he was not an ill disposed young man. " + LONG_REPLY
    with running_server(engines) as host:
        async with openai_client(host).realtime.connect(model="bargein-test", extra_query=BARGEIN_EVENTS) as connection:
            log = EventLog()
            reader = asyncio.create_task(collect(connection, log))
            await log.wait_for(lambda e: e["type"] == "session.created")
            await stream_realtime(connection, pcm16_24k(librivox_clip("0880"), silence_after_s=0.8))
            first_delta = await log.wait_for(lambda e: e["type"] == "response.output_audio.delta")
            first_delta_at = log.events[-1].at
            first_response = first_delta["response_id"]
            assistant_item = first_delta["item_id"]
            # about 1.5 s of the reply plays, then the user cuts in while audio keeps streaming in real time
            interruption = asyncio.create_task(stream_realtime(
                connection, bytes(960 * 75) + pcm16_24k(librivox_clip("0930"), silence_after_s=1.2)))
            first_turn = log.of("input_audio_buffer.speech_started")[0]["item_id"]
            barge = await log.wait_for(lambda e: e["type"] == "input_audio_buffer.speech_started"
                                       and e["item_id"] != first_turn, timeout=30)
            barge_at = next(r.at for r in log.events if r.event is barge)
            # like a browser: stop playback at speech_started and report the playback cursor at once
            received_ms = sum(len(d["delta"]) * 3 / 4 / 48 for d in log.of("response.output_audio.delta")
                              if d["response_id"] == first_response)
            played_ms = int(min(received_ms, 1000 * (barge_at - first_delta_at)))
            await connection.send({"type": "conversation.item.truncate", "item_id": assistant_item,
                                   "content_index": 0, "audio_end_ms": played_ms + 40})
            cancelled = await log.wait_for(lambda e: e["type"] == "response.done"
                                           and e["response"]["id"] == first_response, timeout=30)
            truncated = await log.wait_for(lambda e: e["type"] == "conversation.item.truncated")
            await interruption
            second_done = await log.wait_for(lambda e: e["type"] == "response.done"
                                             and e["response"]["id"] != first_response, timeout=30)
            await asyncio.sleep(0.3)
            reader.cancel()

    for received in log.events:
        validate_server_event(received.event)
    assert cancelled["response"]["status"] == "cancelled"
    assert cancelled["response"]["status_details"]["reason"] == "turn_detected"
    assert_no_audio_after_done(log)
    assert_paused_at_onset_and_cut(log, barge, cancelled)
    # the interruption came long before the reply could have finished on its own
    assert received_ms < len(full_reply) * 60 / 2
    # a few ms past what was received are clamped, never refused
    assert truncated["audio_end_ms"] <= received_ms + 1
    assert truncated["audio_end_ms"] >= played_ms
    assert second_done["response"]["status"] == "completed"
    assert_history_holds_heard_words(llm, full_reply, truncated, played_ms)


def assert_paused_at_onset_and_cut(log: EventLog, barge: dict[str, Any], cancelled: dict[str, Any]) -> None:
    """Two turns started; the reply paused at the barge-in's onset (not one delta between its speech_started and
    the reply's response.done), and the listener called the barge-in a query that cuts the reply."""
    starts = log.of("input_audio_buffer.speech_started")
    assert len(starts) == 2
    types = log.types()
    barge_index = next(i for i, r in enumerate(log.events) if r.event is barge)
    done_index = next(i for i, r in enumerate(log.events) if r.event is cancelled)
    assert types[barge_index + 1] == "bargein.reply.paused"
    assert "response.output_audio.delta" not in types[barge_index:done_index]
    segment = next(e for e in log.of("bargein.listen.segment") if e["item_id"] == barge["item_id"])
    assert segment["decision"] == "query" and segment["action"] == "cut the reply and answer"


def assert_history_holds_heard_words(llm: FakeLanguageModel, full_reply: str, truncated: dict[str, Any],
                                     played_ms: int) -> None:
    """The second reply's history holds only the heard words of the first: about one character per 60 ms."""
    history = llm.seen[-1]
    assistant = [m.content for m in history if m.role == "assistant"]
    assert len(assistant) == 1
    heard = assistant[0]
    assert full_reply.startswith(heard)
    assert 1200 <= played_ms <= 4000
    assert abs(len(heard) - truncated["audio_end_ms"] / 60) <= 12


async def test_text_turn_with_text_output() -> None:
    engines, llm = fake_engines()
    with running_server(engines) as host:
        async with openai_client(host).realtime.connect(model="bargein-test", extra_query=BARGEIN_EVENTS) as connection:
            log = EventLog()
            reader = asyncio.create_task(collect(connection, log))
            await connection.session.update(session={"type": "realtime", "output_modalities": ["text"]})
            await connection.conversation.item.create(item={
                "type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi there"}]})
            await connection.response.create()
            done = await log.wait_for(lambda e: e["type"] == "response.done")
            reader.cancel()
    for received in log.events:
        validate_server_event(received.event)
    text = "".join(e["delta"] for e in log.of("response.output_text.delta"))
    assert text == "You said: hi there."
    assert not log.of("response.output_audio.delta")
    assert done["response"]["output"][0]["content"][0] == {"type": "output_text", "text": "You said: hi there."}
    _ = llm


def _unused(_: Any) -> None:
    pass


async def test_with_listening_off_speech_onset_cancels_the_reply_at_once() -> None:
    from bargein.config import Settings
    from tests.support.server import free_port

    engines, _llm = fake_engines(filler=LONG_REPLY)
    port = free_port()
    with running_server(engines, Settings(port=port, listen=False)) as host:
        async with openai_client(host).realtime.connect(model="bargein-test", extra_query=BARGEIN_EVENTS) as connection:
            log = EventLog()
            reader = asyncio.create_task(collect(connection, log))
            await stream_realtime(connection, pcm16_24k(librivox_clip("0880"), silence_after_s=0.8))
            first_delta = await log.wait_for(lambda e: e["type"] == "response.output_audio.delta")
            await stream_realtime(connection, pcm16_24k(librivox_clip("0930")[:8000]))
            cancelled = await log.wait_for(lambda e: e["type"] == "response.done"
                                           and e["response"]["id"] == first_delta["response_id"])
            reader.cancel()
    types = log.types()
    barge = max(i for i, t in enumerate(types) if t == "input_audio_buffer.speech_started")
    done = next(i for i, r in enumerate(log.events) if r.event is cancelled)
    # the cancel follows the onset directly: no pause, no classification in between
    assert done > barge and "bargein.reply.paused" not in types
    assert cancelled["response"]["status"] == "cancelled"
    assert_no_audio_after_done(log)
