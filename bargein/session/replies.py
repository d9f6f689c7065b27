"""The replies of one session: starting, pacing, cancelling and closing them, and what was heard.

The duplex machine decides *whether* a reply starts, may send audio, or is cancelled; this module
does the work: runs the responder task, paces audio to real time, keeps each reply's play estimate
past its ``response.done`` (the client may still be playing), and emits the closing events.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Literal, Protocol

from bargein.engines.base import CancelToken, WordTiming
from bargein.protocol import client_events as ce
from bargein.protocol.errors import ProtocolError
from bargein.protocol.server_events import error_event, new_id
from bargein.protocol.session_config import SessionConfig
from bargein.session import duplex as dx
from bargein.session.history import Conversation, Item
from bargein.session.ledger import TurnLedger
from bargein.session.outbound import Outbound, Outgoing
from bargein.session.playback import Pacer, PlaybackEstimate
from bargein.session.reply_events import ReplyState, assistant_item
from bargein.session.responder import ReplyPlan, Responder
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
            plan = ReplyPlan(reply.response_id, messages, reply.audio, host.config.audio.output.voice,
                             reply.output_format, max_tokens)
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
        self.live[response_id].audio_delta(self._emit, payload.data, payload.duration_ms, payload.words)

    def cancel(self, response_id: str, reason: str) -> None:
        """Stop every stage, drop queued audio, keep what was heard, emit ``response.done`` cancelled."""
        self._cancels.pop(response_id).cancel(reason)
        self.host.outbound.purge(response_id)
        reply = self.live.pop(response_id)
        self._pacers.pop(response_id, None)
        if reply.audio and (entry := self._playback.get(response_id)) is not None:
            reply.item.audio_ms = entry[1].sent_ms  # purged deltas never reached the client
            reply.item.heard_ms = entry[1].heard_ms()
        reply.close(self._emit, "cancelled", reason=reason)
        if self.on_closed:
            self.on_closed(reply, "cancelled")

    def finish(self, response_id: str, status: str) -> None:
        """The reply ended by itself: closing events and ``response.done``."""
        reply = self.live.pop(response_id)
        self._cancels.pop(response_id, None)
        self._pacers.pop(response_id, None)
        final: Literal["failed", "completed"] = "failed" if status == "failed" else "completed"
        reply.close(self._emit, final)
        if self.on_closed:
            self.on_closed(reply, final)

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
