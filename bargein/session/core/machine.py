"""The duplex turn-taking state machine: pure, no I/O, no clock of its own (sans-I/O, as h11/wsproto).
The shell ``feed``s small frozen events (VAD frames, client events, reply output, transcripts, timers) and
``take_actions`` returns what is due. Time is stream time carried by the events, so a scripted timeline replays
exactly. All of turn-taking is decided by the machine (turns, endpoints, verdicts, pause/cancel/resume, output
admission, speculation, the idle-buffer trim; see docs/design.md): this module's transitions, the client's requests
(``client_requests.py``) and the state and reply life they share (``machine_base.py``)."""

from __future__ import annotations

from typing import Literal, assert_never

from bargein.session.core import vocabulary as v
from bargein.session.core.admission import admission, admit
from bargein.session.core.classifier import ListenDecision
from bargein.session.core.client_requests import ClientRequests
from bargein.session.core.machine_base import IllegalTransition
from bargein.session.core.segment_book import ignored_action
from bargein.session.core.settings import TurnSettings
from bargein.session.core.turn_records import Turn
from bargein.session.core.voice_fade import VoiceFade, silence_counted_from

HYSTERESIS = 0.15
"""Speech ends below ``threshold - HYSTERESIS`` (Silero's recommended offset threshold)."""


class DuplexMachine(ClientRequests):
    """Turn-taking and reply admission for one session: ``feed`` dispatches every event to its transition (the
    voice activity, listening decisions and reply output here, the client's requests in
    :class:`~bargein.session.core.client_requests.ClientRequests`, the state and the reply's life they share in
    :class:`~bargein.session.core.machine_base.MachineBase`).

    ``new_id(prefix)`` supplies item and response ids (deterministic in tests).
    """

    def feed(self, event: v.Event) -> None:
        """Take one event; its consequences are queued for :meth:`take_actions`."""
        match event:
            case v.VadFrame():
                self._on_vad_frame(event)
            case v.AudioAppended():
                if self.settings.vad and self._turn is None:
                    self._emit(v.TrimBuffer(event.stream_ms - self.settings.buffer_keep_ms))
            case v.PartialTranscript() | v.TurnEndScored() | v.GuessTranscribed():
                if (turn := self._turn) is not None and turn.item_id == event.item_id:
                    turn.heard.take(event)
                if isinstance(event, v.GuessTranscribed):
                    self._on_guess(event)
                if turn is not None and self._turn is turn and self.settings.vad:
                    self._check_endpoint(turn, self._last_ms)  # the evidence may end a silence already long enough
            case v.SegmentClassified():
                self._on_classified(event.item_id, event.decision, event.verdict)
            case v.SegmentTranscribed():
                if event.item_id in self._awaiting and (verdict := self.segments.judge(
                        event.item_id, event.transcript, during_reply=self._over_reply, primed=event.primed,
                        primed_pending=event.primed_pending)) is not None:
                    self._on_classified(event.item_id, verdict.decision, verdict)
            case v.PauseTimerFired():
                reply = self._reply
                if reply is not None and reply.response_id == event.response_id and reply.paused \
                        and self._turn is None:  # else decided meanwhile, or the user is speaking again
                    self._resume(reply)
            case v.ClientCommit():
                self._on_client_commit(event)
            case v.ClientClear():
                self._heard_from_ms = self._last_ms
                self._abandon_turn(then=v.ClearBuffer())
            case v.ClientResponseCreate():
                self._on_client_create(event)
            case v.ClientResponseCancel():
                self._on_client_cancel(event)
            case v.PlaybackCut():
                self._on_playback_cut()
            case v.ReplyAudio() | v.ReplyText():
                reply = self._reply
                how = admission(reply.response_id if reply else None, bool(reply and reply.paused), event.response_id)
                if how == "forward" and reply is not None and isinstance(event, v.ReplyAudio):
                    reply.has_audio = True
                self._emit(admit(event, how))
            case v.ReplyPlayingOut():
                if self._reply is not None and self._reply.response_id == event.response_id:
                    self._reply.playing_out = True
            case v.ReplyFinished():
                self._on_reply_finished(event)
            case v.IdleTimerFired():
                if self._idle.due(self.settings.idle_prompt_ms, user_busy=self._user_busy,
                                  agent_busy=self._reply is not None or self._tool_wait):
                    item_id = self.new_id("item")
                    self._emit(v.IdleTimeout(item_id, event.at_ms, event.at_ms))
                    self._start_reply("idle_timeout")
            case v.SettingsChanged():
                self._on_settings(event.settings)
            case v.ToolWait(owed):
                self._tool_wait = owed
                if not owed and self._reply is None:  # nothing owed: idle again
                    self._idle_again()
            case _:
                assert_never(event)

    # -- voice activity -----------------------------------------------------------------------------

    def _on_vad_frame(self, frame: v.VadFrame) -> None:
        if frame.end_ms < self._last_ms or frame.end_ms < frame.start_ms:
            raise IllegalTransition(f"VAD frame {frame} goes back in stream time (at {self._last_ms})")
        self._last_ms = frame.end_ms
        if self.settings.vad:
            self._detect_turn(frame, self.settings)
        speaking = self._turn.item_id if self._turn is not None else None
        self.segments.frame(speaking, frame.probability, frame.energy_db, frame.end_ms - frame.start_ms)

    def _detect_turn(self, frame: v.VadFrame, settings: TurnSettings) -> None:
        if self.storm.tick(frame.end_ms) == "normal":
            self._emit(v.ModeChanged("normal", f"no barge-in for {settings.listening.storm_window_ms / 1000:.0f} s"))
        threshold = settings.endpointing.threshold
        voiced = frame.probability >= threshold
        silent = frame.probability < max(threshold - HYSTERESIS, 0.01)
        turn = self._turn
        if turn is None:
            if voiced:
                self._hear_fade(self._begin_turn(frame.start_ms, settings), frame, voiced=True)
            return
        fade = self._hear_fade(turn, frame, voiced=voiced)
        speech = voiced and not fade.quiet  # Silero's slow decay over the room's level is not the voice
        if speech:
            turn.speech_ms += frame.end_ms - frame.start_ms
        if voiced:
            turn.vad_silent_since_ms = None
        elif silent and turn.vad_silent_since_ms is None:
            turn.vad_silent_since_ms = frame.start_ms
        reply = self._reply
        waits = reply is not None and reply.paused  # for the user's words: recognised both ways, urgently
        if speech and turn.silence_since_ms is not None:
            turn.silence_since_ms = None
            self._emit(v.SpeechResumed(turn.item_id))
        elif turn.silence_since_ms is None and (silent or fade.faded(frame.end_ms)):
            began_ms = fade.quiet_since_ms if fade.quiet_since_ms is not None else frame.start_ms
            turn.silence_since_ms, turn.scored = began_ms, False
            turn.heard.silence(began_ms)
            self._emit(v.SilenceBegan(turn.item_id, began_ms,
                                      self.segments.listen_span(turn.item_id, turn.onset_ms) if waits else None, waits))
        elif waits and turn.silence_since_ms is None and (
                span := self.segments.voice_faded(turn.item_id, turn.onset_ms)):  # the room talks on after it
            self._emit(v.VoiceEnded(turn.item_id, frame.start_ms, span))
        if (turn.during_reply and reply is not None and not reply.paused and settings.interruption.enabled
                and settings.listening.classify and turn.speech_ms >= settings.interruption.confirm_query_ms):
            self._pause(reply, turn)  # confirm mode: a query-length segment may interrupt (a verdict will decide)
        if (settings.endpointing.scores and turn.silence_since_ms is not None and not turn.scored
                and frame.end_ms - turn.silence_since_ms >= settings.endpointing.score_after_ms):
            turn.scored = True  # a pause the speech resumes from sooner is never scored
            self._emit(v.ScoreTurnEnd(turn.item_id, turn.silence_since_ms,
                                      optional=settings.endpointing.eagerness is None))
        self._check_endpoint(turn, frame.end_ms)

    def _hear_fade(self, turn: Turn, frame: v.VadFrame, *, voiced: bool) -> VoiceFade:
        fade = turn.fade
        if not self.settings.endpointing.voice_fade:
            return fade  # never quiet: Silero alone decides
        fade.frame(frame.start_ms, frame.energy_db, self.segments.noise_floor.level_db, voiced=voiced)
        return fade

    def _check_endpoint(self, turn: Turn, now_ms: float) -> None:
        endpointing = self.settings.endpointing
        since = (silence_counted_from(turn.silence_since_ms, turn.vad_silent_since_ms)
                 if turn.silence_since_ms is not None else None)
        ended = since is not None and now_ms - since >= endpointing.silence_ms(
            turn.heard, confirm=self.storm.mode == "confirm")
        if ended or now_ms - turn.onset_ms >= endpointing.max_turn_ms:  # endless "speech": commit what there is
            self._end_turn(turn, self.settings, now_ms, unended=not ended)

    def _begin_turn(self, onset_ms: float, settings: TurnSettings) -> Turn:
        reply = self._reply
        start_ms = max(0.0, onset_ms - settings.endpointing.prefix_padding_ms, self._heard_from_ms)
        over_reply = self._over_reply
        turn = self._turn = Turn(self.new_id("item"), onset_ms, start_ms, during_reply=over_reply)
        self.segments.begin(turn.item_id, threshold=settings.endpointing.threshold, during_reply=over_reply,
                            offset_ms=onset_ms - start_ms)
        self._emit(v.DisarmIdleTimer())
        self._idle.suspend()  # owed again if this turn ends in nothing
        # confirm mode over the agent's reply: no pause at the onset, so OpenAI's clients must not stop playing either
        turn.told = not (reply is not None and not reply.paused and settings.interruption.enabled
                         and settings.listening.classify and self.storm.mode == "confirm")
        self._emit(v.SpeechStarted(turn.item_id, onset_ms, settings.interruption.enabled and turn.told, turn.told))
        if reply is None or not settings.interruption.enabled:
            return turn
        if not settings.listening.classify:
            self._cancel_active("turn_detected")
        elif self.storm.mode == "normal" and not reply.paused:
            self._pause(reply, turn)
        return turn

    def _end_turn(self, turn: Turn, settings: TurnSettings, now_ms: float, *, unended: bool) -> None:
        """Commit the turn; ``unended``: at the longest turn, no endpoint having ended it (nothing says the user has
        finished, so it is judged but never answered)."""
        if not settings.listening.classify:
            self._tell_speech()  # listening switched off mid-turn: the turn is answered, so the client hears of it
        self._turn, self._heard_from_ms = None, now_ms
        self._emit(v.SpeechStopped(turn.item_id, now_ms if turn.silence_since_ms is None else turn.silence_since_ms,
                                   turn.told))
        span = self.segments.listen_span(turn.item_id, turn.onset_ms) if settings.listening.classify else None
        paused = self._reply if self._reply is not None and self._reply.paused else None  # it waits for the verdict
        self._emit(v.CommitBuffer(turn.item_id, turn.start_ms, now_ms, listen_span=span, urgent=paused is not None))
        if unended:
            self._awaiting.mark_unended(turn.item_id)
        if not settings.listening.classify:
            self.segments.forget(turn.item_id)
            self._unanswered = self._unanswered or not unended
            self._maybe_answer()
            return
        self._awaiting.expect(turn.item_id, during_reply=turn.during_reply)
        if not turn.told:  # it never paused the reply, which outlived it: ignored, as confirm mode ignores such speech
            self._awaiting.mark_untold(turn.item_id)
        self._emit(v.AwaitClassification(turn.item_id))
        if paused is not None:
            self._emit(v.ArmPauseTimer(paused.response_id, settings.interruption.false_interruption_timeout_ms))

    # -- listening decisions ------------------------------------------------------------------------

    def _on_classified(self, item_id: str, decision: Literal["query", "noise"],
                       verdict: ListenDecision | None) -> None:
        if (owed := self._awaiting.settle(item_id)) is None:
            return  # cleared, or decided already: a late answer changes nothing
        answered_elsewhere = owed.not_owed if decision == "query" else None  # kept in the conversation, not answered
        reply = self._reply
        confirm_ignores = owed.untold or (owed.during_reply and reply is not None and not reply.paused
                                          and self.storm.mode == "confirm")
        cut_early = owed.cut_early  # the reply is gone: dropping the segment would leave silence
        kept = decision == "query" and owed.unended and not cut_early  # no pause ended it: no answer
        if (decision == "noise" and not cut_early) or confirm_ignores or kept or owed.not_owed:
            resumes = reply is not None and reply.paused and self._turn is None and not self._awaiting
            if verdict is not None:
                self._emit(v.ReportSegment(item_id, verdict, answered_elsewhere or ignored_action(
                    reply is not None and reply.paused, resumes, confirm_ignores, kept=kept)))
            if not kept and not answered_elsewhere:
                self._emit(v.DiscardSegment(item_id))
            if resumes:
                assert reply is not None
                self._resume(reply)
            self._maybe_answer()
            return
        self._unanswered = True
        # a turn begun while the reply played out its last stretch is judged as one after it, but it paused the reply
        cuts = (reply is not None and (owed.during_reply or (reply.paused and reply.playing_out))
                and self.settings.interruption.enabled)
        if verdict is not None:
            self._emit(v.ReportSegment(item_id, verdict, "cut the reply and answer" if cuts else
                                       "answer (it cut the reply at its first pause)" if cut_early else "answer"))
        if cuts and owed.during_reply:
            self._barge_in()
        elif cuts:  # words over the last stretch the client played: an answer overlapping it, no barge-in to count
            self._cancel_active("turn_detected")
        self._maybe_answer()

    def _barge_in(self) -> None:
        """The user cut the reply short: cancel it, and count the barge-in for the storm guard."""
        self._cancel_active("turn_detected")
        if self.storm.barge_in(self._last_ms) == "confirm":
            self._emit(v.ModeChanged("confirm", f"{self.storm.capacity} barge-ins within "
                                                f"{self.storm.window_ms / 1000:.0f} s"))

    def _on_guess(self, event: v.GuessTranscribed) -> None:
        settings, reply = self.settings, self._reply
        if (reply is not None and reply.paused and settings.interruption.enabled and self.storm.mode == "normal"
                and not self._awaiting.untold(event.item_id)  # the client never heard of that speech
                and self.segments.spots_command(event.item_id, event.transcript, event.primed)):
            self._barge_in()  # "stop" heard at the first pause (either way): cut now, not after the endpoint
            self._awaiting.mark_cut_early(event.item_id)
        if event.primed is not None or event.transcript is None or not (
                settings.vad and settings.create_response and settings.speculation.prefetch_reply):
            return  # (the plain guess, which a reply would quote, came first and was weighed then)
        verdict = self.segments.guess(event.item_id, event.transcript, during_reply=self._over_reply)
        # over a paused reply too: a query will cancel it at the cut point the prompt is built with
        if verdict is not None and verdict.decision == "query" and (self._reply is None or self._reply.paused):
            self._emit(v.PrefetchReply(event.item_id, event.transcript.text.strip()))

    # -- reply output -------------------------------------------------------------------------------

    def _on_reply_finished(self, event: v.ReplyFinished) -> None:
        reply = self._reply
        if reply is None or reply.response_id != event.response_id:
            if event.response_id not in self._finished:
                raise IllegalTransition(f"reply {event.response_id} finished but was never started")
            return  # it was cancelled; its response.done is already out
        if reply.paused and not event.failed:
            reply.generation_done = True  # it completes once resumed, or is cancelled
            return
        self._complete(reply, failed=event.failed)
