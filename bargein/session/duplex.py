"""The duplex turn-taking state machine: pure, no I/O, no clock of its own.

Sans-I/O in the style of h11/wsproto: the shell ``feed``s small frozen events (a VAD frame, a client
event, a reply's audio, a classifier decision, a timer) and ``take_actions`` returns what is due.
Time is stream time carried by the events, so a scripted timeline with a fake clock replays exactly.

What it decides, and nothing else:
- *when a user turn starts and ends*: server VAD with hysteresis, prefix padding and an endpoint
  silence that semantic VAD and the storm guard can lengthen or shorten;
- *what a segment means*: with listening on, every committed segment waits for the classifier;
  a query is answered, noise is discarded and never enters the history;
- *what happens to a reply the user talks over*: it pauses at once (no more audio goes out), then a
  query cancels it and a false interruption resumes it from the cut point;
- *which reply may reach the client*: audio from any reply but the active one is dropped by id, so
  nothing produced for a cancelled reply can follow its ``response.done``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from bargein.protocol.errors import ProtocolError
from bargein.session.endpointing import endpoint_silence_ms
from bargein.session.storm_guard import StormGuard
from bargein.session.turn_events import *  # noqa: F403 - the machine's vocabulary is part of its interface
from bargein.session.turn_events import (
    Action,
    ArmIdleTimer,
    ArmPauseTimer,
    AwaitClassification,
    CancelReply,
    ClearBuffer,
    ClientClear,
    ClientCommit,
    ClientResponseCancel,
    ClientResponseCreate,
    CommitBuffer,
    CompleteReply,
    DisarmIdleTimer,
    DiscardSegment,
    DropAudio,
    Event,
    ForwardAudio,
    HoldAudio,
    IdleTimeout,
    IdleTimerFired,
    ModeChanged,
    PartialTranscript,
    PauseReply,
    PauseTimerFired,
    Phase,
    Reject,
    ReplyAudio,
    ReplyFinished,
    ResumeReply,
    SegmentClassified,
    SettingsChanged,
    SilenceBegan,
    SpeechResumed,
    SpeechStarted,
    SpeechStopped,
    StartReply,
    TurnSettings,
    VadFrame,
)

MIN_COMMIT_MS = 100.0
"""Shortest buffer a commit accepts (the OpenAI Realtime API's rule)."""
HYSTERESIS = 0.15
"""Speech ends below ``threshold - HYSTERESIS`` (Silero's recommended offset threshold)."""


class IllegalTransition(RuntimeError):
    """The shell fed something impossible (a programming error, never a client error)."""


@dataclass
class _Turn:
    item_id: str
    onset_ms: float
    during_reply: bool
    silence_since_ms: float | None = None
    partial: str | None = None
    speech_ms: float = 0.0


@dataclass
class _Reply:
    response_id: str
    has_audio: bool = False
    paused: bool = False
    generation_done: bool = False


@dataclass
class DuplexMachine:
    """Turn-taking and reply admission for one session.

    ``new_id(prefix)`` supplies item and response ids (deterministic in tests).
    """

    new_id: Callable[[str], str]
    settings: TurnSettings | None = field(default_factory=TurnSettings)
    storm: StormGuard = field(default_factory=StormGuard)
    _turn: _Turn | None = field(default=None, init=False)
    _reply: _Reply | None = field(default=None, init=False)
    _awaiting: dict[str, bool] = field(default_factory=dict, init=False)
    """Committed segments waiting for the classifier, and whether each began during a reply."""
    _unanswered: bool = field(default=False, init=False)
    _last_ms: float = field(default=0.0, init=False)
    _actions: list[Action] = field(default_factory=list, init=False)
    finished_replies: set[str] = field(default_factory=set, init=False)

    def __post_init__(self) -> None:
        if self.settings is not None:
            self.storm = StormGuard(self.settings.storm_barge_ins, self.settings.storm_window_ms)

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
        if self._reply.paused:
            return Phase.PAUSED
        return Phase.AGENT_SPEAKING if self._reply.has_audio else Phase.THINKING

    @property
    def active_response_id(self) -> str | None:
        """The only reply whose audio may reach the client (while it is not paused)."""
        return self._reply.response_id if self._reply else None

    @property
    def paused(self) -> bool:
        """True while the active reply is paused by a segment under judgement."""
        return self._reply is not None and self._reply.paused

    # -- voice activity -----------------------------------------------------------------------------

    def _on_VadFrame(self, frame: VadFrame) -> None:
        if frame.end_ms < self._last_ms or frame.end_ms < frame.start_ms:
            raise IllegalTransition(f"VAD frame {frame} goes back in stream time (at {self._last_ms})")
        self._last_ms = frame.end_ms
        settings = self.settings
        if settings is None:
            return
        if self.storm.tick(frame.end_ms) == "normal":
            self._emit(ModeChanged("normal", f"no barge-in for {settings.storm_window_ms / 1000:.0f} s"))
        speech = frame.probability >= settings.threshold
        silence = frame.probability < max(settings.threshold - HYSTERESIS, 0.01)
        turn = self._turn
        if turn is None:
            if speech:
                self._begin_turn(frame.start_ms, settings)
            return
        if speech:
            turn.speech_ms += frame.end_ms - frame.start_ms
        if speech and turn.silence_since_ms is not None:
            turn.silence_since_ms = None
            self._emit(SpeechResumed(turn.item_id))
        elif silence and turn.silence_since_ms is None:
            turn.silence_since_ms = frame.start_ms
            self._emit(SilenceBegan(turn.item_id, frame.start_ms))
        reply = self._reply
        if (turn.during_reply and reply is not None and not reply.paused and settings.interrupt_response
                and turn.speech_ms >= settings.confirm_query_ms):
            self._pause(reply, turn)  # confirm mode: a query-length segment may interrupt
        if turn.silence_since_ms is not None:
            needed = endpoint_silence_ms(settings.silence_duration_ms, eagerness=settings.eagerness,
                                         partial=turn.partial, confirm=self.storm.mode == "confirm")
            if frame.end_ms - turn.silence_since_ms >= needed:
                self._end_turn(turn, settings, frame.end_ms)

    def _begin_turn(self, onset_ms: float, settings: TurnSettings) -> None:
        reply = self._reply
        turn = self._turn = _Turn(self.new_id("item"), onset_ms, during_reply=reply is not None)
        self._emit(DisarmIdleTimer())
        self._emit(SpeechStarted(turn.item_id, onset_ms))
        if reply is None or not settings.interrupt_response:
            return
        if not settings.listen:
            self._cancel_active("turn_detected")
        elif self.storm.mode == "normal" and not reply.paused:
            self._pause(reply, turn)

    def _end_turn(self, turn: _Turn, settings: TurnSettings, now_ms: float) -> None:
        assert turn.silence_since_ms is not None
        self._turn = None
        self._emit(SpeechStopped(turn.item_id, turn.silence_since_ms))
        start = max(0.0, turn.onset_ms - settings.prefix_padding_ms)
        self._emit(CommitBuffer(turn.item_id, start, now_ms))
        if not settings.listen:
            self._unanswered = True
            self._maybe_answer()
            return
        self._awaiting[turn.item_id] = turn.during_reply
        self._emit(AwaitClassification(turn.item_id))
        if self._reply is not None and self._reply.paused:
            self._emit(ArmPauseTimer(self._reply.response_id, settings.false_interruption_timeout_ms))

    def _on_PartialTranscript(self, event: PartialTranscript) -> None:
        if self._turn is not None and self._turn.item_id == event.item_id:
            self._turn.partial = event.text

    # -- listening decisions ------------------------------------------------------------------------

    def _on_SegmentClassified(self, event: SegmentClassified) -> None:
        if event.item_id not in self._awaiting:
            return  # cleared, or decided already: a late answer changes nothing
        during_reply = self._awaiting.pop(event.item_id)
        reply = self._reply
        confirm_ignores = (during_reply and reply is not None and not reply.paused
                           and self.storm.mode == "confirm")
        if event.decision == "noise" or confirm_ignores:
            self._emit(DiscardSegment(event.item_id))
            if reply is not None and reply.paused and self._turn is None and not self._awaiting:
                self._resume(reply)
            self._maybe_answer()
            return
        self._unanswered = True
        if reply is not None and during_reply and self.settings is not None and self.settings.interrupt_response:
            self._cancel_active("turn_detected")
            if self.storm.barge_in(self._last_ms) == "confirm":
                self._emit(ModeChanged("confirm", f"{self.storm.capacity} barge-ins within "
                                                  f"{self.storm.window_ms / 1000:.0f} s"))
        self._maybe_answer()

    def _on_PauseTimerFired(self, event: PauseTimerFired) -> None:
        reply = self._reply
        if reply is None or reply.response_id != event.response_id or not reply.paused or self._turn is not None:
            return  # decided meanwhile, or the user is speaking again
        self._resume(reply)

    def _maybe_answer(self) -> None:
        settings = self.settings
        if (self._unanswered and settings is not None and settings.create_response and self._reply is None
                and self._turn is None and not self._awaiting):
            self._start_reply("turn_detected")

    # -- client events ------------------------------------------------------------------------------

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
        # an explicit commit is the client saying "this is a turn": no classification
        if self.settings is not None:
            self._unanswered = True
            self._maybe_answer()

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

    # -- the reply's output -------------------------------------------------------------------------

    def _on_ReplyAudio(self, event: ReplyAudio) -> None:
        reply = self._reply
        if reply is None or reply.response_id != event.response_id:
            self._emit(DropAudio(event.response_id))
        elif reply.paused:
            self._emit(HoldAudio(event.response_id, event.payload))
        else:
            reply.has_audio = True
            self._emit(ForwardAudio(event.response_id, event.payload))

    def _on_ReplyFinished(self, event: ReplyFinished) -> None:
        reply = self._reply
        if reply is None or reply.response_id != event.response_id:
            if event.response_id not in self.finished_replies:
                raise IllegalTransition(f"reply {event.response_id} finished but was never started")
            return  # it was cancelled; its response.done is already out
        if reply.paused and not event.failed:
            reply.generation_done = True  # it completes once resumed, or is cancelled
            return
        self._complete(reply, failed=event.failed)

    def _on_IdleTimerFired(self, event: IdleTimerFired) -> None:
        if self._turn is not None or self._reply is not None or self.settings is None:
            return  # the user or the agent spoke meanwhile: the timer is stale
        item_id = self.new_id("item")
        self._emit(IdleTimeout(item_id, event.at_ms, event.at_ms))
        self._start_reply("idle_timeout")

    def _on_SettingsChanged(self, event: SettingsChanged) -> None:
        self.settings = event.settings
        if event.settings is not None:
            self.storm.capacity = event.settings.storm_barge_ins
            self.storm.window_ms = event.settings.storm_window_ms
        else:
            self._turn = None
            self._emit(DisarmIdleTimer())

    # -- helpers ------------------------------------------------------------------------------------

    def _start_reply(self, trigger: Literal["turn_detected", "client", "idle_timeout"]) -> None:
        self._unanswered = False
        self._reply = _Reply(self.new_id("resp"))
        self._emit(DisarmIdleTimer())
        self._emit(StartReply(self._reply.response_id, trigger))

    def _pause(self, reply: _Reply, turn: _Turn) -> None:
        reply.paused = True
        self._emit(PauseReply(reply.response_id, turn.item_id))

    def _resume(self, reply: _Reply) -> None:
        reply.paused = False
        self._emit(ResumeReply(reply.response_id))
        if reply.generation_done:
            self._complete(reply, failed=False)

    def _complete(self, reply: _Reply, *, failed: bool) -> None:
        self._reply = None
        self.finished_replies.add(reply.response_id)
        self._emit(CompleteReply(reply.response_id, "failed" if failed else "completed"))
        if self.settings is not None and self.settings.idle_timeout_ms:
            self._emit(ArmIdleTimer(self.settings.idle_timeout_ms))
        self._maybe_answer()

    def _cancel_active(self, reason: Literal["turn_detected", "client_cancelled"]) -> None:
        assert self._reply is not None
        response_id = self._reply.response_id
        self._reply = None
        self.finished_replies.add(response_id)
        self._emit(CancelReply(response_id, reason))

    def _emit(self, action: Action) -> None:
        self._actions.append(action)
