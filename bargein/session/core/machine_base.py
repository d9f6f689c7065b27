"""What every part of the duplex machine shares: its records (the turn being spoken, the live reply, the
verdicts awaited, the idle prompt), the queue of actions, and the live reply's life (start, pause, resume, complete,
cancel) with what follows its end (an answer owed, else the idle prompt). Pure: no I/O, no clock."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from bargein.protocol.client_events import ResponseParams
from bargein.session.core import vocabulary as v
from bargein.session.core.idle_prompt import IdlePrompt
from bargein.session.core.segment_book import SegmentBook
from bargein.session.core.settings import TurnSettings
from bargein.session.core.storm_guard import StormGuard
from bargein.session.core.turn_records import Reply, Turn
from bargein.session.core.verdicts import AwaitedVerdicts, answers_the_user

RECENT_FINISHED = 64
"""Ended replies remembered, so their generation task finishing late is recognised as harmless."""


class IllegalTransition(RuntimeError):
    """The shell fed something impossible (a programming error, never a client error)."""


@dataclass
class MachineBase:
    """The duplex machine's state and the reply's life that every transition shares; the transitions themselves
    are :class:`~bargein.session.core.machine.DuplexMachine`'s and its client requests'.

    ``new_id(prefix)`` supplies item and response ids (deterministic in tests).
    """

    new_id: Callable[[str], str]
    settings: TurnSettings = field(default_factory=TurnSettings)
    storm: StormGuard = field(default_factory=StormGuard)
    segments: SegmentBook = field(default_factory=SegmentBook)
    _turn: Turn | None = field(default=None, init=False)
    _reply: Reply | None = field(default=None, init=False)
    _awaiting: AwaitedVerdicts = field(default_factory=AwaitedVerdicts, init=False)
    """Committed segments waiting for the classifier, and what each verdict owes."""
    _unanswered: bool = field(default=False, init=False)
    _tool_wait: bool = field(default=False, init=False)
    """The client owes function call outputs: the session is waiting on it, not idle."""
    _last_ms: float = field(default=0.0, init=False)
    _actions: list[v.Action] = field(default_factory=list, init=False)
    _finished: deque[str] = field(default_factory=lambda: deque(maxlen=RECENT_FINISHED), init=False)
    _heard_from_ms: float = field(default=0.0, init=False)
    """Stream time before which the input buffer holds nothing (the last commit's or clear's end)."""
    _idle: IdlePrompt = field(default_factory=IdlePrompt, init=False)

    def __post_init__(self) -> None:
        self.storm = StormGuard(self.settings.listening.storm_barge_ins, self.settings.listening.storm_window_ms)

    def take_actions(self) -> list[v.Action]:
        """Everything due since the last call, in order."""
        actions, self._actions = self._actions, []
        return actions

    @property
    def phase(self) -> v.Phase:
        """The current phase."""
        if self._turn is not None:
            return v.Phase.USER_SPEAKING
        if self._reply is None:
            return v.Phase.AWAITING_TOOL if self._tool_wait else v.Phase.LISTENING
        if self._reply.paused:
            return v.Phase.PAUSED
        return v.Phase.AGENT_SPEAKING if self._reply.has_audio else v.Phase.THINKING

    @property
    def active_response_id(self) -> str | None:
        """The only reply whose output may reach the client (while it is not paused)."""
        return self._reply.response_id if self._reply else None

    @property
    def owes_reply(self) -> bool:
        """A reply is in progress, or one will start without the client asking for it: a committed turn is still
        being judged, or is judged and waits its turn to be answered (what a graceful drain waits for)."""
        if self._reply is not None:
            return True
        automatic = self.settings.vad and self.settings.create_response
        return automatic and (self._unanswered or bool(self._awaiting))

    def _maybe_answer(self) -> None:
        """Start the answer owed once nothing stands in its way (a turn spoken or judged, a live reply); with
        nothing owed, arm the idle prompt that turns ending in nothing left owed."""
        settings = self.settings
        if not (settings.vad and settings.create_response):
            if self._unanswered:  # the client answers this turn, or lets it be: that silence is not the user's
                self._idle.leave_to_client()
            self._unanswered = False  # no automatic reply now, so none owed once they are switched on again
        if self._turn is not None or self._reply is not None or self._awaiting:
            return
        if self._unanswered:
            self._start_reply("turn_detected")
        elif self._idle.state == "suspended" and not self._tool_wait:
            self._idle_again()  # the turns that disarmed the idle timer led to no reply: else no prompt ever comes

    def _start_reply(self, trigger: Literal["turn_detected", "client", "idle_timeout"],
                     params: ResponseParams | None = None) -> None:
        self._unanswered = False
        self._reply = Reply(self.new_id("resp"))
        if trigger == "client" and answers_the_user(trigger, params):
            self._awaiting.answered_by(self._reply.response_id)
        self._idle.stop()
        self._emit(v.DisarmIdleTimer())
        self._emit(v.StartReply(self._reply.response_id, trigger, params))

    def _tell_speech(self) -> None:
        """The turn being spoken, held back from the client in confirm mode, is told now (it pauses the reply, the
        reply ended, or the client committed it)."""
        if (turn := self._turn) is not None and not turn.told:
            turn.told = True
            self._emit(v.SpeechAnnounced(turn.item_id, turn.onset_ms, self.settings.interruption.enabled))

    def _pause(self, reply: Reply, turn: Turn) -> None:
        self._tell_speech()
        reply.paused = True
        self._emit(v.PauseReply(reply.response_id, turn.item_id))

    def _resume(self, reply: Reply) -> None:
        reply.paused = False
        self._emit(v.ResumeReply(reply.response_id))
        if reply.generation_done:
            self._complete(reply, failed=False)

    def _complete(self, reply: Reply, *, failed: bool) -> None:
        self._reply = None
        self._finished.append(reply.response_id)
        self._emit(v.CompleteReply(reply.response_id, "failed" if failed else "completed"))
        self._tell_speech()  # after the close: the client stops playing what it still holds of it there
        if not self._tool_wait:  # a tool's output owed is no silence
            self._idle_again()
        self._maybe_answer()

    def _idle_again(self) -> None:
        """The agent owes nothing: the idle prompt is armed, or owed once the turn being spoken or judged
        leads to no reply. Manual turns have none."""
        if not self.settings.vad:
            return
        if arm := self._idle.again(self.settings.idle_prompt_ms, user_busy=self._user_busy):
            self._emit(arm)

    @property
    def _over_reply(self) -> bool:
        """Speech now is spoken over the agent: a reply is live and not merely playing out its last stretch (a turn
        begun then is judged as one after the reply: "yes" answers the agent, it does not acknowledge it)."""
        return self._reply is not None and not self._reply.playing_out

    @property
    def _user_busy(self) -> bool:
        """The user is speaking, or a segment of theirs is being judged."""
        return self._turn is not None or bool(self._awaiting)

    def _cancel_active(self, reason: Literal["turn_detected", "client_cancelled"]) -> None:
        assert self._reply is not None
        response_id = self._reply.response_id
        self._reply = None
        self._finished.append(response_id)
        self._emit(v.CancelReply(response_id, reason))
        self._tell_speech()

    def _emit(self, action: v.Action) -> None:
        self._actions.append(action)
