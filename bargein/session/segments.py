"""The listening shell: follows each spoken segment from onset to the classifier's verdict.

It keeps the segment's VAD statistics and the session's noise floor, runs partial recognition while
the user speaks (``input_audio_transcription.delta`` and the words semantic endpointing needs),
starts speculative recognition and replies when the silence begins, and once a committed segment
is transcribed, classifies it, reports the decision in ``bargein.listen.segment`` and tells the
duplex machine. Noise segments are deleted from the conversation.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Protocol

from bargein.engines.base import ChatMessage, Transcript
from bargein.protocol.server_events import event
from bargein.protocol.session_config import SessionConfig
from bargein.session import duplex as dx
from bargein.session.history import Conversation, Item
from bargein.session.listener import Listener
from bargein.session.listening import ListenDecision, NoiseFloor, SegmentStats, classify, segment_event_fields
from bargein.session.outbound import Outbound, Outgoing
from bargein.session.responder import generation_options
from bargein.session.speculation import Speculator

log = logging.getLogger(__name__)
PARTIAL_EVERY_MS = 1000.0
"""Partial recognition runs at most this often while the user speaks (and never twice at once)."""
FRAME_MS = 32.0


class SegmentHost(Protocol):
    """What the listening shell needs from its session."""

    config: SessionConfig
    conversation: Conversation
    outbound: Outbound
    listener: Listener
    machine: dx.DuplexMachine

    def feed(self, machine_event: dx.Event) -> None:
        """Give the duplex machine an event and carry out its actions."""


class Segments:
    """Per-segment statistics, partials, speculation and classification for one session."""

    def __init__(self, host: SegmentHost, speculator: Speculator, *, partials: bool = True) -> None:
        self.host = host
        self.speculator = speculator
        self.partials = partials
        self.noise_floor = NoiseFloor()
        self._stats: dict[str, SegmentStats] = {}
        self._onsets: dict[str, float] = {}
        self._floors: dict[str, float] = {}
        self._awaiting: set[str] = set()
        self._speaking: str | None = None
        self._partial_task: asyncio.Task[None] | None = None
        self._partial_at_ms = 0.0
        self._partial_sent: dict[str, str] = {}
        self.decisions: dict[str, ListenDecision] = {}

    # -- while the user speaks ----------------------------------------------------------------------

    def frame(self, frame: dx.VadFrame) -> None:
        """Every VAD frame: the noise floor, the speaking segment's statistics, partial recognition."""
        self.noise_floor.observe(frame.probability, frame.energy_db)
        if self._speaking is None:
            return
        stats = self._stats.get(self._speaking)
        if stats is not None:
            stats.add(frame.probability, frame.energy_db, frame.end_ms - frame.start_ms)
        if (self.partials and frame.end_ms - self._partial_at_ms >= PARTIAL_EVERY_MS
                and (self._partial_task is None or self._partial_task.done())):
            self._partial_at_ms = frame.end_ms
            self._partial_task = asyncio.create_task(self._partial(self._speaking))

    def started(self, item_id: str, onset_ms: float) -> None:
        """Speech began: a new segment."""
        threshold = self.host.machine.settings.threshold if self.host.machine.settings else 0.5
        self._stats[item_id] = SegmentStats(threshold=threshold)
        self._onsets[item_id] = onset_ms
        # the background as it was when the segment began: frames after the endpoint must not move it
        self._floors[item_id] = self.noise_floor.level_db
        self._speaking = item_id
        self._partial_at_ms = onset_ms
        while len(self._stats) > 32:
            oldest = next(iter(self._stats))
            self._stats.pop(oldest)
            self._onsets.pop(oldest, None)
            self._floors.pop(oldest, None)

    def stopped(self, item_id: str) -> None:
        """The endpoint came: no more partials for this segment."""
        if self._speaking == item_id:
            self._speaking = None

    def _segment_audio(self, item_id: str, end_ms: float | None = None):  # type: ignore[no-untyped-def]
        settings = self.host.machine.settings
        padding = settings.prefix_padding_ms if settings else 300
        return self.host.listener.buffer.peek(max(0.0, self._onsets.get(item_id, 0.0) - padding), end_ms)

    async def _partial(self, item_id: str) -> None:
        asr = self.speculator.asr
        recognise = getattr(asr, "transcribe_partial", asr.transcribe)
        try:
            transcript: Transcript = await recognise(self._segment_audio(item_id))
        except Exception:
            log.exception("partial recognition failed")
            return
        if self._speaking != item_id:
            return
        self._report_partial(item_id, transcript.text.strip())

    def _report_partial(self, item_id: str, text: str) -> None:
        self.host.feed(dx.PartialTranscript(item_id, text))
        sent = self._partial_sent.get(item_id, "")
        if text.startswith(sent) and len(text) > len(sent):
            self.host.outbound.put(Outgoing(event("conversation.item.input_audio_transcription.delta",
                                                  item_id=item_id, content_index=0, delta=text[len(sent):])))
            self._partial_sent[item_id] = text

    # -- speculation --------------------------------------------------------------------------------

    def silence_began(self, item_id: str, at_ms: float) -> None:
        """Start recognising the turn so far; a query also starts its reply, privately."""
        task = self.speculator.recognise(item_id, self._segment_audio(item_id, at_ms + FRAME_MS))
        if task is not None:
            task.add_done_callback(lambda done: self._guessed(item_id, done))

    def _guessed(self, item_id: str, task: asyncio.Task[Transcript]) -> None:
        if task.cancelled() or task.exception() is not None:
            return
        transcript = task.result()
        if self._speaking == item_id:
            self._report_partial(item_id, transcript.text.strip())
        config = self.host.config
        stats = self._stats.get(item_id)
        if stats is None or "audio" not in config.output_modalities or not config_creates_response(config):
            return
        verdict = classify(stats, transcript, during_reply=self.host.machine.active_response_id is not None,
                           noise_floor_db=self._floors.get(item_id, self.noise_floor.level_db))
        if verdict.decision == "query" and self.host.machine.active_response_id is None:
            messages = [*self.host.conversation.chat_messages(config.instructions),
                        ChatMessage("user", transcript.text.strip())]
            max_tokens = config.max_output_tokens
            self.speculator.prefetch(item_id, messages, generation_options(None if max_tokens == "inf" else max_tokens))

    def speech_resumed(self, item_id: str) -> None:
        """The user went on: whatever was guessed for this turn is waste."""
        self.speculator.drop(item_id)

    # -- after the endpoint -------------------------------------------------------------------------

    def await_classification(self, item_id: str) -> None:
        """The machine waits for this segment's verdict; it comes once its transcript does."""
        self._awaiting.add(item_id)

    def transcribed(self, item: Item, transcript: Transcript | None) -> None:
        """A committed item's recognition finished (or failed): classify it if the machine waits."""
        if item.id not in self._awaiting:
            return
        self._awaiting.discard(item.id)
        stats = self._stats.pop(item.id, SegmentStats())
        during_reply = self.host.machine.paused or self.host.machine.active_response_id is not None
        floor = self._floors.pop(item.id, self.noise_floor.level_db)
        verdict = classify(stats, transcript, during_reply=during_reply, noise_floor_db=floor)
        self.decisions[item.id] = verdict
        while len(self.decisions) > 64:
            self.decisions.pop(next(iter(self.decisions)))
        paused = self.host.machine.paused
        if verdict.decision == "query":
            action = "cut the reply and answer" if paused else "answer"
        else:
            action = "resume the reply" if paused else "ignore"
        self.host.outbound.put(Outgoing(event("bargein.listen.segment",
                                              **segment_event_fields(item.id, verdict, action))))
        self.host.feed(dx.SegmentClassified(item.id, verdict.decision))

    def discard(self, item_id: str) -> None:
        """A noise segment leaves the conversation."""
        with contextlib.suppress(Exception):
            self.host.conversation.delete(item_id)
            self.host.outbound.put(Outgoing(event("conversation.item.deleted", item_id=item_id)))

    def typed(self, item: Item) -> None:
        """Typed input is VITA's third state: always addressed to the agent."""
        self.host.outbound.put(Outgoing(event("bargein.listen.segment", item_id=item.id, decision="text",
                                              reasons=["typed input"], action="keep")))

    def close(self) -> None:
        """Stop partial recognition and speculation."""
        if self._partial_task is not None:
            self._partial_task.cancel()
        self.speculator.close()


def config_creates_response(config: SessionConfig) -> bool:
    """Whether a detected turn gets an automatic reply."""
    detection = config.audio.input.turn_detection
    return detection is not None and detection.create_response
