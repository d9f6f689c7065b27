"""The duplex machine's transitions on voice activity: a VAD frame begins the turn being spoken, moves it between
speech and silence, asks for its end-of-turn score, and ends it at the endpoint (or at the longest turn).

Functions of the machine (:class:`~bargein.session.core.machine.DuplexMachine`), which dispatches VAD frames here;
the ``turn`` sub-state is what they move (its states are listed in the machine module's header)."""

from __future__ import annotations

from bargein.session.core import vocabulary as v
from bargein.session.core.machine_state import MachineState
from bargein.session.core.partials import audio_start_ms, guess_due
from bargein.session.core.turn_records import Turn
from bargein.session.core.voice_fade import VoiceFade, silence_counted_from

HYSTERESIS = 0.15
"""Speech ends below ``threshold - HYSTERESIS`` (Silero's recommended offset threshold)."""


def on_vad_frame(m: MachineState, frame: v.VadFrame) -> None:
    """One VAD frame (the machine has checked it moves stream time on): the turn detection (with turns on),
    then the segment book (every frame)."""
    m.last_ms = frame.end_ms
    if m.settings.vad:
        detect_turn(m, frame)
        if (partial := m.partials.due(m.turn, frame.end_ms, m.settings)) is not None:
            m.emit(partial)
    speaking = m.turn.item_id if m.turn is not None else None
    m.segments.frame(speaking, frame.probability, frame.energy_db, frame.end_ms - frame.start_ms)


def on_onset_probe(m: MachineState, probe: v.OnsetProbe) -> None:
    """A half-hop frame at or over the threshold holds the playing reply's audio (:mod:`.onset_hold`) where a main
    frame's onset would stop it at once: no turn yet, a live reply playing (not paused) under interruption, and not
    in confirm mode (whose onset does not pause the reply). It begins no turn: the onset, speech, silence, the
    endpoint and the segment's frames are the main frames' alone, as with no probe; a probe behind the main grid's
    stream time is stale and ignored."""
    reply = m.reply
    if (not m.wants_onset_probe or reply is None or reply.paused or m.turn is not None
            or probe.end_ms < m.last_ms or probe.probability < m.settings.endpointing.threshold):
        return
    if m.settings.listening.classify and m.storm.mode != "normal":
        return
    if (hold := m.hold.take(reply.response_id, probe.start_ms, probe.end_ms)) is not None:
        m.emit(hold)


def detect_turn(m: MachineState, frame: v.VadFrame) -> None:
    """The frame's meaning for the turn being spoken: it begins one, is speech or silence in it, and may end it."""
    settings = m.settings
    if m.storm.tick(frame.end_ms) == "normal":
        m.emit(v.ModeChanged("normal", f"no barge-in for {settings.listening.storm_window_ms / 1000:.0f} s"))
    threshold = settings.endpointing.threshold
    voiced = frame.probability >= threshold
    silent = frame.probability < max(threshold - HYSTERESIS, 0.01)
    turn = m.turn
    if turn is None:
        if voiced:
            hear_fade(m, begin_turn(m, frame.start_ms), frame, voiced=True)
        return
    fade = hear_fade(m, turn, frame, voiced=voiced)
    speech = voiced and not fade.quiet  # Silero's slow decay over the room's level is not the voice
    if speech:
        turn.speech_ms += frame.end_ms - frame.start_ms
    if voiced:
        turn.vad_silent_since_ms = None
    elif silent and turn.vad_silent_since_ms is None:
        turn.vad_silent_since_ms = frame.start_ms
    _speech_or_silence(m, turn, frame, fade, speech=speech, silent=silent)
    reply = m.reply
    if (turn.during_reply and reply is not None and not reply.paused and settings.interruption.enabled
            and settings.listening.classify and turn.speech_ms >= settings.interruption.confirm_query_ms):
        m.pause(reply, turn)  # confirm mode: a query-length segment may interrupt (a verdict will decide)
    if (settings.endpointing.scores and turn.silence_since_ms is not None and not turn.scored
            and frame.end_ms - turn.silence_since_ms >= settings.endpointing.score_after_ms):
        turn.scored = True  # a pause the speech resumes from sooner is never scored
        m.emit(v.ScoreTurnEnd(turn.item_id, turn.silence_since_ms, optional=settings.endpointing.eagerness is None,
                              start_ms=audio_start_ms(turn, settings)))
    check_endpoint(m, turn, frame.end_ms)


def _speech_or_silence(m: MachineState, turn: Turn, frame: v.VadFrame, fade: VoiceFade, *, speech: bool,
                       silent: bool) -> None:
    """Speech resumes the turn from its silence; a silent frame or the voice's fade begins one; over a paused
    reply, the end of the user's loud stretch while the room talks on is heard too."""
    reply = m.reply
    waits = reply is not None and reply.paused  # for the user's words: recognised both ways, urgently
    if speech and turn.silence_since_ms is not None:
        turn.silence_since_ms = None
        m.emit(v.SpeechResumed(turn.item_id))
    elif turn.silence_since_ms is None and (silent or fade.faded(frame.end_ms)):
        began_ms = fade.quiet_since_ms if fade.quiet_since_ms is not None else frame.start_ms
        turn.silence_since_ms, turn.scored = began_ms, False
        turn.heard.silence(began_ms)
        m.emit(v.SilenceBegan(turn.item_id, began_ms,
                              m.segments.listen_span(turn.item_id, turn.onset_ms) if waits else None, waits,
                              guess=guess_due(turn, began_ms), start_ms=audio_start_ms(turn, m.settings)))
    elif waits and turn.silence_since_ms is None and (
            span := m.segments.voice_faded(turn.item_id, turn.onset_ms)):  # the room talks on after it
        m.emit(v.VoiceEnded(turn.item_id, frame.start_ms, span))


def hear_fade(m: MachineState, turn: Turn, frame: v.VadFrame, *, voiced: bool) -> VoiceFade:
    """The turn's voice fade after ``frame`` (never quiet when the fade is switched off: Silero alone decides)."""
    fade = turn.fade
    if not m.settings.endpointing.voice_fade:
        return fade
    fade.frame(frame.start_ms, frame.energy_db, m.segments.noise_floor.level_db, voiced=voiced)
    return fade


def check_endpoint(m: MachineState, turn: Turn, now_ms: float) -> None:
    """End ``turn`` if its silence is long enough by now (or it has lasted the longest turn)."""
    endpointing = m.settings.endpointing
    since = (silence_counted_from(turn.silence_since_ms, turn.vad_silent_since_ms)
             if turn.silence_since_ms is not None else None)
    ended = since is not None and now_ms - since >= endpointing.silence_ms(
        turn.heard, confirm=m.storm.mode == "confirm")
    if ended or now_ms - turn.onset_ms >= endpointing.max_turn_ms:  # endless "speech": commit what there is
        end_turn(m, turn, now_ms, unended=not ended)


def begin_turn(m: MachineState, onset_ms: float) -> Turn:
    """A turn begins at ``onset_ms``: the client hears of it (unless confirm mode holds it back), and a live reply
    is paused (or cancelled, with listening off)."""
    settings, reply = m.settings, m.reply
    start_ms = max(0.0, onset_ms - settings.endpointing.prefix_padding_ms, m.heard_from_ms)
    over_reply = m.over_reply
    turn = m.turn = Turn(m.new_id("item"), onset_ms, start_ms, during_reply=over_reply)
    m.segments.begin(turn.item_id, threshold=settings.endpointing.threshold, during_reply=over_reply,
                     offset_ms=onset_ms - start_ms)
    m.emit(v.DisarmIdleTimer())
    m.idle.suspend()  # owed again if this turn ends in nothing
    # confirm mode over the agent's reply: no pause at the onset, so OpenAI's clients must not stop playing either
    turn.told = not (reply is not None and not reply.paused and settings.interruption.enabled
                     and settings.listening.classify and m.storm.mode == "confirm")
    m.emit(v.SpeechStarted(turn.item_id, onset_ms, settings.interruption.enabled and turn.told, turn.told))
    if reply is None or not settings.interruption.enabled:
        return turn
    if not settings.listening.classify:
        m.cancel_active("turn_detected")
    elif m.storm.mode == "normal" and not reply.paused:
        m.pause(reply, turn)
    return turn


def end_turn(m: MachineState, turn: Turn, now_ms: float, *, unended: bool) -> None:
    """Commit the turn; ``unended``: at the longest turn, no endpoint having ended it (nothing says the user has
    finished, so it is judged but never answered)."""
    settings = m.settings
    if not settings.listening.classify:
        m.tell_speech()  # listening switched off mid-turn: the turn is answered, so the client hears of it
    m.turn, m.heard_from_ms = None, now_ms
    m.emit(v.SpeechStopped(turn.item_id, now_ms if turn.silence_since_ms is None else turn.silence_since_ms,
                           turn.told))
    span = m.segments.listen_span(turn.item_id, turn.onset_ms) if settings.listening.classify else None
    paused = m.reply if m.reply is not None and m.reply.paused else None  # it waits for the verdict
    m.emit(v.CommitBuffer(turn.item_id, turn.start_ms, now_ms, listen_span=span, urgent=paused is not None))
    if unended:
        m.awaiting.mark_unended(turn.item_id)
    if not settings.listening.classify:
        m.segments.forget(turn.item_id)
        m.answer_owed = m.answer_owed or not unended
        m.maybe_answer()
        return
    m.awaiting.expect(turn.item_id, during_reply=turn.during_reply)
    if not turn.told:  # it never paused the reply, which outlived it: ignored, as confirm mode ignores such speech
        m.awaiting.mark_untold(turn.item_id)
    m.emit(v.AwaitClassification(turn.item_id))
    if paused is not None:
        m.emit(v.ArmPauseTimer(paused.response_id, settings.interruption.false_interruption_timeout_ms))
