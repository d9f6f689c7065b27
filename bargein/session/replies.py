"""The replies of one session: starting, pacing, cancelling and closing them, and what was heard.

The duplex machine decides *whether* a reply starts, may send audio, or is cancelled; this module
does the work: runs the responder task, paces audio to real time, keeps each reply's play estimate
past its ``response.done`` (the client may still be playing), and emits the closing events.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from bargein.engines.base import CancelToken, ChatMessage, WordTiming
from bargein.protocol import client_events as ce
from bargein.protocol.errors import ProtocolError
from bargein.protocol.server_events import error_event, event, new_id
from bargein.protocol.session_config import SessionConfig
from bargein.session import duplex as dx
from bargein.session.history import Conversation, Item
from bargein.session.ledger import TurnLedger
from bargein.session.outbound import Outbound, Outgoing
from bargein.session.playback import Pacer, PlaybackEstimate
from bargein.session.reply_events import ReplyState, assistant_item
from bargein.session.responder import ReplyPlan, Responder
from bargein.session.speculation import PrefetchedReply
from bargein.session.transcription import Transcriber

log = logging.getLogger(__name__)
RECENT_REPLIES = 4
"""Finished replies whose play estimate is kept, for a barge-in while the client still plays them."""


class ReplyHost(Protocol):
    """What the replies need from their session."""

    config: SessionConfig
    conversation: Conversation
    outbound: Outbound
    transcriber: Transcriber
    machine: dx.DuplexMachine

    def feed(self, machine_event: dx.Event) -> None:
        """Give the duplex machine an event and carry out its actions."""

    def ledger_for(self, response_id: str) -> TurnLedger | None:
        """The turn ledger a reply belongs to."""


@dataclass
class _Pause:
    cut_ms: float
    segment_item_id: str
    held: list[AudioPiece] = field(default_factory=list)


class AudioPiece:
    """Wire audio travelling through the machine as an opaque payload."""

    __slots__ = ("data", "duration_ms", "words")

    def __init__(self, data: bytes, duration_ms: float, words: Sequence[WordTiming]) -> None:
        self.data = data
        self.duration_ms = duration_ms
        self.words = words


class Replies:
    """Live and recently finished replies of one session."""

    def __init__(self, host: ReplyHost, responder: Responder, *, output_lead_ms: float = 1000.0,
                 on_closed: Callable[[ReplyState, str], None] | None = None) -> None:
        self.host = host
        self.responder = responder
        self.output_lead_ms = output_lead_ms
        self.on_closed = on_closed
        self.live: dict[str, ReplyState] = {}
        self._cancels: dict[str, CancelToken] = {}
        self._pacers: dict[str, Pacer] = {}
        self._playback: dict[str, tuple[Item, PlaybackEstimate]] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.pending_params: ce.ResponseParams | None = None
        self._forwarded: dict[str, bytearray] = {}
        """Each live reply's wire audio so far: what a resume re-sends from the cut point."""
        self._pauses: dict[str, _Pause] = {}
        self._gates: dict[str, asyncio.Event] = {}
        self.prefetch_for: Callable[[list[ChatMessage]], PrefetchedReply | None] | None = None

    def _emit(self, item: Outgoing) -> None:
        self.host.outbound.put(item)

    def start(self, response_id: str, trigger: str) -> None:
        """Open the reply's events and start generating it."""
        host = self.host
        params, self.pending_params = self.pending_params, None
        modalities = params.output_modalities if params and params.output_modalities else host.config.output_modalities
        audio = "audio" in modalities
        reply = ReplyState(response_id, assistant_item(new_id("item"), audio=audio), audio,
                           host.config.output_format, host.config.audio.output.voice,
                           in_conversation=not (params and params.conversation == "none"),
                           metadata=params.metadata if params else None)
        self.live[response_id] = reply
        self._playback[response_id] = (reply.item, PlaybackEstimate())
        while len(self._playback) > RECENT_REPLIES:
            self._playback.pop(next(iter(self._playback)))
        self._pacers[response_id] = Pacer(self.output_lead_ms)
        self._forwarded[response_id] = bytearray()
        self._gates[response_id] = asyncio.Event()
        self._gates[response_id].set()
        cancel = self._cancels[response_id] = CancelToken()
        reply.open(self._emit, host.conversation)
        instructions = params.instructions if params and params.instructions else host.config.instructions
        max_tokens = params.max_output_tokens if params and params.max_output_tokens else host.config.max_output_tokens
        task = asyncio.create_task(self._run(reply, cancel, instructions,
                                             None if max_tokens == "inf" else max_tokens, trigger))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _run(self, reply: ReplyState, cancel: CancelToken, instructions: str,
                   max_tokens: int | None, trigger: str) -> None:
        host = self.host
        failed = False
        try:
            await host.transcriber.wait_all()  # the reply answers what the user said, so it needs the words
            if cancel.cancelled:
                return
            if trigger == "turn_detected" and not self._last_user_text():
                log.info("reply %s: the turn had no words, so nothing to answer", reply.response_id)
                return
            messages = host.conversation.chat_messages(instructions)
            reply.input_tokens = sum(len(m.content.split()) for m in messages)
            prefetched = self.prefetch_for(messages) if self.prefetch_for is not None else None
            plan = ReplyPlan(reply.response_id, messages, reply.audio, host.config.audio.output.voice,
                             reply.output_format, max_tokens,
                             prefetched.adopt(cancel) if prefetched is not None else None)
            await self.responder.run(plan, _Sink(self), cancel)
        except Exception as error:
            failed = True
            log.exception("reply %s failed", reply.response_id)
            if host.machine.active_response_id == reply.response_id:
                self._emit(Outgoing(error_event(ProtocolError(
                    f"the reply failed in an engine: {type(error).__name__}: {error}"[:500],
                    code="engine_error", type="server_error"))))
        finally:
            if host.machine.active_response_id == reply.response_id:
                host.feed(dx.ReplyFinished(reply.response_id, failed=failed))

    def _last_user_text(self) -> str:
        user_items = [item for item in self.host.conversation if item.role == "user"]
        return " ".join(p.text for p in user_items[-1].parts).strip() if user_items else ""

    def forward(self, response_id: str, payload: object) -> None:
        """Send a piece of audio the machine admitted."""
        assert isinstance(payload, AudioPiece)
        self._forwarded[response_id] += payload.data
        self.live[response_id].audio_delta(self._emit, payload.data, payload.duration_ms, payload.words)

    def pause(self, response_id: str, item_id: str) -> None:
        """Stop sending at once; remember where the client's playback stands (the cut point)."""
        reply = self.live[response_id]
        self.host.outbound.purge(response_id)
        entry = self._playback.get(response_id)
        cut_ms = entry[1].heard_ms() if entry is not None else 0.0
        self._pauses[response_id] = _Pause(cut_ms, item_id)
        self._gates[response_id].clear()
        self._emit(Outgoing(event("bargein.reply.paused", response_id=response_id, item_id=reply.item.id,
                                  segment_item_id=item_id, audio_end_ms=round(cut_ms, 3))))

    def hold(self, response_id: str, payload: object) -> None:
        """Audio produced while paused waits, in order, for the resume."""
        assert isinstance(payload, AudioPiece)
        self._pauses[response_id].held.append(payload)

    def resume(self, response_id: str) -> None:
        """A false interruption: re-send from the cut point, then the held audio, then carry on.

        The client dropped what it had not played when it saw ``speech_started``, so the reply restarts
        at exactly the sample where playback stopped: no sample is lost and none is played twice.
        """
        pause = self._pauses.pop(response_id)
        reply = self.live[response_id]
        item = reply.item
        fmt = reply.output_format
        cut_ms = item.heard_ms if item.heard_ms is not None else pause.cut_ms
        forwarded = self._forwarded[response_id]
        cut_byte = min(len(forwarded), round(cut_ms * fmt.rate / 1000) * fmt.bytes_per_sample)
        cut_ms = 1000.0 * cut_byte / fmt.bytes_per_sample / fmt.rate
        tail = bytes(forwarded[cut_byte:])
        tail_words = [WordTiming(w.word, w.start_ms - cut_ms, w.end_ms - cut_ms) for w in item.words
                      if w.start_ms >= cut_ms]
        del forwarded[cut_byte:]
        item.words = [w for w in item.words if w.start_ms < cut_ms]
        item.audio_ms = cut_ms
        item.heard_ms = None
        item.status = "in_progress"
        now = time.monotonic()
        estimate = PlaybackEstimate(sent_ms=cut_ms, first_sent_wall_s=now - cut_ms / 1000.0)
        self._playback[response_id] = (item, estimate)
        self._pacers[response_id] = Pacer(self.output_lead_ms, started_s=now - cut_ms / 1000.0)
        self._emit(Outgoing(event("bargein.reply.resumed", response_id=response_id, item_id=item.id,
                                  audio_start_ms=round(cut_ms, 3))))
        step = round(fmt.rate * 0.2) * fmt.bytes_per_sample
        for offset in range(0, len(tail), step):
            piece = tail[offset:offset + step]
            start_ms = 1000.0 * offset / fmt.bytes_per_sample / fmt.rate
            duration_ms = 1000.0 * len(piece) / fmt.bytes_per_sample / fmt.rate
            words = [WordTiming(w.word, w.start_ms - start_ms, w.end_ms - start_ms) for w in tail_words
                     if start_ms <= w.start_ms < start_ms + duration_ms]
            self.forward(response_id, AudioPiece(piece, duration_ms, words))
        for held in pause.held:
            self.forward(response_id, held)
        self._gates[response_id].set()

    def cancel(self, response_id: str, reason: str) -> None:
        """Stop every stage, drop queued audio, keep what was heard, emit ``response.done`` cancelled."""
        self._cancels.pop(response_id).cancel(reason)
        self.host.outbound.purge(response_id)
        reply = self.live.pop(response_id)
        self._drop_state(response_id)
        pause = self._pauses.pop(response_id, None)
        if reply.audio and (entry := self._playback.get(response_id)) is not None:
            reply.item.audio_ms = entry[1].sent_ms  # purged deltas never reached the client
            if reply.item.heard_ms is None:  # a client truncate during a pause is the better figure
                reply.item.heard_ms = pause.cut_ms if pause is not None else entry[1].heard_ms()
        reply.close(self._emit, "cancelled", reason=reason)
        if self.on_closed:
            self.on_closed(reply, "cancelled")

    def finish(self, response_id: str, status: str) -> None:
        """The reply ended by itself: closing events and ``response.done``."""
        reply = self.live.pop(response_id)
        self._cancels.pop(response_id, None)
        self._drop_state(response_id)
        final: Literal["failed", "completed"] = "failed" if status == "failed" else "completed"
        reply.close(self._emit, final)
        if self.on_closed:
            self.on_closed(reply, final)

    def _drop_state(self, response_id: str) -> None:
        self._pacers.pop(response_id, None)
        self._forwarded.pop(response_id, None)
        gate = self._gates.pop(response_id, None)
        if gate is not None:
            gate.set()  # a responder waiting on a pause must wake up to see the cancel

    def cut_playing(self) -> None:
        """The user spoke while the client may still be playing a finished reply: keep what was heard.

        A client truncate, if one follows, replaces this estimate with its playback cursor.
        """
        for response_id, (item, estimate) in self._playback.items():
            if response_id in self.live or item.heard_ms is not None:
                continue
            heard = estimate.heard_ms()
            if heard < estimate.sent_ms - 1.0:
                item.heard_ms = heard
                item.status = "incomplete"

    def on_sent(self, item: Outgoing) -> None:
        """An audio delta left for the client: advance that reply's play estimate."""
        if item.response_id is not None and (entry := self._playback.get(item.response_id)) is not None:
            entry[1].on_sent(item.audio_ms)

    def close(self) -> list[asyncio.Task[None]]:
        """Cancel every live reply's work (the session is ending); returns the tasks to await."""
        for token in self._cancels.values():
            token.cancel("session closed")
        for task in self.tasks:
            task.cancel()
        return list(self.tasks)


class _Sink:
    """The responder's view of the session: only the active reply gets through."""

    def __init__(self, replies: Replies) -> None:
        self.replies = replies

    async def wait_for_room(self, response_id: str) -> None:
        replies = self.replies
        if (gate := replies._gates.get(response_id)) is not None:
            await gate.wait()
        await replies.host.outbound.wait_for_room()
        reply = replies.live.get(response_id)
        pacer = replies._pacers.get(response_id)
        if reply is not None and pacer is not None and (delay := pacer.delay_s(reply.item.audio_ms)) > 0:
            await asyncio.sleep(delay)

    def reply_text(self, response_id: str, text: str) -> None:
        replies = self.replies
        if replies.host.machine.active_response_id == response_id:
            replies.live[response_id].text_delta(replies._emit, text)

    def reply_audio(self, response_id: str, payload: bytes, duration_ms: float,
                    words: Sequence[WordTiming]) -> None:
        self.replies.host.feed(dx.ReplyAudio(response_id, AudioPiece(payload, duration_ms, words)))

    def reply_mark(self, response_id: str, stage: str) -> None:
        if (ledger := self.replies.host.ledger_for(response_id)) is not None:
            ledger.mark(stage)

    def reply_tokens(self, response_id: str, count: int) -> None:
        reply = self.replies.live.get(response_id)
        if reply is not None:
            reply.output_tokens += count
        if (ledger := self.replies.host.ledger_for(response_id)) is not None:
            ledger.add("tokens", count)
