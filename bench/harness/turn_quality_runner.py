"""Runs listening-set cases through real in-process sessions and records what each one did.

Every case gets its own :class:`RealtimeSession` with the real Silero VAD and the real Whisper
recogniser (both shared by all sessions, as in the server) and the fake LLM and TTS. The fakes are
deliberate: what is measured is listening (VAD, recognition, classifier, duplex machine); the fake
LLM answers ``You said: <the user's words>.``, which makes a leaked speculative reply visible (it
would quote words the turn did not end with), and it costs no CPU that recognition needs.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bargein.audio.codecs import AudioFormat
from bargein.engines.base import Engines, SpeechRecognizer, VoiceActivityDetector
from bargein.engines.fakes import FakeLanguageModel, FakeSynthesizer
from bargein.session.core import vocabulary as v
from bargein.session.observers import QuietObserver
from bargein.session.realtime_session import RealtimeSession
from bargein.session.speculation import SpeculationCounts
from bench.harness.cut_stages import CutStages, StageClock, TimedRecognizer, stages_of
from testdata.make_listening_set import Case

CHUNK_BYTES = 960
"""20 ms of pcm16 at 24 kHz: one append, as a microphone client sends it."""
LONG_REPLY = " ".join(["and the story goes on, with one more thing after another"] * 8)
"""The timelines' reply: about 25 s of fake speech, so it is still playing whatever lands on it."""


@dataclass
class Reply:
    """One response the client saw."""

    response_id: str
    created_at: float
    after_item: str | None
    """The last committed user item before it was created (what it answers)."""
    text: str = ""
    status: str | None = None
    reason: str | None = None


@dataclass
class CaseResult:
    """What the client saw for one case."""

    case: Case
    speech_started: int = 0
    segments: list[dict[str, Any]] = field(default_factory=list)
    """``bargein.listen.segment`` events."""
    replies: dict[str, Reply] = field(default_factory=dict)
    transcripts: dict[str, str] = field(default_factory=dict)
    commits: dict[str, float] = field(default_factory=dict)
    """Committed item id -> stream ms of its commit."""
    started: dict[str, float] = field(default_factory=dict)
    """Item id -> ``speech_started`` ``audio_start_ms``."""
    stopped: dict[str, float] = field(default_factory=dict)
    """Item id -> ``speech_stopped`` ``audio_end_ms``."""
    decided_ms: dict[str, float] = field(default_factory=dict)
    """Item id -> wall ms from its commit to its ``bargein.listen.segment``."""
    base_reply: str | None = None
    """The reply a timeline's sound lands on."""
    paused: bool = False
    resumed: bool = False
    counts: SpeculationCounts = field(default_factory=SpeculationCounts)
    open_turn: bool = False
    timed_out: bool = False
    ledger_endpoint_ms: list[float] = field(default_factory=list)
    """``endpoint_ms`` of each ``bargein.turn.metrics`` (wall time; true only when streamed in real time)."""
    real_time: bool = False
    asked_by_voice: bool = False
    """The reply the case lands on answers the user's spoken request (not a typed one)."""
    stream_ms: dict[str, float] = field(default_factory=dict)
    """Stream time (ms from the first append) of what happened to a timeline's reply: ``paused``,
    ``resumed``, ``cut`` (its ``response.done`` cancelled)."""
    stages: CutStages | None = None
    """Where the time went before the cut (with a :class:`~bench.harness.cut_stages.TimedRecognizer`)."""

    @property
    def answers(self) -> list[Reply]:
        """Replies started for spoken turns (not the timeline's own reply)."""
        return [r for r in self.replies.values() if r.response_id != self.base_reply]

    @property
    def cut(self) -> bool:
        """The timeline's reply was cancelled."""
        base = self.replies.get(self.base_reply or "")
        return base is not None and base.status == "cancelled"

    def leaks(self) -> list[str]:
        """Replies that reached the client for something other than a finished query turn.

        A reply must follow a segment the classifier called a query, and it must quote the words
        the turn ended with (a speculative reply for a turn that went on would quote fewer).
        """
        problems = []
        verdicts = {s["item_id"]: s["decision"] for s in self.segments}
        for reply in self.answers:
            item = reply.after_item
            if item is None or verdicts.get(item) != "query":
                problems.append(f"{reply.response_id} created after {item} ({verdicts.get(item)})")
                continue
            expected = f"You said: {self.transcripts.get(item, '').strip()}."
            if reply.text and not (reply.text.startswith(expected) or expected.startswith(reply.text)):
                problems.append(f"{reply.response_id} says {reply.text[:80]!r}, expected {expected!r}")
        return problems


class TurnWatcher(QuietObserver):
    """Follows the session's machine through its public observer interface."""

    def __init__(self, stream_ms: Callable[[], float]) -> None:
        self.stream_ms = stream_ms
        self.speaking: str | None = None
        self.paused: set[str] = set()
        self.live: set[str] = set()
        self.untranscribed: set[str] = set()
        self.commit_ms: dict[str, float] = {}
        """Committed item id -> stream ms at its commit."""

    def on_event(self, event: v.Event) -> None:
        """A transcript arrived for a committed item."""
        if isinstance(event, v.SegmentTranscribed):
            self.untranscribed.discard(event.item_id)

    def on_action(self, action: v.Action) -> None:
        """Turns and replies as the machine opens and closes them."""
        match action:
            case v.SpeechStarted(item_id):
                self.speaking = item_id
            case v.CommitBuffer(item_id) | v.SpeechStopped(item_id):
                self.speaking = None
                if isinstance(action, v.CommitBuffer):
                    self.untranscribed.add(item_id)
                    self.commit_ms[item_id] = self.stream_ms()
            case v.ClearBuffer():
                self.speaking = None
            case v.StartReply(response_id):
                self.live.add(response_id)
            case v.PauseReply(response_id):
                self.paused.add(response_id)
            case v.ResumeReply(response_id):
                self.paused.discard(response_id)
            case v.CancelReply(response_id) | v.CompleteReply(response_id):
                self.paused.discard(response_id)
                self.live.discard(response_id)
            case _:
                pass


class Client:
    """Feeds one case into a session and watches what comes out."""

    def __init__(self, case: Case, engines: Engines) -> None:
        self.session = RealtimeSession(engines)
        self.asr = engines.asr
        self.watch = TurnWatcher(lambda: self.session.stream_ms)
        self.session.observe(self.watch)
        self.clock = StageClock()
        self.session.observe(self.clock)
        self.result = CaseResult(case)
        self._last_commit: str | None = None
        self._commit_wall: dict[str, float] = {}
        self._pump: asyncio.Task[None] | None = None
        self.reply_audible = asyncio.Event()
        """Set once any reply's words (and so its audio) reach the client."""
        self._stream_start: float | None = None
        self._speed = 1.0
        self.offset_ms = 0.0
        """Stream time before the case's own audio (the user's spoken request): case times are after it."""

    async def __aenter__(self) -> Client:
        self.session.start()
        self._pump = asyncio.create_task(self._drain())
        return self

    async def __aexit__(self, *_exc: object) -> None:
        result = self.result
        result.open_turn = self.watch.speaking is not None
        await self.session.close()
        if self._pump is not None:
            self._pump.cancel()
        result.counts = self.session.speculation

    async def send(self, **message: Any) -> None:
        """One client event."""
        await self.session.handle_message(json.dumps(message))

    async def stream(self, pcm: bytes, speed: float, *, chunk_bytes: int = CHUNK_BYTES) -> None:
        """Append ``pcm`` (wire bytes) in 20 ms chunks of ``chunk_bytes``, ``speed`` times faster than real time."""
        start = self._stream_start = time.monotonic()
        self._speed = speed
        for index in range(0, len(pcm), chunk_bytes):
            due = start + index / chunk_bytes * 0.02 / speed
            delay = due - time.monotonic()
            await asyncio.sleep(max(0.0, delay))
            await self.send(type="input_audio_buffer.append",
                            audio=base64.b64encode(pcm[index:index + chunk_bytes]).decode())

    def _mark(self, what: str, now: float) -> None:
        if self._stream_start is not None and what not in self.result.stream_ms:
            self.result.stream_ms[what] = 1000 * (now - self._stream_start) * self._speed

    async def _drain(self) -> None:
        session = self.session
        while True:
            item = await session.outbound.get()
            session.on_sent(item)
            self._observe(item.event)

    def _observe(self, message: dict[str, Any]) -> None:
        result, kind, now = self.result, message["type"], time.monotonic()
        if kind == "input_audio_buffer.speech_started":
            result.speech_started += 1
            result.started[message["item_id"]] = float(message["audio_start_ms"]) - self.offset_ms
        elif kind == "input_audio_buffer.speech_stopped":
            result.stopped[message["item_id"]] = float(message["audio_end_ms"]) - self.offset_ms
        elif kind == "input_audio_buffer.committed":
            item = self._last_commit = message["item_id"]
            result.commits[item] = self.watch.commit_ms.get(item, float("nan"))
            self._commit_wall[item] = now
        elif kind == "conversation.item.input_audio_transcription.completed":
            result.transcripts[message["item_id"]] = message["transcript"]
        elif kind == "bargein.listen.segment":
            result.segments.append(message)
            if message["item_id"] in self._commit_wall:
                result.decided_ms[message["item_id"]] = 1000 * (now - self._commit_wall[message["item_id"]])
        elif kind == "response.created":
            rid = message["response"]["id"]
            result.replies[rid] = Reply(rid, now, self._last_commit)
        elif kind in ("response.output_audio_transcript.delta", "response.output_text.delta"):
            if (reply := result.replies.get(message["response_id"])) is not None:
                reply.text += message["delta"]
                self.reply_audible.set()
        elif kind == "response.done":
            if (reply := result.replies.get(message["response"]["id"])) is not None:
                reply.status = message["response"]["status"]
                details = message["response"].get("status_details") or {}
                reply.reason = details.get("reason")
                if reply.response_id == result.base_reply and reply.status == "cancelled":
                    self._mark("cut", now)
                    self._time_stages(reply.response_id, now)
        elif kind == "bargein.turn.metrics" and message.get("endpoint_ms") is not None:
            result.ledger_endpoint_ms.append(float(message["endpoint_ms"]))
        elif kind == "bargein.reply.paused" and message["response_id"] == result.base_reply:
            result.paused = True
            self._mark("paused", now)
        elif kind == "bargein.reply.resumed" and message["response_id"] == result.base_reply:
            result.resumed = True
            self._mark("resumed", now)

    def _time_stages(self, response_id: str, now: float) -> None:
        asr, case = self.asr, self.result.case
        if isinstance(asr, TimedRecognizer) and self._stream_start is not None and case.kind == "timeline":
            self.result.stages = stages_of(self.clock, asr, case.id, response_id, now, self._stream_start,
                                           self.offset_ms, self._speed, 1000 * case.event_end_s)

    def settled(self) -> bool:
        """Nothing more will happen by itself: no turn open, every segment judged, no reply live
        (for a timeline: its reply resumed, untouched or cut, and any answer under way)."""
        watch, result = self.watch, self.result
        if watch.speaking is not None or watch.untranscribed:
            return False
        judged = {s["item_id"] for s in result.segments}
        if any(item not in judged for item in result.commits):
            return False
        if watch.paused:
            return False
        for reply in result.answers:
            expected = f"You said: {result.transcripts.get(reply.after_item or '', '')}."
            if reply.status is None and len(reply.text) < len(expected):
                return False
        if result.base_reply is None:
            return not watch.live
        return True

    async def wait_settled(self, timeout_s: float) -> None:
        """Poll until :meth:`settled` (or give up and mark the case timed out)."""
        deadline = time.monotonic() + timeout_s
        while not self.settled():
            if time.monotonic() > deadline:
                self.result.timed_out = True
                return
            await asyncio.sleep(0.02)


async def run_case(case: Case, pcm: bytes, vad: VoiceActivityDetector, asr: SpeechRecognizer, *,
                   speed: float, timeline_speed: float, language: str | None = None,
                   ask: bytes | None = None) -> CaseResult:
    """One case in a fresh session; a timeline first starts a long reply and waits for its audio.

    With ``ask`` (the user's own request, spoken first) the reply is the answer to it; without, or if
    the request got no reply, the reply is asked for in text.
    """
    if case.kind == "segment":
        # short fake speech: a reply to a segment only has to show that it happened and what it says
        engines = Engines(vad, asr, FakeLanguageModel(token_delay_s=0.005), FakeSynthesizer(ms_per_char=4.0))
    else:
        engines = Engines(vad, asr, FakeLanguageModel(filler=LONG_REPLY, token_delay_s=0.01), FakeSynthesizer())
    async with Client(case, engines) as client:
        if language:  # the session passes it to every recognition: partial, speculative and final
            await client.send(type="session.update", session={"audio": {"input": {"transcription": {
                "model": "whisper-1", "language": language}}}})
        chunk = CHUNK_BYTES
        if case.channel != "audio/pcm":  # a telephone client: G.711 at 8 kHz, 20 ms = 160 bytes
            wire = AudioFormat(case.channel, 8000)  # type: ignore[arg-type]
            await client.send(type="session.update", session={"audio": {"input": {"format": {"type": case.channel}}}})
            pcm, chunk = wire.encode(np.frombuffer(pcm, dtype="<i2")), 160
            ask = wire.encode(np.frombuffer(ask, dtype="<i2")) if ask is not None else None
        if case.kind == "timeline":
            if ask is not None:
                await client.stream(ask, 1.0, chunk_bytes=chunk)
                client.offset_ms = 20.0 * len(ask) / chunk
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(client.reply_audible.wait(), 10.0)
            if not client.reply_audible.is_set():
                await client.send(type="conversation.item.create", item={"type": "message", "role": "user",
                                  "content": [{"type": "input_text", "text": "Tell me a story."}]})
                await client.send(type="response.create")
                await asyncio.wait_for(client.reply_audible.wait(), 10.0)
            client.result.base_reply = next(iter(client.result.replies), None)
            client.result.asked_by_voice = ask is not None and len(client.result.replies) == 1 and bool(
                client.result.transcripts)
        # a turn with a pause in it is there to test speculation, whose timing needs real time
        real_time = case.kind == "timeline" or case.source == "tts-split"
        client.result.real_time = real_time and timeline_speed == 1.0
        await client.stream(pcm, timeline_speed if real_time else speed, chunk_bytes=chunk)
        await client.wait_settled(20.0)
    return client.result
