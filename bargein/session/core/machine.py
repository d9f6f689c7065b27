"""The duplex turn-taking state machine: pure, no I/O, no clock of its own (sans-I/O, as h11/wsproto).

The shell ``feed``s small frozen events (VAD frames, client events, reply output, transcripts, timers) and
``take_actions`` returns what is due. Time is stream time carried by the events, so a scripted timeline replays
exactly. All of turn-taking is decided here (turns, endpoints, verdicts, pause/cancel/resume, output admission,
speculation, the idle-buffer trim; see docs/design.md).

One machine, its sub-states named. :class:`DuplexMachine` owns these records, each with its own states:

``turn``: the turn being spoken (:class:`~bargein.session.core.turn_records.Turn`, ``None`` when nobody speaks)
    none -> speaking (a voiced frame) <-> silent (``silence_since_ms`` set: the voice faded or Silero fell
    silent; speech resumes it) -> none (committed at the endpoint or the longest turn, committed by the client,
    or abandoned by a clear or manual turns). ``scored``: the end-of-turn model was asked about this silence;
    ``told``: the client heard of its ``speech_started`` (confirm mode holds it back over a live reply).
``reply``: the live reply (:class:`~bargein.session.core.turn_records.Reply`, ``None`` when none is live)
    none -> thinking (started) -> speaking (its first audio forwarded) <-> paused (the user talked over it)
    -> none (completed, failed or cancelled: remembered in ``ended_replies``). ``generation_done``: all its
    words came while it was paused (it completes once resumed); ``playing_out``: its words are all out and the
    client plays the last stretch (a client's truncate then ends it); ``trigger``: what started it (once its input
    is known, a reply to the user's turn that holds no words ends, and one whose words were lost says so).
``awaiting``: the verdicts awaited (:class:`~bargein.session.core.verdicts.AwaitedVerdicts`)
    per committed segment: expected -> settled (its verdict came) or dropped (cleared); marked meanwhile
    cut_early, unended, untold, answered by a client's reply, or owing no answer.
``answer_owed``: a judged query or a committed turn waits to be answered: no -> owed -> no (a reply starts).
``storm``: the storm mode (:class:`~bargein.session.core.storm_guard.StormGuard`)
    normal -> confirm (too many barge-ins within the window) -> normal (a calm window).
``idle``: the idle prompt (:class:`~bargein.session.core.idle_prompt.IdlePrompt`)
    off -> armed (a reply ended) -> suspended (the user speaks or is judged) -> armed (that turn led to no
    reply) | off (a reply started, turns became manual) | client (a turn left to the client to answer).
``tools``: the tool wait (:class:`~bargein.session.core.tool_wait.ToolOutputs`)
    none <-> owed (the client owes function call outputs: the session waits on it, it is not idle).
``play_out``: the play-out timer (:class:`~bargein.session.core.play_out.PlayOutWait`) of a reply playing out
    unarmed -> armed (its words all out, unpaused; armed afresh at a resume) -> fired (it completes the reply) or
    stale (the reply paused, resumed, or ended since: a firing of an earlier arming changes nothing).
``closed_playback``: the closed replies the client still plays
    (:class:`~bargein.session.core.closed_playback.ClosedPlayback`, at most 8), each: playing (its deltas leaving)
    -> timed (all left: armed for what it has left to play) -> heard in full (fired); or -> cut (the user spoke over
    it: a grace armed) -> heard to the client's truncate, else to the estimate (fired); or heard as far as it had
    played (pushed out past the bound, the session closing); a firing of a replaced arming is stale.
``partials``: the partial recognitions (:class:`~bargein.session.core.partials.Partials`) of the turn being spoken
    idle -> running (``RecognisePartial``: at most one a session, every ``partial_every_ms`` of speech, none in a
    silence) -> idle (its ``PartialTranscript`` came back: reported while the turn is spoken, ``WarmPrompt`` too).
``hold``: the provisional hold of the reply's audio (:class:`~bargein.session.core.onset_hold.OnsetHold`)
    none -> held (a half-hop probe heard speech over the playing reply) -> none: confirmed (a main-grid onset paused
    or cancelled the reply) or released (no pause within two main frames, the reply ended, probes off).
``segments``: the listening book (:class:`~bargein.session.core.listening.segment_book.SegmentBook`): each
    segment from onset to verdict, the noise floor and the user's own level.

The phase seen from outside is a table over these (:data:`PHASES`). The transitions: this module's (dispatch,
the reply's life, what follows its end), :mod:`~bargein.session.core.voice_activity` (turns from VAD frames),
:mod:`~bargein.session.core.listening_decisions` (what a verdict or a guess does),
:mod:`~bargein.session.core.reply_course` (what a reply does once its input is known, or the client cut it) and
:mod:`~bargein.session.core.client_requests` (the client's own requests); each is a function of the machine, seen
through :class:`~bargein.session.core.machine_state.MachineState` (so none of them imports this module).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, assert_never

from bargein.protocol.client_events import ResponseParams
from bargein.session.core import client_requests, listening_decisions, reply_course, voice_activity
from bargein.session.core import vocabulary as v
from bargein.session.core.admission import admission, admit
from bargein.session.core.closed_playback import ClosedPlayback
from bargein.session.core.idle_prompt import IdlePrompt
from bargein.session.core.listening.segment_book import SegmentBook
from bargein.session.core.onset_hold import OnsetHold
from bargein.session.core.partials import Partials
from bargein.session.core.play_out import PlayOutWait
from bargein.session.core.settings import TurnSettings
from bargein.session.core.storm_guard import StormGuard
from bargein.session.core.tool_wait import ToolOutputs
from bargein.session.core.turn_records import Reply, ReplyStage, Turn
from bargein.session.core.verdicts import AwaitedVerdicts, answers_the_user

RECENT_FINISHED = 64
"""Ended replies remembered, so their generation task finishing late is recognised as harmless."""

PHASES: tuple[tuple[bool | None, ReplyStage | None, bool | None, v.Phase], ...] = (
    # user speaking, live reply, tool outputs owed -> phase (the first row that matches; None matches anything)
    (True, None, None, v.Phase.USER_SPEAKING),
    (False, "none", False, v.Phase.LISTENING),
    (False, "none", True, v.Phase.AWAITING_TOOL),
    (False, "thinking", None, v.Phase.THINKING),
    (False, "speaking", None, v.Phase.AGENT_SPEAKING),
    (False, "paused", None, v.Phase.PAUSED),
)
"""The phase as a table of the sub-states: who speaks, the live reply's stage, whether a tool's output is owed."""


def phase_of(user_speaking: bool, reply: ReplyStage, tool_owed: bool) -> v.Phase:
    """The first row of :data:`PHASES` that the sub-states match."""
    key = (user_speaking, reply, tool_owed)
    for row in PHASES:
        if all(want is None or want == have for want, have in zip(row[:3], key, strict=True)):
            return row[3]
    raise AssertionError(f"no phase for {key}")  # the table covers every combination (tests/core)


class IllegalTransition(RuntimeError):
    """The shell fed something impossible (a programming error, never a client error)."""


@dataclass
class DuplexMachine:
    """Turn-taking and reply admission for one session: ``feed`` dispatches every event to its transition, and
    the sub-states listed in this module's header say where everything stands (read them; only the machine's
    transitions change them).

    ``new_id(prefix)`` supplies item and response ids (deterministic in tests).
    """

    new_id: Callable[[str], str]
    settings: TurnSettings = field(default_factory=TurnSettings)
    storm: StormGuard = field(default_factory=StormGuard)
    segments: SegmentBook = field(default_factory=SegmentBook)
    turn: Turn | None = field(default=None, init=False)
    reply: Reply | None = field(default=None, init=False)
    awaiting: AwaitedVerdicts = field(default_factory=AwaitedVerdicts, init=False)
    """Committed segments waiting for the classifier, and what each verdict owes."""
    answer_owed: bool = field(default=False, init=False)
    idle: IdlePrompt = field(default_factory=IdlePrompt, init=False)
    tools: ToolOutputs = field(default_factory=ToolOutputs, init=False)
    play_out: PlayOutWait = field(default_factory=PlayOutWait, init=False)
    closed_playback: ClosedPlayback = field(default_factory=ClosedPlayback, init=False)
    partials: Partials = field(default_factory=Partials, init=False)
    hold: OnsetHold = field(default_factory=OnsetHold, init=False)
    last_ms: float = field(default=0.0, init=False)
    """Stream time of the last VAD frame."""
    heard_from_ms: float = field(default=0.0, init=False)
    """Stream time before which the input buffer holds nothing (the last commit's or clear's end)."""
    ended_replies: deque[str] = field(default_factory=lambda: deque(maxlen=RECENT_FINISHED), init=False)
    _actions: list[v.Action] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.storm = StormGuard(self.settings.listening.storm_barge_ins, self.settings.listening.storm_window_ms)

    def feed(self, event: v.Event) -> None:
        """Take one event; its consequences are queued for :meth:`take_actions`."""
        match event:
            case v.VadFrame():
                if event.end_ms < self.last_ms or event.end_ms < event.start_ms:
                    raise IllegalTransition(f"VAD frame {event} goes back in stream time (at {self.last_ms})")
                voice_activity.on_vad_frame(self, event)
            case v.OnsetProbe():
                voice_activity.on_onset_probe(self, event)
            case v.AudioAppended():
                if self.settings.vad and self.turn is None:
                    self.emit(v.TrimBuffer(event.stream_ms - self.settings.buffer_keep_ms))
            case v.PartialTranscript() | v.TurnEndScored() | v.GuessTranscribed() | v.TextEndEstimate():
                if (turn := self.turn) is not None and turn.item_id == event.item_id:
                    turn.heard.take(event)
                if isinstance(event, v.PartialTranscript | v.GuessTranscribed):  # reported, and may warm the prompt
                    for said in self.partials.heard(event, turn, self.reply, self.settings):
                        self.emit(said)
                if isinstance(event, v.GuessTranscribed):
                    listening_decisions.on_guess(self, event)
                if turn is not None and self.turn is turn and self.settings.vad:
                    voice_activity.check_endpoint(self, turn, self.last_ms)  # a silence already long enough ends
            case v.SegmentClassified():
                listening_decisions.on_classified(self, event.item_id, event.decision, event.verdict)
            case v.SegmentTranscribed():
                if event.item_id in self.awaiting and (verdict := self.segments.judge(
                        event.item_id, event.transcript, during_reply=self.over_reply, primed=event.primed,
                        primed_pending=event.primed_pending)) is not None:
                    listening_decisions.on_classified(self, event.item_id, verdict.decision, verdict)
            case v.PauseTimerFired():
                reply = self.reply
                if reply is not None and reply.response_id == event.response_id and reply.paused \
                        and self.turn is None:  # else decided meanwhile, or the user is speaking again
                    self.resume(reply)
            case v.ClientCommit():
                client_requests.on_commit(self, event)
            case v.ClientClear():
                self.heard_from_ms = self.last_ms
                client_requests.abandon_turn(self, then=v.ClearBuffer())
            case v.ClientResponseCreate():
                client_requests.on_create(self, event)
            case v.ClientResponseCancel():
                client_requests.on_cancel(self, event)
            case v.ClosedReplyTruncated():
                if self.closed_playback.truncated(event, self.emit):
                    client_requests.on_playback_cut(self)
            case v.ClosedReplyPlaying() | v.ClosedReplySent() | v.ClosedReplyCut() | v.ClosedPlaybackTimerFired() \
                    | v.SessionClosing():
                self.closed_playback.feed(event, self.emit)
            case v.ReplyAudio() | v.ReplyText():
                reply = self.reply
                how = admission(reply.response_id if reply else None, bool(reply and reply.paused), event.response_id)
                if how == "forward" and reply is not None and isinstance(event, v.ReplyAudio):
                    reply.has_audio = True
                self.emit(admit(event, how))
            case v.ReplyPlayingOut():
                if (reply := self.reply) is not None and reply.response_id == event.response_id:
                    reply.playing_out = True
                    self._arm_play_out(reply)
            case v.PlayOutTimerFired():
                if self.play_out.due(event, reply := self.reply):
                    assert reply is not None
                    self.complete(reply, failed=False)  # as if its last sample had been played
            case v.ReplyFinished():
                self._on_reply_finished(event)
            case v.ReplyInputReady():
                reply_course.on_input_ready(self, event)
            case v.ReplyTruncated():
                reply_course.on_truncated(self, event)
            case v.IdleTimerFired():
                if self.idle.due(self.settings.idle_prompt_ms, user_busy=self.user_busy,
                                 agent_busy=self.reply is not None or self.tools.owed):
                    item_id = self.new_id("item")
                    self.emit(v.IdleTimeout(item_id, event.at_ms, event.at_ms))
                    self.start_reply("idle_timeout")
            case v.SettingsChanged():
                client_requests.on_settings(self, event.settings)
            case v.ToolWait(owed):
                self.tools.owed = owed
                if not owed and self.reply is None:  # nothing owed: idle again
                    self.idle_again()
            case _:
                assert_never(event)
        if self.hold.held and (release := self.hold.settle(  # after the event: confirmed, released or held on
                live_id=self.active_response_id, paused=bool(self.reply and self.reply.paused),
                turn_begun=self.turn is not None, now_ms=self.last_ms, wanted=self.wants_onset_probe)) is not None:
            self.emit(release)

    def take_actions(self) -> list[v.Action]:
        """Everything due since the last call, in order."""
        actions, self._actions = self._actions, []
        return actions

    def emit(self, action: v.Action) -> None:
        """Queue ``action`` for :meth:`take_actions` (the machine's transitions only)."""
        self._actions.append(action)

    # -- what the sub-states say --------------------------------------------------------------------

    @property
    def phase(self) -> v.Phase:
        """The current phase (:data:`PHASES`)."""
        return phase_of(self.turn is not None, self.reply.stage if self.reply is not None else "none", self.tools.owed)

    @property
    def active_response_id(self) -> str | None:
        """The only reply whose output may reach the client (while it is not paused)."""
        return self.reply.response_id if self.reply else None

    @property
    def owes_reply(self) -> bool:
        """A reply is in progress, or one will start without the client asking for it: a committed turn is still
        being judged, or is judged and waits its turn to be answered (what a graceful drain waits for)."""
        if self.reply is not None:
            return True
        automatic = self.settings.vad and self.settings.create_response
        return automatic and (self.answer_owed or bool(self.awaiting))

    @property
    def over_reply(self) -> bool:
        """Speech now is spoken over the agent: a reply is live and not merely playing out its last stretch (a turn
        begun then is judged as one after the reply: "yes" answers the agent, it does not acknowledge it)."""
        return self.reply is not None and not self.reply.playing_out

    @property
    def wants_onset_probe(self) -> bool:
        """The shell runs the half-hop VAD stream (:class:`~bargein.session.core.vocabulary.OnsetProbe`) now: a
        reply is live and speech over it would pause it (the stream runs through the reply's pauses, so its
        recurrent state is warm when the reply resumes)."""
        interruption = self.settings.interruption
        return (self.settings.vad and interruption.enabled and interruption.half_hop_onset
                and self.reply is not None)

    @property
    def user_busy(self) -> bool:
        """The user is speaking, or a segment of theirs is being judged."""
        return self.turn is not None or bool(self.awaiting)

    # -- the live reply's life, and what follows its end --------------------------------------------

    def maybe_answer(self) -> None:
        """Start the answer owed once nothing stands in its way (a turn spoken or judged, a live reply); with
        nothing owed, arm the idle prompt that turns ending in nothing left owed."""
        settings = self.settings
        if not (settings.vad and settings.create_response):
            if self.answer_owed:  # the client answers this turn, or lets it be: that silence is not the user's
                self.idle.leave_to_client()
            self.answer_owed = False  # no automatic reply now, so none owed once they are switched on again
        if self.turn is not None or self.reply is not None or self.awaiting:
            return
        if self.answer_owed:
            self.start_reply("turn_detected")
        elif self.idle.state == "suspended" and not self.tools.owed:
            self.idle_again()  # the turns that disarmed the idle timer led to no reply: else no prompt ever comes

    def start_reply(self, trigger: Literal["turn_detected", "client", "idle_timeout"],
                    params: ResponseParams | None = None) -> None:
        """A reply starts (none is live): the answer owed is paid, the idle prompt is off."""
        self.answer_owed = False
        self.reply = Reply(self.new_id("resp"), trigger)
        if trigger == "client" and answers_the_user(trigger, params):
            self.awaiting.answered_by(self.reply.response_id)
        self.idle.stop()
        self.emit(v.DisarmIdleTimer())
        self.emit(v.StartReply(self.reply.response_id, trigger, params))

    def tell_speech(self) -> None:
        """The turn being spoken, held back from the client in confirm mode, is told now (it pauses the reply, the
        reply ended, or the client committed it)."""
        if (turn := self.turn) is not None and not turn.told:
            turn.told = True
            self.emit(v.SpeechAnnounced(turn.item_id, turn.onset_ms, self.settings.interruption.enabled))

    def pause(self, reply: Reply, turn: Turn) -> None:
        """The user's ``turn`` pauses the live ``reply`` (a verdict or a timer will end the pause)."""
        self.tell_speech()
        reply.paused = True
        self.emit(v.PauseReply(reply.response_id, turn.item_id))

    def resume(self, reply: Reply) -> None:
        """The paused ``reply`` goes on; one whose words all came meanwhile completes."""
        reply.paused = False
        self.emit(v.ResumeReply(reply.response_id))
        if reply.generation_done:
            self.complete(reply, failed=False)
        else:
            self._arm_play_out(reply)  # a resume sends the tail again: its wait starts afresh

    def complete(self, reply: Reply, *, failed: bool) -> None:
        """The live ``reply`` ended by itself: the idle prompt or the answer owed follows."""
        self.reply = None
        self.ended_replies.append(reply.response_id)
        self.emit(v.CompleteReply(reply.response_id, "failed" if failed else "completed"))
        self.tell_speech()  # after the close: the client stops playing what it still holds of it there
        if not self.tools.owed:  # a tool's output owed is no silence
            self.idle_again()
        self.maybe_answer()

    def cancel_active(self, reason: Literal["turn_detected", "client_cancelled"]) -> None:
        """The live reply is cancelled (the user cut it, or the client did)."""
        assert self.reply is not None
        response_id = self.reply.response_id
        self.reply = None
        self.ended_replies.append(response_id)
        if self.hold.response_id == response_id:
            self.hold.confirm()  # the cancel stops the audio the hold stopped
        self.emit(v.CancelReply(response_id, reason))
        self.tell_speech()

    def barge_in(self) -> None:
        """The user cut the reply short: cancel it, and count the barge-in for the storm guard."""
        self.cancel_active("turn_detected")
        if self.storm.barge_in(self.last_ms) == "confirm":
            self.emit(v.ModeChanged("confirm", f"{self.storm.capacity} barge-ins within "
                                               f"{self.storm.window_ms / 1000:.0f} s"))

    def idle_again(self) -> None:
        """The agent owes nothing: the idle prompt is armed, or owed once the turn being spoken or judged
        leads to no reply. Manual turns have none."""
        if not self.settings.vad:
            return
        if arm := self.idle.again(self.settings.idle_prompt_ms, user_busy=self.user_busy):
            self.emit(arm)

    def _arm_play_out(self, reply: Reply) -> None:
        wait_ms = self.settings.interruption.playout_wait_ms
        if wait_ms is not None and (arm := self.play_out.arm(reply, wait_ms)) is not None:
            self.emit(arm)

    def _on_reply_finished(self, event: v.ReplyFinished) -> None:
        reply = self.reply
        if reply is None or reply.response_id != event.response_id:
            if event.response_id not in self.ended_replies:
                raise IllegalTransition(f"reply {event.response_id} finished but was never started")
            return  # it was cancelled; its response.done is already out
        if reply.paused and not event.failed:
            reply.generation_done = True  # it completes once resumed, or is cancelled
            return
        self.complete(reply, failed=event.failed)
