"""The duplex turn-taking state machine: pure, no I/O, no clock of its own.

Sans-I/O in the style of h11/wsproto: the shell ``feed``s small frozen events (a VAD frame crossed a
threshold, the client committed, a reply produced audio, ...) and ``take_actions`` returns what is
due (emit ``speech_started``, commit the buffer, start or cancel a reply, forward or drop audio).
Time is stream time carried by the events themselves, so a scripted timeline with a fake clock
replays exactly.

The machine owns two decisions that must never race: *when a user turn starts and ends* (server VAD
with hysteresis, prefix padding and silence duration) and *which reply is allowed to reach the
client*. Audio from any reply other than the active one is dropped by id, so nothing produced for a
cancelled reply can follow its ``response.done``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from bargein.protocol.errors import ProtocolError

MIN_COMMIT_MS = 100.0
"""Shortest buffer a commit accepts (the OpenAI Realtime API's rule)."""
HYSTERESIS = 0.15
"""Speech ends below ``threshold - HYSTERESIS`` (Silero's recommended offset threshold)."""


class Phase(enum.Enum):
    """Where the conversation is, seen from both sides at once."""

    LISTENING = "listening"
    USER_SPEAKING = "user_speaking"
    THINKING = "thinking"
    AGENT_SPEAKING = "agent_speaking"


@dataclass(frozen=True)
class TurnSettings:
    """The part of ``turn_detection`` the machine needs; ``None`` in the session means manual turns."""

    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500
    create_response: bool = True
    interrupt_response: bool = True
    idle_timeout_ms: int | None = None


# --- events (inputs) ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class VadFrame:
    """Speech probability of the input audio between ``start_ms`` and ``end_ms`` (stream time)."""

    start_ms: float
    end_ms: float
    probability: float


@dataclass(frozen=True)
class ClientCommit:
    """``input_audio_buffer.commit`` with ``buffered_ms`` of audio in the buffer."""

    buffered_ms: float
    event_id: str | None = None


@dataclass(frozen=True)
class ClientClear:
    """``input_audio_buffer.clear``."""


@dataclass(frozen=True)
class ClientResponseCreate:
    """``response.create``."""

    event_id: str | None = None


@dataclass(frozen=True)
class ClientResponseCancel:
    """``response.cancel``, optionally naming the response."""

    response_id: str | None = None
    event_id: str | None = None


@dataclass(frozen=True)
class ReplyAudio:
    """A reply produced a chunk of audio (``payload`` is opaque to the machine)."""

    response_id: str
    payload: object = None


@dataclass(frozen=True)
class ReplyFinished:
    """A reply's generation ended by itself (all its audio has been fed)."""

    response_id: str
    failed: bool = False


@dataclass(frozen=True)
class IdleTimerFired:
    """The idle timer armed by :class:`ArmIdleTimer` ran out at stream time ``at_ms``."""

    at_ms: float


@dataclass(frozen=True)
class SettingsChanged:
    """``session.update`` changed turn detection (``None``: manual turns)."""

    settings: TurnSettings | None


Event = (VadFrame | ClientCommit | ClientClear | ClientResponseCreate | ClientResponseCancel | ReplyAudio
         | ReplyFinished | IdleTimerFired | SettingsChanged)


# --- actions (outputs) --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SpeechStarted:
    """Emit ``input_audio_buffer.speech_started``; the user item will be ``item_id``."""

    item_id: str
    audio_start_ms: float


@dataclass(frozen=True)
class SilenceBegan:
    """The VAD first saw silence in a turn: speculative recognition may start."""

    item_id: str
    at_ms: float


@dataclass(frozen=True)
class SpeechResumed:
    """Speech came back before the endpoint: speculative work for ``item_id`` is stale."""

    item_id: str


@dataclass(frozen=True)
class SpeechStopped:
    """Emit ``input_audio_buffer.speech_stopped``."""

    item_id: str
    audio_end_ms: float


@dataclass(frozen=True)
class CommitBuffer:
    """Turn input audio into user item ``item_id``: from ``start_ms`` (``None``: buffer start) to ``end_ms``."""

    item_id: str
    start_ms: float | None
    end_ms: float | None
    event_id: str | None = None


@dataclass(frozen=True)
class ClearBuffer:
    """Drop buffered input audio and emit ``input_audio_buffer.cleared``."""


@dataclass(frozen=True)
class StartReply:
    """Create response ``response_id`` (trigger: the VAD endpoint, the client or the idle timer)."""

    response_id: str
    trigger: Literal["turn_detected", "client", "idle_timeout"]


@dataclass(frozen=True)
class CancelReply:
    """Stop every stage of ``response_id`` and emit its ``response.done`` with status ``cancelled``."""

    response_id: str
    reason: Literal["turn_detected", "client_cancelled"]


@dataclass(frozen=True)
class ForwardAudio:
    """Send this chunk of the active reply to the client."""

    response_id: str
    payload: object


@dataclass(frozen=True)
class DropAudio:
    """A chunk of a reply that is no longer active: never sent."""

    response_id: str


@dataclass(frozen=True)
class CompleteReply:
    """Emit the reply's closing events and ``response.done`` (completed or failed)."""

    response_id: str
    status: Literal["completed", "failed"]


@dataclass(frozen=True)
class ArmIdleTimer:
    """Fire :class:`IdleTimerFired` after ``delay_ms`` of no speech (re-arming replaces the old timer)."""

    delay_ms: int


@dataclass(frozen=True)
class DisarmIdleTimer:
    """Cancel a pending idle timer."""


@dataclass(frozen=True)
class IdleTimeout:
    """Emit ``input_audio_buffer.timeout_triggered`` for an empty turn ``item_id``."""

    item_id: str
    audio_start_ms: float
    audio_end_ms: float


@dataclass(frozen=True)
class Reject:
    """Answer a client event with an ``error`` event; nothing else changes."""

    error: ProtocolError


Action = (SpeechStarted | SilenceBegan | SpeechResumed | SpeechStopped | CommitBuffer | ClearBuffer
          | StartReply | CancelReply | ForwardAudio | DropAudio | CompleteReply | ArmIdleTimer
          | DisarmIdleTimer | IdleTimeout | Reject)


class IllegalTransition(RuntimeError):
    """The shell fed something impossible (a programming error, never a client error)."""


@dataclass
class _Turn:
    item_id: str
    onset_ms: float
    silence_since_ms: float | None = None


@dataclass
class _Reply:
    response_id: str
    has_audio: bool = False


@dataclass
class DuplexMachine:
    """Turn-taking and reply admission for one session.

    ``new_id(prefix)`` supplies item and response ids (deterministic in tests).
    """

    new_id: Callable[[str], str]
    settings: TurnSettings | None = field(default_factory=TurnSettings)
    _turn: _Turn | None = field(default=None, init=False)
    _reply: _Reply | None = field(default=None, init=False)
    _last_ms: float = field(default=0.0, init=False)
    _actions: list[Action] = field(default_factory=list, init=False)
    finished_replies: set[str] = field(default_factory=set, init=False)

    # -- the two public methods ---------------------------------------------------------------------

    def feed(self, event: Event) -> None:
        """Take one event; its consequences are queued for :meth:`take_actions`."""
        handler = getattr(self, f"_on_{type(event).__name__}", None)
        if handler is None:
            raise IllegalTransition(f"no transition for {type(event).__name__}")
        handler(event)

    def take_actions(self) -> list[Action]:
        """Everything due since the last call, in order."""
        actions, self._actions = self._actions, []
        return actions

    # -- state, for the shell and for tests ---------------------------------------------------------

    @property
    def phase(self) -> Phase:
        """The current phase."""
        if self._turn is not None:
            return Phase.USER_SPEAKING
        if self._reply is None:
            return Phase.LISTENING
        return Phase.AGENT_SPEAKING if self._reply.has_audio else Phase.THINKING

    @property
    def active_response_id(self) -> str | None:
        """The only reply whose audio may reach the client."""
        return self._reply.response_id if self._reply else None

    @property
    def speaking_item_id(self) -> str | None:
        """The user item being spoken, if the user is speaking."""
        return self._turn.item_id if self._turn else None

    # -- transitions --------------------------------------------------------------------------------

    def _on_VadFrame(self, frame: VadFrame) -> None:
        if frame.end_ms < self._last_ms or frame.end_ms < frame.start_ms:
            raise IllegalTransition(f"VAD frame {frame} goes back in stream time (at {self._last_ms})")
        self._last_ms = frame.end_ms
        settings = self.settings
        if settings is None:
            return
        speech = frame.probability >= settings.threshold
        silence = frame.probability < max(settings.threshold - HYSTERESIS, 0.01)
        turn = self._turn
        if turn is None:
            if speech:
                self._begin_turn(frame.start_ms, settings)
            return
        if speech and turn.silence_since_ms is not None:
            turn.silence_since_ms = None
            self._emit(SpeechResumed(turn.item_id))
        elif silence and turn.silence_since_ms is None:
            turn.silence_since_ms = frame.start_ms
            self._emit(SilenceBegan(turn.item_id, frame.start_ms))
        if turn.silence_since_ms is not None and \
                frame.end_ms - turn.silence_since_ms >= settings.silence_duration_ms:
            self._end_turn(turn, settings, frame.end_ms)

    def _begin_turn(self, onset_ms: float, settings: TurnSettings) -> None:
        self._turn = _Turn(self.new_id("item"), onset_ms)
        self._emit(DisarmIdleTimer())
        self._emit(SpeechStarted(self._turn.item_id, onset_ms))
        if self._reply is not None and settings.interrupt_response:
            self._cancel_active("turn_detected")

    def _end_turn(self, turn: _Turn, settings: TurnSettings, now_ms: float) -> None:
        assert turn.silence_since_ms is not None
        self._turn = None
        self._emit(SpeechStopped(turn.item_id, turn.silence_since_ms))
        start = max(0.0, turn.onset_ms - settings.prefix_padding_ms)
        self._emit(CommitBuffer(turn.item_id, start, now_ms))
        if settings.create_response and self._reply is None:
            self._start_reply("turn_detected")

    def _on_ClientCommit(self, event: ClientCommit) -> None:
        turn, self._turn = self._turn, None
        if event.buffered_ms < MIN_COMMIT_MS and turn is None:
            self._emit(Reject(ProtocolError(
                f"buffer too small: expected at least {MIN_COMMIT_MS:.0f} ms of audio, "
                f"have {event.buffered_ms:.2f} ms",
                code="input_audio_buffer_commit_empty", event_id=event.event_id)))
            return
        item_id = turn.item_id if turn else self.new_id("item")
        if turn is not None:
            self._emit(SpeechStopped(item_id, self._last_ms))
        self._emit(CommitBuffer(item_id, None, None, event_id=event.event_id))
        # in server-VAD mode a commit is an endpoint, and the reply follows as it would after silence
        if self.settings is not None and self.settings.create_response and self._reply is None:
            self._start_reply("turn_detected")

    def _on_ClientClear(self, _event: ClientClear) -> None:
        self._turn = None
        self._emit(ClearBuffer())

    def _on_ClientResponseCreate(self, event: ClientResponseCreate) -> None:
        if self._reply is not None:
            self._emit(Reject(ProtocolError(
                f"conversation already has an active response in progress: {self._reply.response_id}",
                code="conversation_already_has_active_response", event_id=event.event_id)))
            return
        self._start_reply("client")

    def _on_ClientResponseCancel(self, event: ClientResponseCancel) -> None:
        reply = self._reply
        if reply is None or (event.response_id is not None and event.response_id != reply.response_id):
            self._emit(Reject(ProtocolError(
                "cancellation failed: no active response found"
                + (f" with id {event.response_id}" if event.response_id else ""),
                code="response_cancel_not_active", param="response_id", event_id=event.event_id)))
            return
        self._cancel_active("client_cancelled")

    def _on_ReplyAudio(self, event: ReplyAudio) -> None:
        reply = self._reply
        if reply is None or reply.response_id != event.response_id:
            self._emit(DropAudio(event.response_id))
            return
        reply.has_audio = True
        self._emit(ForwardAudio(event.response_id, event.payload))

    def _on_ReplyFinished(self, event: ReplyFinished) -> None:
        reply = self._reply
        if reply is None or reply.response_id != event.response_id:
            if event.response_id not in self.finished_replies:
                raise IllegalTransition(f"reply {event.response_id} finished but was never started")
            return  # it was cancelled; its response.done is already out
        self._reply = None
        self.finished_replies.add(reply.response_id)
        self._emit(CompleteReply(reply.response_id, "failed" if event.failed else "completed"))
        self._arm_idle_timer()

    def _on_IdleTimerFired(self, event: IdleTimerFired) -> None:
        if self._turn is not None or self._reply is not None or self.settings is None:
            return  # the user or the agent spoke meanwhile: the timer is stale
        item_id = self.new_id("item")
        self._emit(IdleTimeout(item_id, event.at_ms, event.at_ms))
        self._start_reply("idle_timeout")

    def _on_SettingsChanged(self, event: SettingsChanged) -> None:
        self.settings = event.settings
        if event.settings is None:
            self._turn = None
            self._emit(DisarmIdleTimer())

    # -- helpers ------------------------------------------------------------------------------------

    def _start_reply(self, trigger: Literal["turn_detected", "client", "idle_timeout"]) -> None:
        self._reply = _Reply(self.new_id("resp"))
        self._emit(DisarmIdleTimer())
        self._emit(StartReply(self._reply.response_id, trigger))

    def _cancel_active(self, reason: Literal["turn_detected", "client_cancelled"]) -> None:
        assert self._reply is not None
        response_id = self._reply.response_id
        self._reply = None
        self.finished_replies.add(response_id)
        self._emit(CancelReply(response_id, reason))

    def _arm_idle_timer(self) -> None:
        if self.settings is not None and self.settings.idle_timeout_ms:
            self._emit(ArmIdleTimer(self.settings.idle_timeout_ms))

    def _emit(self, action: Action) -> None:
        self._actions.append(action)
