"""Every per-session resource has a budget: outbound bytes, input audio, history, long clips, engine errors."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any

import httpx
import numpy as np
import pytest
from pydantic import ValidationError
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from bargein.audio.codecs import AudioFormat
from bargein.config import Settings
from bargein.engines.base import Engines, SpeechRecognizer
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.engines.think.llm_prompt import HistoryTooLong, fit_history
from bargein.protocol.errors import ProtocolError
from bargein.protocol.session_config import SessionConfig
from bargein.session.audio_input import MAX_BUFFER_SECONDS, AudioInput
from bargein.session.history import Conversation, Item, Part
from bargein.session.outbound import Outbound, OutboundClosed, Outgoing
from bargein.session.realtime_session import RealtimeSession
from bargein.session.transcription import SLICE_S, Transcriber
from bargein.values import ChatMessage, Transcript
from tests.support.server import free_port, running_server


def fake_engines(**llm: Any) -> Engines:
    return Engines(FakeVad(), FakeRecognizer(), FakeLanguageModel(**llm), FakeSynthesizer())


def test_the_outbound_queue_counts_bytes_and_drops_everything_when_over_budget() -> None:
    async def scenario() -> None:
        outbound = Outbound(max_bytes=10_000)
        for i in range(4):
            outbound.put(Outgoing({"type": "error", "n": i, "pad": "x" * 2_000}))
        assert 8_000 < outbound.queued_bytes < 10_000 and not outbound.overflowed.is_set()
        first = await outbound.get()
        assert first.wire == json.dumps(first.event, separators=(",", ":"))
        outbound.put(Outgoing({"type": "error", "pad": "x" * 5_000}))
        outbound.put(Outgoing({"type": "error", "pad": "x" * 5_000}))
        assert outbound.overflowed.is_set() and len(outbound) == 0 and outbound.queued_bytes == 0
        with pytest.raises(OutboundClosed):
            await outbound.get()

    asyncio.run(scenario())


def test_a_client_that_does_not_read_its_echoes_is_closed_once_over_the_outbound_budget() -> None:
    settings = Settings(port=free_port(), max_outbound_bytes=2 * 1024 * 1024, events_per_s=1e6, event_burst=10**6)
    with running_server(fake_engines(), settings) as host:
        ws = connect(f"ws://{host}/v1/realtime", max_queue=1, compression=None)
        item = json.dumps({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": "y" * 1_000_000}]}})
        began = time.monotonic()
        with pytest.raises((ConnectionClosed, OSError)):
            while time.monotonic() - began < 30:
                ws.send(item)  # each is echoed twice (added, done): 2 MB of events the client never reads
        assert time.monotonic() - began < 20
        time.sleep(0.5)
        assert httpx.get(f"http://{host}/healthz").json()["sessions"] == 0


def test_the_input_buffer_holds_int16_and_is_capped_in_seconds_whatever_the_wire_format() -> None:
    audio_in = AudioInput(FakeVad(), AudioFormat("audio/pcmu", 8_000))
    second = bytes([0x55]) * 8_000  # one second of G.711 u-law
    audio_in.buffer.append(audio_in.decode(second * 10))
    # 10 s at 16 kHz, 2 bytes a sample (less the few ms the streaming resampler holds back)
    assert 0.99 * 10 * 16_000 * 2 <= audio_in.buffer.nbytes <= 10 * 16_000 * 2
    audio_in.check_room(int((MAX_BUFFER_SECONDS - 11) * 8_000), event_id=None)
    with pytest.raises(ProtocolError) as full:
        audio_in.check_room(int((MAX_BUFFER_SECONDS - 9) * 8_000), event_id="e")
    assert full.value.code == "input_audio_buffer_full"
    held = audio_in.buffer.nbytes
    clip = audio_in.buffer.take(None, None)
    assert clip.dtype == np.float32 and len(clip) * 2 == held and audio_in.buffer.nbytes == 0
    assert 10 * 16_000 - 16 * 4 <= len(clip) <= 10 * 16_000, "all of it but the resampler's 3.3 ms half filter"


def test_the_history_is_capped_in_items_and_bytes() -> None:
    conversation = Conversation(max_items=50, max_bytes=10_000)
    for i in range(40):
        conversation.add(Item(f"i{i}", "user", [Part("input_text", "t" * 1_000)]))
    assert len(conversation) <= 10 and conversation.bytes <= 10_000 and conversation.forgotten >= 30
    assert conversation.last_id() == "i39"
    conversation.delete("i39")
    assert conversation.bytes <= 10_000 - 1_000
    small = Conversation(max_items=3)
    for i in range(5):
        small.add(Item(f"s{i}", "user", [Part("input_text", "x")]))
    assert [item.id for item in small] == ["s2", "s3", "s4"]


def _render(messages: Any) -> list[int]:
    return [0] * (10 * len(messages))


def test_truncation_auto_disabled_and_retention_ratio() -> None:
    history = [ChatMessage("system", "rules")] + [ChatMessage("user", f"m{i}") for i in range(100)]
    auto = fit_history(history, lambda m: 10, 500, _render)
    assert len(auto) == 500  # 49 messages and the system prompt: just enough dropped
    with pytest.raises(HistoryTooLong):
        fit_history(history, lambda m: 10, 500, _render, truncate=False)
    assert len(fit_history(history[:10], lambda m: 10, 500, _render, truncate=False)) == 100  # fits: kept whole
    ratio = fit_history(history, lambda m: 10, 500, _render, retention_ratio=0.3)
    assert len(ratio) <= 0.3 * 1010 and len(ratio) >= 0.3 * 1010 - 20  # a larger cut, once
    config = SessionConfig().updated({"truncation": {"type": "retention_ratio", "retention_ratio": 0.5}})
    assert config.truncation_options() == {"truncate": True, "retention_ratio": 0.5}
    assert SessionConfig().updated({"truncation": "disabled"}).truncation_options()["truncate"] is False
    for bad in ("sometimes", {"type": "retention_ratio", "retention_ratio": 2}, {"type": "other"}):
        with pytest.raises(ValidationError):
            SessionConfig().updated({"truncation": bad})


class _CountingAsr(SpeechRecognizer):
    def __init__(self) -> None:
        self.lengths: list[int] = []

    async def transcribe(self, audio: Any, *, language: str | None = None, prompt: str | None = None) -> Transcript:
        self.lengths.append(len(audio))
        return Transcript(text=f"part{len(self.lengths)}")


def test_a_long_input_audio_clip_is_recognised_in_bounded_slices() -> None:
    asr = _CountingAsr()
    events: list[Outgoing] = []
    done: list[Transcript | None] = []

    async def scenario() -> None:
        transcriber = Transcriber(asr, events.append, lambda item, t, _primed, _pending: done.append(t),
                                  lambda: (None, None))
        item = Item("a", "user", [Part("input_audio")])
        await transcriber.recognise(item, np.zeros(70 * 16_000, np.float32), 0)

    asyncio.run(scenario())
    assert len(asr.lengths) == 3 and max(asr.lengths) <= SLICE_S * 16_000
    assert done[0] is not None and done[0].text == "part1 part2 part3"


def test_an_engine_failure_reaches_the_client_as_a_stable_code_without_details() -> None:
    async def scenario() -> list[dict[str, Any]]:
        session = RealtimeSession(fake_engines(fail=True))
        session.start()
        await session.handle_message(json.dumps({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}}))
        await session.handle_message('{"type":"response.create"}')
        events: list[dict[str, Any]] = []
        while not any(e["type"] == "response.done" for e in events):
            events.append((await asyncio.wait_for(session.outbound.get(), 10)).event)
        await session.close()
        return events

    errors = [e["error"] for e in asyncio.run(scenario()) if e["type"] == "error"]
    assert errors and errors[0]["code"] == "engine_error"
    assert "fake language model failure" not in errors[0]["message"]


def test_a_long_input_audio_item_over_the_cap_is_refused() -> None:
    async def scenario() -> dict[str, Any]:
        session = RealtimeSession(fake_engines())
        long_clip = base64.b64encode(bytes(int((MAX_BUFFER_SECONDS + 5) * 48_000))).decode()
        await session.handle_message(json.dumps({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [{"type": "input_audio", "audio": long_clip}]}}))
        event: dict[str, Any] = (await session.outbound.get()).event
        await session.close()
        return event

    error = asyncio.run(scenario())
    assert error["type"] == "error" and error["error"]["code"] == "invalid_audio"


def test_partials_of_a_long_segment_hear_a_bounded_window_and_long_segments_are_not_guessed() -> None:
    from bargein.session.core.partials import PARTIAL_WINDOW_MS
    from bargein.session.core.vocabulary import RecognisePartial, SilenceBegan
    from bargein.session.input_buffer import InputBuffer
    from bargein.session.segment_tracker import SegmentTracker
    from bargein.session.speculation import Speculator

    asr = _CountingAsr()
    buffer = InputBuffer()

    async def scenario() -> None:
        speculator = Speculator(asr, FakeLanguageModel(), hints=lambda: (None, None))
        tracker = SegmentTracker(asr, buffer, speculator, feed=lambda event: None, emit=lambda item: None)
        for second in range(1, 61):  # a minute of speech, one partial a second (as the machine asks)
            buffer.append(np.full(16_000, 0.1, np.float32))
            tracker.recognise_partial(RecognisePartial("seg", 0.0, second * 1000.0, PARTIAL_WINDOW_MS))
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        tracker.silence_began(SilenceBegan("seg", 60_000.0, guess=False))  # the machine's word on a long turn
        await asyncio.sleep(0.05)
        tracker.close()

    asyncio.run(scenario())
    assert len(asr.lengths) >= 50  # one partial a second, and no speculative guess of the whole minute
    assert max(asr.lengths) <= PARTIAL_WINDOW_MS / 1000 * 16_000


def test_endless_speech_is_committed_in_turns_and_never_fills_the_input_buffer() -> None:
    """A television the VAD hears as unbroken speech, for longer than the input buffer holds: the session
    commits a turn each ``max_turn_ms`` and every append is taken (before, the one turn grew until the buffer
    was full, and every append after that was refused, so the session never heard anything again)."""
    seconds = MAX_BUFFER_SECONDS + 15

    async def scenario() -> list[dict[str, Any]]:
        session = RealtimeSession(fake_engines())
        events: list[dict[str, Any]] = []

        async def drain() -> None:
            while len(session.outbound):
                events.append((await session.outbound.get()).event)

        await session.handle_message(json.dumps({"type": "session.update", "session": {"audio": {"input": {
            "turn_detection": {"type": "server_vad", "create_response": False}}}}}))
        t = np.arange(10 * 24_000) / 24_000
        loud = base64.b64encode((0.3 * 32767 * np.sin(2 * np.pi * 300 * t)).astype("<i2").tobytes()).decode()
        for _ in range(int(seconds / 10) + 1):
            await session.handle_message(json.dumps({"type": "input_audio_buffer.append", "audio": loud}))
            await asyncio.sleep(0.01)
            await drain()
        await session.close()
        await drain()
        return events

    events = asyncio.run(scenario())
    assert not [e for e in events if e["type"] == "error"]
    started = {e["item_id"]: e["audio_start_ms"] for e in events if e["type"] == "input_audio_buffer.speech_started"}
    stopped = [(e["item_id"], e["audio_end_ms"]) for e in events if e["type"] == "input_audio_buffer.speech_stopped"]
    assert len(stopped) >= int(seconds / 60), "one turn each max_turn_ms"
    assert all(end - started[item] <= 60_000 + 32 for item, end in stopped)
    committed = [e for e in events if e["type"] == "input_audio_buffer.committed"]
    assert len(committed) == len(stopped)


def test_one_clients_sessions_together_hold_at_most_its_history_budget() -> None:
    """Sessions x history per session multiply: one address's sessions share one budget of history memory, and
    an item over it is refused with an error event while the session goes on."""
    settings = Settings(port=free_port(), max_history_bytes_per_client=48 * 1024 * 1024, events_per_s=1e6,
                        event_burst=10**6)
    item = {"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "a" * (7 * 1024 * 1024 - 2) + "\U0001f600"}]}}
    with running_server(fake_engines(), settings) as host:
        url = f"ws://{host}/v1/realtime"
        with connect(url, max_size=None) as first, connect(url, max_size=None) as second:
            for ws in (first, second):
                assert json.loads(ws.recv(timeout=5))["type"] == "session.created"
            first.send(json.dumps(item))
            assert json.loads(first.recv(timeout=30))["type"] == "conversation.item.added"
            second.send(json.dumps(item))
            refused = json.loads(second.recv(timeout=30))
            assert refused["type"] == "error" and refused["error"]["code"] == "history_budget_exceeded"
            second.send(json.dumps({"type": "conversation.item.create", "item": {
                "type": "message", "role": "user", "content": [{"type": "input_text", "text": "still here"}]}}))
            assert json.loads(second.recv(timeout=5))["type"] == "conversation.item.added"
