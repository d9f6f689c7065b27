"""One reply's life in the shell, in one object: :class:`ReplyHandle` (in the spirit of LiveKit's ``SpeechHandle``).

A handle is made when the machine starts a reply and carries out what the machine then decides about it: it sends or
holds the output the machine admitted, pauses where the client's playback stands and resumes from exactly there,
cancels or finishes with the reply's ``response.done``, says how much of the reply was heard, and can be awaited
until the client has played the reply out. It decides nothing: each call is one of the machine's actions, routed by
:class:`~bargein.session.reply_runner.ReplyRunner`, or the pipeline's output reaching it through the machine.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field, replace
from typing import Literal

from bargein.engines.fallback import StageFallback
from bargein.protocol.errors import ProtocolError, fallback_error
from bargein.protocol.server_events import error_event, event
from bargein.session.core.closed_playback import speech_cuts
from bargein.session.core.vocabulary import AudioPiece, GenerateReply
from bargein.session.history import Conversation, Item
from bargein.session.outbound import Outbound, Outgoing
from bargein.session.playback import Pacer, PlaybackEstimate
from bargein.session.response_events import ReplyState
from bargein.session.resumption import restarted_clocks, resumption
from bargein.session.tool_use import PendingCalls
from bargein.tools.registry import ToolOutcome
from bargein.values import CancelToken, ToolCall

ClosedStatus = Literal["completed", "cancelled", "failed"]


@dataclass(frozen=True)
class ReplyWiring:
    """What every reply of one session writes to."""

    outbound: Outbound
    conversation: Conversation
    calls: PendingCalls
    """The client's function calls waiting for their output: a reply's call starts waiting here."""


@dataclass
class Pause:
    """Where the client's playback stood when the reply paused, and what was produced since."""

    cut_ms: float
    segment_item_id: str
    held: list[AudioPiece | str | ToolCall] = field(default_factory=list)
    """Audio pieces, text and client tool calls, in the order the pipeline produced them: a call announced during
    the pause would follow the turn over it in the history, unanswered if that turn cuts the reply."""


@dataclass(frozen=True)
class Closing:
    """What a reply's end tells the observers (:meth:`~bargein.session.observers.SessionObserver.on_reply_closed`)."""

    status: ClosedStatus
    sent_ms: float
    """The reply's audio that reached the client."""
    heard_ms: float
    output_queued: bool
    """Any of its output (audio, or a text reply's text) was queued for the client."""
    playing: bool
    """Spoken and not cut short: the client may still be playing it, so ``heard_ms`` is final only once that ends."""


class ReplyHandle:
    """One reply, from ``response.created`` until the client has played it (a little after its ``response.done``)."""

    def __init__(self, state: ReplyState, wiring: ReplyWiring, *, lead_ms: float = 1000.0,
                 playback: PlaybackEstimate | None = None) -> None:
        self.state = state
        self.wiring = wiring
        self.lead_ms = lead_ms
        """How far ahead of the client's playback its audio may be sent (``output_lead_ms``)."""
        self.token = CancelToken()
        """Checked by every stage of the reply's pipeline; cancelled when the reply is."""
        self.pacer = Pacer(lead_ms)
        self.playback = playback if playback is not None else PlaybackEstimate()
        """What the client has played of the reply; kept after the end, for speech while the client still plays."""
        self.forwarded = bytearray()
        """Wire audio sent so far: what a resume re-sends from the cut point."""
        self.paused: Pause | None = None
        self.gate = asyncio.Event()
        """Set while the pipeline may produce; cleared while paused."""
        self.gate.set()
        self.ended = False
        self.over = asyncio.Event()
        """Set once the reply has ended: wakes a wait for its play-out."""
        self.generation: GenerateReply | None = None
        """The machine's word to run the pipeline, and what it speaks (none before it, or for nothing to answer)."""

    @property
    def response_id(self) -> str:
        """The response's id."""
        return self.state.response_id

    def _emit(self, item: Outgoing) -> None:
        self.wiring.outbound.put(item)

    def open(self) -> None:
        """``response.created`` and the opening of the reply's item (added to the conversation)."""
        self.state.open(self._emit, self.wiring.conversation)

    # -- output the machine admitted or held --------------------------------------------------------

    def forward(self, piece: AudioPiece) -> None:
        """Send a piece of audio the machine admitted."""
        self.forwarded += piece.data
        self.state.audio_delta(self._emit, piece.data, piece.duration_ms, piece.words)

    def forward_text(self, text: str) -> None:
        """Send a piece of text the machine admitted."""
        self.state.text_delta(self._emit, text)

    def hold(self, piece: AudioPiece | str) -> None:
        """Audio or text produced while paused waits, in order, for the resume."""
        assert self.paused is not None
        self.paused.held.append(piece)

    def tool_call(self, call: ToolCall) -> None:
        """A call of a client tool becomes a ``function_call`` item; a refused one, a visible error. While the
        reply is paused the call waits with its held output: the turn over it may cut the reply, and a call
        announced then would follow that turn in the history, unanswered."""
        if self.paused is not None:
            self.paused.held.append(call)
            return
        if call.refused:
            self._emit(Outgoing(error_event(ProtocolError(
                f"the model wrote a tool call that was refused: {call.refused}. It wrote: {call.raw[:300]!r}",
                code="invalid_tool_call", type="server_error"))))
            return
        self.state.function_call(self._emit, self.wiring.conversation, call)
        if self.state.in_conversation:
            self.wiring.calls.add(call.call_id)

    def server_call(self, call: ToolCall, outcome: ToolOutcome) -> None:
        """A built-in tool ran inside the reply: shown to clients that asked for bargein's events."""
        self._emit(Outgoing(event("bargein.tool.call", response_id=self.response_id, name=call.name,
                                  call_id=call.call_id, arguments=call.arguments, output=outcome.output,
                                  ok=outcome.ok, repaired=call.repaired, refused=call.refused)))

    def tell_fallback(self, fallback: StageFallback) -> None:
        """The reply is a stage's fallback (the LLM's spoken apology): an ``error`` before its ``response.done``,
        which stays ``completed``; the apology is still spoken and the session goes on."""
        if not self.ended:
            self._emit(Outgoing(error_event(fallback_error(self.response_id, fallback.code, fallback.reason))))

    # -- pause and resume ---------------------------------------------------------------------------

    def pause(self, segment_item_id: str) -> None:
        """Stop sending at once; remember where the client's playback stands (the cut point). The event names the
        reply's item only once the client was told of it: a reply paused before its first words has none yet."""
        self.wiring.outbound.purge(self.response_id)
        cut_ms = self.playback.heard_ms()
        self.paused = Pause(cut_ms, segment_item_id)
        self.gate.clear()
        self._emit(Outgoing(event("bargein.reply.paused", response_id=self.response_id,
                                  item_id=self.state.announced_item_id,
                                  segment_item_id=segment_item_id, audio_end_ms=round(cut_ms, 3))))

    def resume(self) -> None:
        """A false interruption: re-send from the cut point, then what was held, then carry on."""
        pause, self.paused = self.paused, None
        assert pause is not None
        item = self.state.item
        cut = resumption(bytes(self.forwarded), item.heard_ms if item.heard_ms is not None else pause.cut_ms,
                         self.state.output_format, item.words)
        del self.forwarded[cut.cut_byte:]
        item.words = cut.kept_words
        item.audio_ms = cut.cut_ms
        item.heard_ms = None
        item.status = "in_progress"
        self.playback, self.pacer = restarted_clocks(cut.cut_ms, self.lead_ms)
        self._emit(Outgoing(event("bargein.reply.resumed", response_id=self.response_id,
                                  item_id=self.state.announced_item_id, audio_start_ms=round(cut.cut_ms, 3))))
        for piece in [*cut.pieces, *pause.held]:
            if isinstance(piece, str):
                self.forward_text(piece)
            elif isinstance(piece, ToolCall):
                self.tool_call(piece)
            else:
                self.forward(piece)
        self.gate.set()

    # -- what was heard -----------------------------------------------------------------------------

    def audio_left_ms(self) -> float:
        """Audio forwarded to the client (queued or sent) that it has not played yet, by the playback estimate."""
        return self.state.item.audio_ms - self.playback.heard_ms()

    def cut_now(self) -> tuple[float, float]:
        """Where a cancel now cuts a spoken reply's item: ``(audio_ms, heard_ms)``, the audio that reached the
        client (purged deltas never did) and how much of it was heard: a client's truncate, else the pause's
        cut point, else the playback estimate."""
        item = self.state.item
        heard = item.heard_ms if item.heard_ms is not None else \
            self.paused.cut_ms if self.paused is not None else self.playback.heard_ms()
        return self.playback.sent_ms, heard

    def item_as_if_cancelled(self) -> Item:
        """The reply's item as the history will hold it if the reply is cancelled now: a paused spoken reply cut
        where it paused (:meth:`cut_now`), any other as it stands."""
        if self.paused is None or not self.state.audio:
            return self.state.item
        audio_ms, heard_ms = self.cut_now()
        return replace(self.state.item, audio_ms=audio_ms, heard_ms=heard_ms)

    def cut_by_speech(self) -> float | None:
        """The user spoke while the client may still be playing this closed reply: its item keeps what was heard
        by the playback estimate, which is returned; ``None`` when nothing was cut (the reply is still live, was
        cut already by a cancel or the client's truncate, or was played to its end: the machine's
        :func:`~bargein.session.core.closed_playback.speech_cuts` decides, from what was sent and heard)."""
        item = self.state.item
        if not self.ended or (item.heard_ms is not None and item.heard_ms < item.audio_ms):
            return None
        heard = self.playback.heard_ms()
        if not speech_cuts(self.playback.sent_ms, heard):
            return None
        item.heard_ms = heard
        item.status = "incomplete"
        return heard

    async def played_out(self) -> None:
        """Return once the client has had time to play the reply's last sample (a pause waits: a resume sends the
        tail again), or the reply has ended (cancelled, ended by the machine's play-out timer, or stopped by the
        client's truncate)."""
        while not self.ended:
            if not self.gate.is_set():
                await self.gate.wait()
                continue
            left_s = self.audio_left_ms() / 1000.0
            if left_s <= 0.001:
                return
            with contextlib.suppress(TimeoutError):  # the estimate moves as queued deltas leave: look again
                await asyncio.wait_for(self.over.wait(), left_s)

    # -- the end ------------------------------------------------------------------------------------

    def cancel(self, reason: str, *, client_gone: bool = False) -> Closing:
        """Stop every stage, drop queued audio, keep what was heard, emit ``response.done`` cancelled."""
        self.token.cancel(reason)
        self.wiring.outbound.purge(self.response_id)
        self._end()
        item = self.state.item
        if self.state.audio:
            item.audio_ms, item.heard_ms = self.cut_now()
        self.paused = None
        return self._close("cancelled", reason, client_gone=client_gone)

    def finish(self, status: Literal["completed", "failed"], *, client_gone: bool = False) -> Closing:
        """The reply ended by itself: closing events and ``response.done``. One that failed while paused keeps,
        as a cancelled one does, only what was heard up to the pause; one that failed while playing keeps only
        the words of the audio it sent (a clause's text goes out with its first audio, not with its last)."""
        self._end()
        item = self.state.item
        if self.paused is not None:
            self.wiring.outbound.purge(self.response_id)
            if self.state.audio:
                item.audio_ms, item.heard_ms = self.cut_now()
            self.paused = None
        elif status == "failed" and self.state.audio and item.heard_ms is None:
            item.heard_ms = item.audio_ms
        return self._close(status, None, client_gone=client_gone)

    def stop(self, reason: str) -> None:
        """Stop the pipeline's work without a ``response.done`` (the session is ending)."""
        self.token.cancel(reason)

    def _end(self) -> None:
        """The reply is over: free its audio and wake a pipeline waiting on the pause."""
        self.ended = True
        self.forwarded = bytearray()
        self.gate.set()
        self.over.set()

    def _close(self, status: ClosedStatus, reason: str | None, *, client_gone: bool) -> Closing:
        """``response.done``, and what was sent and heard. A spoken reply not cut short is heard in full only once the
        client has played it all: until then the user may still cut it (:meth:`cut_by_speech`); when the client
        is gone, it heard what it had played by now."""
        self.state.close(self._emit, status, reason=reason)
        item = self.state.item
        heard = item.audio_ms if item.heard_ms is None else item.heard_ms
        playing = self.state.audio and heard >= item.audio_ms > 0
        if playing and client_gone:
            heard, playing = min(heard, self.playback.heard_ms()), False
        output_queued = item.audio_ms > 0 if self.state.audio else bool(self.state.text_parts)
        return Closing(status, item.audio_ms, heard, output_queued, playing)
