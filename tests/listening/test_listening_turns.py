"""Listening and turn-taking timelines: pause then decide, storm guard, speculation, semantic endpoints."""

from __future__ import annotations

import pytest

from bargein.session import core as dx
from bargein.session.core.endpointing import SEMANTIC_PRESETS, TurnEvidence, endpoint_silence_ms
from bargein.session.core.listening.classifier import ListenDecision
from bargein.session.core.storm_guard import StormGuard
from bargein.values import Transcript
from tests.core.test_duplex import Timeline, of


class Listening(Timeline):
    """A timeline with the listening classifier on (the default)."""

    def __init__(self, settings: dx.TurnSettings | None = None) -> None:
        super().__init__(settings or dx.TurnSettings())

    def segment(self, speech_ms: float = 640) -> str:
        """Speech then the endpoint silence; returns the committed item awaiting its verdict."""
        self.speech(speech_ms)
        waiting = of(self.silence(544), dx.AwaitClassification)
        assert waiting, "the endpoint must commit the segment and wait for the classifier"
        return str(waiting[0].item_id)

    def agent_speaking(self) -> str:
        item = self.segment()
        reply = of(self.feed(dx.SegmentClassified(item, "query")), dx.StartReply)[0].response_id
        assert self.feed(dx.ReplyAudio(reply, "a0")) == [dx.ForwardAudio(reply, "a0")]
        return reply


def test_a_query_is_answered_only_once_classified() -> None:
    t = Listening()
    item = t.segment()
    assert not of(t.actions, dx.StartReply), "no reply before the classifier says query"
    assert of(t.feed(dx.SegmentClassified(item, "query")), dx.StartReply)


def test_noise_is_discarded_and_never_answered() -> None:
    t = Listening()
    item = t.segment(160)
    assert t.feed(dx.SegmentClassified(item, "noise")) == [dx.DiscardSegment(item)]
    t.silence(2000)
    assert not of(t.actions, dx.StartReply)
    assert t.machine.phase is dx.Phase.LISTENING


def test_pause_then_noise_resumes_the_same_reply() -> None:
    t = Listening()
    reply = t.agent_speaking()
    onset = t.speech(64)
    assert [type(a) for a in onset] == [dx.DisarmIdleTimer, dx.SpeechStarted, dx.PauseReply]
    assert t.machine.phase is dx.Phase.USER_SPEAKING
    # audio made while paused is held, not sent and not dropped
    assert t.feed(dx.ReplyAudio(reply, "a1")) == [dx.HoldAudio(reply, "a1")]
    ended = t.silence(544)
    item = of(ended, dx.AwaitClassification)[0].item_id
    assert of(ended, dx.ArmPauseTimer) == [dx.ArmPauseTimer(reply, 2000)]
    assert t.machine.phase is dx.Phase.PAUSED
    resumed = t.feed(dx.SegmentClassified(item, "noise"))
    assert resumed == [dx.DiscardSegment(item), dx.ResumeReply(reply)]
    assert t.feed(dx.ReplyAudio(reply, "a2")) == [dx.ForwardAudio(reply, "a2")]
    assert not of(t.actions, dx.CancelReply)
    # the pause timer firing late finds nothing to do
    assert t.feed(dx.PauseTimerFired(reply)) == []


def test_pause_then_query_cancels_and_answers() -> None:
    t = Listening()
    reply = t.agent_speaking()
    t.speech(640)
    item = of(t.silence(544), dx.AwaitClassification)[0].item_id
    decided = t.feed(dx.SegmentClassified(item, "query"))
    assert [type(a) for a in decided] == [dx.CancelReply, dx.DisarmIdleTimer, dx.StartReply]
    assert decided[0] == dx.CancelReply(reply, "turn_detected")
    assert t.feed(dx.ReplyAudio(reply, "late")) == [dx.DropAudio(reply)]


def test_the_false_interruption_timeout_resumes_an_undecided_pause() -> None:
    t = Listening(dx.TurnSettings(interruption=dx.Interruption(false_interruption_timeout_ms=1500)))
    reply = t.agent_speaking()
    t.speech(160)
    assert of(t.silence(544), dx.ArmPauseTimer) == [dx.ArmPauseTimer(reply, 1500)]
    assert t.feed(dx.PauseTimerFired(reply)) == [dx.ResumeReply(reply)]


ABANDONS = {"detection off": (dx.SettingsChanged(dx.TurnSettings.manual()), dx.DisarmIdleTimer()),
            "buffer cleared": (dx.ClientClear(), dx.ClearBuffer())}
"""Two ways a turn ends without an endpoint: the event, and the action that follows the abandonment."""


@pytest.mark.parametrize("how", ABANDONS)
def test_an_abandoned_interruption_resumes_the_paused_reply(how: str) -> None:
    event, then = ABANDONS[how]
    t = Listening()
    reply = t.agent_speaking()
    spoke = t.speech(160)
    item = of(spoke, dx.SpeechStarted)[0].item_id
    assert of(spoke, dx.PauseReply) == [dx.PauseReply(reply, item)]
    assert t.feed(event) == [dx.SegmentAbandoned(item), then, dx.ResumeReply(reply)], "the clear is told first"
    assert t.feed(dx.ReplyAudio(reply, "a1")) == [dx.ForwardAudio(reply, "a1")]


def test_a_cleared_turn_resumes_a_reply_whose_earlier_segment_was_judged_noise_meanwhile() -> None:
    t = Listening()
    reply = t.agent_speaking()
    t.speech(160)
    judged = of(t.silence(544), dx.AwaitClassification)[0].item_id
    second = of(t.speech(160), dx.SpeechStarted)[0].item_id
    assert of(t.feed(dx.SegmentClassified(judged, "noise")), dx.ResumeReply) == [], "the user is still speaking"
    assert t.feed(dx.ClientClear()) == [dx.SegmentAbandoned(second), dx.ClearBuffer(), dx.ResumeReply(reply)]


def test_a_client_commit_over_the_speech_that_paused_the_reply_cuts_it_and_answers() -> None:
    t = Listening()
    reply = t.agent_speaking()
    item = of(t.speech(320), dx.SpeechStarted)[0].item_id
    committed = t.feed(dx.ClientCommit(buffered_ms=320.0))
    assert of(committed, dx.CancelReply) == [dx.CancelReply(reply, "turn_detected")]
    assert [c.item_id for c in of(committed, dx.CommitBuffer)] == [item]
    assert of(committed, dx.StartReply), "the committed turn is answered, not left behind a paused reply"


def test_a_client_commit_just_after_the_speech_that_paused_the_reply_ended_cuts_it_too() -> None:
    t = Listening()
    reply = t.agent_speaking()
    t.speech(320)
    judged = of(t.silence(544), dx.AwaitClassification)[0].item_id
    committed = t.feed(dx.ClientCommit(buffered_ms=320.0))
    assert of(committed, dx.CancelReply) == [dx.CancelReply(reply, "turn_detected")]
    answered = t.feed(dx.SegmentClassified(judged, "noise"))
    assert not of(answered, dx.ResumeReply) and of(answered, dx.StartReply), "the client's turn is answered"


@pytest.mark.parametrize("how", ABANDONS)
def test_an_abandoned_turn_leaves_the_pause_to_a_segment_still_being_judged(how: str) -> None:
    event, then = ABANDONS[how]
    t = Listening()
    reply = t.agent_speaking()
    t.speech(160)
    judged = of(t.silence(544), dx.AwaitClassification)[0].item_id
    second = of(t.speech(160), dx.SpeechStarted)[0].item_id
    assert t.feed(event) == [dx.SegmentAbandoned(second), then]
    assert t.machine.phase is dx.Phase.PAUSED
    assert t.feed(dx.SegmentClassified(judged, "noise")) == [dx.DiscardSegment(judged), dx.ResumeReply(reply)]


def test_a_reply_that_finished_while_paused_completes_after_resuming() -> None:
    t = Listening()
    reply = t.agent_speaking()
    t.speech(96)
    assert t.feed(dx.ReplyFinished(reply)) == []
    item = of(t.silence(544), dx.AwaitClassification)[0].item_id
    assert t.feed(dx.SegmentClassified(item, "noise")) == [
        dx.DiscardSegment(item), dx.ResumeReply(reply), dx.CompleteReply(reply, "completed")]
    assert t.machine.phase is dx.Phase.LISTENING


def test_a_second_segment_keeps_the_pause_until_both_are_decided() -> None:
    t = Listening()
    reply = t.agent_speaking()
    t.speech(96)
    first = of(t.silence(544), dx.AwaitClassification)[0].item_id
    t.speech(640)
    # the first was noise, but the user is talking again: still paused
    assert t.feed(dx.SegmentClassified(first, "noise")) == [dx.DiscardSegment(first)]
    second = of(t.silence(544), dx.AwaitClassification)[0].item_id
    assert of(t.feed(dx.SegmentClassified(second, "query")), dx.CancelReply) == [
        dx.CancelReply(reply, "turn_detected")]


def _three_barge_ins(t: Listening) -> None:
    for _ in range(3):
        t.agent_speaking()
        t.speech(640)
        item = of(t.silence(544), dx.AwaitClassification)[0].item_id
        t.feed(dx.SegmentClassified(item, "query"))
        # the new reply to this barge-in ends normally before the next round
        active = t.machine.active_response_id
        assert active is not None
        t.feed(dx.ReplyFinished(active))


def test_storm_guard_enters_confirm_mode_and_calms_down() -> None:
    t = Listening()
    _three_barge_ins(t)
    assert of(t.actions, dx.ModeChanged) == [dx.ModeChanged("confirm", "3 barge-ins within 10 s")]
    t.speech(640)
    # confirm mode waits for a longer silence before it answers (1000 ms instead of 500)
    assert not of(t.silence(800), dx.AwaitClassification)
    item = of(t.silence(256), dx.AwaitClassification)[0].item_id
    reply = of(t.feed(dx.SegmentClassified(item, "query")), dx.StartReply)[0].response_id
    t.feed(dx.ReplyAudio(reply, "a0"))
    # confirm mode: a short burst during the reply does not pause it, nor cut it once classified
    assert not of(t.speech(320), dx.PauseReply)
    short = of(t.silence(1056), dx.AwaitClassification)[0].item_id
    assert t.feed(dx.SegmentClassified(short, "query")) == [dx.DiscardSegment(short)]
    # a query-length segment does pause it
    assert of(t.speech(640), dx.PauseReply) == [dx.PauseReply(reply, t.machine.turn.item_id)]  # type: ignore[union-attr]
    t.silence(1056)
    t.feed(dx.PauseTimerFired(reply))
    # ten calm seconds later the session is back to normal
    t.silence(10_000)
    assert of(t.actions, dx.ModeChanged)[-1] == dx.ModeChanged("normal", "no barge-in for 10 s")


def test_speculation_starts_at_first_silence_and_is_voided_when_speech_resumes() -> None:
    t = Listening()
    t.speech(640)
    began = of(t.silence(256), dx.SilenceBegan)
    assert began == [dx.SilenceBegan("item_1", 640.0)]
    resumed = t.speech(320)
    assert resumed == [dx.SpeechResumed("item_1")]
    # no reply of any kind exists for a turn that continued
    assert not of(t.actions, dx.StartReply) and not of(t.actions, dx.CommitBuffer)


SEMANTIC = dx.TurnSettings(endpointing=dx.Endpointing(eagerness="auto"))
# end-of-turn probabilities and words recorded by bench/quality/endpoint_quality.py on Kokoro clips (voice heart)
COMPLETE = (0.9897, "Set an alarm for 7.30.")
"""'Set an alarm for seven thirty.' said whole, at its first silence."""
PAUSED = (0.6788, "Set an alarm for.")
"""'Set an alarm for... seven thirty.' at the hesitation: Smart Turn is unsure, the words lead on."""
UNSURE = (0.1605, "How long does it take to?")


def hear(t: Listening, item_id: str, recorded: tuple[float, str]) -> None:
    """The shell's answers to SilenceBegan and ScoreTurnEnd: the end-of-turn score, then the speculative words."""
    began = of(t.actions, dx.SilenceBegan)[-1]
    assert of(t.actions, dx.ScoreTurnEnd)[-1] == dx.ScoreTurnEnd(item_id, began.at_ms), "semantic_vad scores at once"
    t.feed(dx.TurnEndScored(item_id, began.at_ms, recorded[0]))
    t.feed(dx.GuessTranscribed(item_id, Transcript(recorded[1])))


def test_semantic_endpoint_commits_early_on_a_complete_utterance() -> None:
    t = Listening(SEMANTIC)
    t.speech(1600)
    t.silence(32)
    hear(t, "item_1", COMPLETE)
    assert of(t.silence(96), dx.AwaitClassification), "finished by sound and words: 100 ms of silence ends it"


def test_semantic_endpoint_waits_through_a_pause_in_an_unfinished_utterance() -> None:
    for recorded in (PAUSED, UNSURE):
        t = Listening(SEMANTIC)
        t.speech(1280)
        t.silence(32)
        hear(t, "item_1", recorded)
        assert not of(t.silence(1200), dx.CommitBuffer), f"{recorded[1]!r} goes on: no cut-off in 1.2 s"
        t.speech(800)  # "... seven thirty."
        t.silence(32)
        hear(t, "item_1", COMPLETE)
        commit = of(t.silence(96), dx.CommitBuffer)
        assert [c.item_id for c in commit] == ["item_1"], "the whole utterance is one turn"


def test_semantic_endpoint_waits_until_both_witnesses_have_answered() -> None:
    t = Listening(SEMANTIC)
    t.speech(1280)
    t.silence(32)
    began = of(t.actions, dx.SilenceBegan)[-1]
    t.feed(dx.TurnEndScored("item_1", began.at_ms, COMPLETE[0]))
    assert not of(t.silence(640), dx.CommitBuffer), "no words yet: the sound alone does not end the turn"
    t.feed(dx.PartialTranscript("item_1", COMPLETE[1]))
    assert not of(t.silence(32), dx.CommitBuffer), "a partial may predate the silence: not the words of it"
    commit = of(t.feed(dx.GuessTranscribed("item_1", Transcript(COMPLETE[1]))), dx.CommitBuffer)
    assert commit and commit[0].end_ms == t.now_ms, "the silence is long enough already: it ends at the answer"


def test_a_score_for_an_earlier_silence_does_not_count() -> None:
    t = Listening(SEMANTIC)
    t.speech(640)
    t.silence(64)
    stale = of(t.actions, dx.SilenceBegan)[-1]
    t.speech(320)
    t.silence(32)
    t.feed(dx.TurnEndScored("item_1", stale.at_ms, 0.99))  # late answer about the first pause
    t.feed(dx.GuessTranscribed("item_1", Transcript("Turn off the lights.")))
    assert not of(t.silence(640), dx.CommitBuffer)


def test_server_vad_keeps_plain_silence_and_asks_for_no_score() -> None:
    t = Listening()
    t.speech(640)
    assert of(t.silence(32), dx.SilenceBegan)
    assert of(t.silence(480), dx.CommitBuffer) and not of(t.actions, dx.ScoreTurnEnd)


def test_endpoint_silence_policy() -> None:
    finished = TurnEvidence(0.0, 0.99, "What time is it?")
    leads_on = TurnEvidence(0.0, 0.99, "I want to book a table for.")
    assert endpoint_silence_ms(500, eagerness=None, evidence=finished, confirm=False) == 500
    assert endpoint_silence_ms(500, eagerness="auto", evidence=finished, confirm=False) == 100
    assert endpoint_silence_ms(500, eagerness="auto", evidence=leads_on, confirm=False) == 1500
    assert endpoint_silence_ms(500, eagerness="auto", evidence=TurnEvidence(), confirm=False) == 1500
    assert endpoint_silence_ms(500, eagerness="low", evidence=finished, confirm=False) == 300
    assert endpoint_silence_ms(500, eagerness="high", evidence=leads_on, confirm=False) == 1200
    assert endpoint_silence_ms(500, eagerness=None, evidence=None, confirm=True) == 1000
    unsure = TurnEvidence(0.0, 0.7, "Could you turn the volume")
    doubtful = TurnEvidence(0.0, 0.3, "Could you turn the volume")
    assert endpoint_silence_ms(500, eagerness="high", evidence=unsure, confirm=False) == 500, "the middle wait"
    assert endpoint_silence_ms(500, eagerness="high", evidence=doubtful, confirm=False) == 1200
    assert endpoint_silence_ms(500, eagerness="auto", evidence=unsure, confirm=False) == 1500
    assert endpoint_silence_ms(500, eagerness="low", evidence=unsure, confirm=False) == 1000


def test_graded_wait_orders_the_silences() -> None:
    for name, preset in SEMANTIC_PRESETS.items():
        assert preset.low <= preset.high and preset.short_ms <= preset.middle_ms <= preset.long_ms, name
        assert preset.silence_ms(preset.high, "What time is it?") == preset.short_ms
        assert preset.silence_ms(preset.low, "What time is it?") in (preset.middle_ms, preset.short_ms)
        assert preset.silence_ms(0.0, "What time is it?") == preset.long_ms
        assert preset.silence_ms(1.0, "a table for") == preset.long_ms, "words that lead on always wait long"
        assert preset.silence_ms(None, "What time is it?") == preset.long_ms
        assert preset.silence_ms(1.0, None) == preset.long_ms


def test_storm_guard_counts_barge_ins_within_the_window() -> None:
    guard = StormGuard(capacity=3, window_ms=10_000)
    assert guard.barge_in(0) is None and guard.barge_in(1000) is None
    # the first barge-in left the window before the third came: still two within 10 s
    assert guard.barge_in(10_500) is None and guard.recent == 2
    assert guard.barge_in(10_900) == "confirm"
    assert guard.tick(20_899) is None
    assert guard.tick(20_900) == "normal" and guard.recent == 0


def _confirm_mode(t: Listening) -> str:
    """Three barge-ins in a row: returns the reply playing once the storm guard is in confirm mode."""
    _three_barge_ins(t)
    t.speech(640)
    item = of(t.silence(1056), dx.AwaitClassification)[0].item_id
    reply = of(t.feed(dx.SegmentClassified(item, "query")), dx.StartReply)[0].response_id
    t.feed(dx.ReplyAudio(reply, "a0"))
    return reply


def test_the_segment_report_says_a_short_query_was_ignored_in_confirm_mode() -> None:
    t = Listening()
    reply = _confirm_mode(t)
    t.speech(320)
    short = of(t.silence(1056), dx.AwaitClassification)[0].item_id
    verdict = ListenDecision("query", ("1 words of speech",))
    decided = t.feed(dx.SegmentClassified(short, "query", verdict))
    assert decided == [dx.ReportSegment(short, verdict, "ignore (confirm mode: too short to interrupt)"),
                       dx.DiscardSegment(short)]
    assert t.machine.active_response_id == reply


def test_the_machine_classifies_a_transcribed_segment_with_its_own_statistics() -> None:
    t = Listening()
    reply = t.agent_speaking()
    t.frames(0.02, 320, energy_db=-60.0)  # the room: the noise floor follows it
    t.frames(0.9, 640, energy_db=-25.0)  # a query, well above the room
    item = of(t.silence(544), dx.AwaitClassification)[0].item_id
    decided = t.feed(dx.SegmentTranscribed(item, Transcript("Stop, what time is it?")))
    report = of(decided, dx.ReportSegment)[0]
    assert report.verdict.decision == "query" and report.action == "cut the reply and answer"
    assert report.verdict.features["speech_ms"] == 640.0 and report.verdict.features["during_reply"]
    assert decided[1:3] == [dx.CancelReply(reply, "turn_detected"), dx.DisarmIdleTimer()]
    # the machine decides once: a second transcript of the same item changes nothing
    assert t.feed(dx.SegmentTranscribed(item, Transcript("again"))) == []


def test_a_noise_transcript_resumes_the_paused_reply_and_the_report_says_so() -> None:
    t = Listening()
    reply = t.agent_speaking()
    t.speech(96)
    assert t.feed(dx.ReplyText(reply, " more")) == [dx.HoldText(reply, " more")]
    item = of(t.silence(544), dx.AwaitClassification)[0].item_id
    decided = t.feed(dx.SegmentTranscribed(item, Transcript("", no_speech_prob=0.9)))
    assert [type(a) for a in decided] == [dx.ReportSegment, dx.DiscardSegment, dx.ResumeReply]
    assert decided[0].action == "resume the reply"  # type: ignore[union-attr]
    assert t.feed(dx.ReplyText(reply, " again")) == [dx.ForwardText(reply, " again")]


def test_a_guess_that_reads_as_a_query_prefetches_a_reply_unless_one_is_playing() -> None:
    t = Listening()
    t.frames(0.9, 640, energy_db=-25.0)
    t.silence(64)
    assert t.feed(dx.GuessTranscribed("item_1", Transcript(" What time is it?"))) == [
        dx.PrefetchReply("item_1", "What time is it?")]
    assert t.feed(dx.GuessTranscribed("item_1", Transcript(""))) == [], "no words: noise, nothing to prefetch"
    busy = Listening()
    busy.agent_speaking()
    busy.frames(0.9, 640, energy_db=-25.0)
    busy.silence(64)
    # a sentence that is no command does not touch the paused reply, but its answer is prepared: if the
    # verdict says query, the reply is cancelled where it paused, which is the prompt the guess is asked with
    assert busy.feed(dx.GuessTranscribed("item_3", Transcript("I think the soup is ready now."))) == [
        dx.PrefetchReply("item_3", "I think the soup is ready now.")]
    # a question word, clearly louder than the room, cuts the paused reply at once (then may be prefetched)
    cut = busy.feed(dx.GuessTranscribed("item_3", Transcript("What time is it?")))
    assert isinstance(cut[0], dx.CancelReply) and cut[0].reason == "turn_detected"
    playing = Listening(dx.TurnSettings(interruption=dx.Interruption(enabled=False)))
    playing.agent_speaking()
    playing.frames(0.9, 640, energy_db=-25.0)
    playing.silence(64)
    # a reply that speech does not pause plays on: no second reply is prepared beside it
    assert playing.feed(dx.GuessTranscribed("item_3", Transcript("I think the soup is ready now."))) == []
    text_only = Listening(dx.TurnSettings(speculation=dx.Speculation(prefetch_reply=False)))
    text_only.frames(0.9, 640, energy_db=-25.0)
    text_only.silence(64)
    assert text_only.feed(dx.GuessTranscribed("item_1", Transcript("What time is it?"))) == []


def _yes_over(t: Listening, *, playing_out: bool) -> tuple[str, list[dx.Action]]:
    """The agent speaks (or, ``playing_out``, has all its words out and the client plays the last stretch); the user
    says a clear "Yes." over it: the reply and what the machine decided at the verdict."""
    reply = t.agent_speaking()
    if playing_out:
        assert t.feed(dx.ReplyPlayingOut(reply)) == []
    t.frames(0.02, 320, energy_db=-60.0)  # the room
    onset = t.frames(0.9, 480, energy_db=-25.0)
    assert of(onset, dx.PauseReply), "speech pauses the reply, its last stretch included"
    item = of(t.silence(544), dx.AwaitClassification)[0].item_id
    return reply, t.feed(dx.SegmentTranscribed(item, Transcript("Yes.", avg_logprob=-0.2)))


def test_a_yes_while_the_agent_speaks_acknowledges_it_and_the_reply_resumes() -> None:
    reply, decided = _yes_over(Listening(), playing_out=False)
    assert [type(a) for a in decided] == [dx.ReportSegment, dx.DiscardSegment, dx.ResumeReply]
    assert decided[-1] == dx.ResumeReply(reply)


def test_a_yes_begun_while_the_reply_plays_out_answers_the_agent_and_cancels_the_paused_rest() -> None:
    """Every word of the reply is out and the client plays its last second (often a question): a "yes" overlapping it
    is the user's answer, as it would be a moment later, and the paused rest of the reply is cancelled."""
    t = Listening()
    reply, decided = _yes_over(t, playing_out=True)
    report = of(decided, dx.ReportSegment)[0]
    assert report.verdict.decision == "query" and not report.verdict.features["during_reply"]
    assert of(decided, dx.CancelReply) == [dx.CancelReply(reply, "turn_detected")]
    assert of(decided, dx.StartReply), "the answer starts"


def test_a_cough_while_the_reply_plays_out_resumes_it() -> None:
    t = Listening()
    reply = t.agent_speaking()
    t.feed(dx.ReplyPlayingOut(reply))
    assert [a.response_id for a in of(t.speech(96), dx.PauseReply)] == [reply]
    item = of(t.silence(544), dx.AwaitClassification)[0].item_id
    decided = t.feed(dx.SegmentTranscribed(item, Transcript("", no_speech_prob=0.9)))
    assert [type(a) for a in decided] == [dx.ReportSegment, dx.DiscardSegment, dx.ResumeReply]
    assert of(t.feed(dx.ReplyFinished(reply)), dx.CompleteReply) == [dx.CompleteReply(reply, "completed")]


def test_a_reply_playing_out_is_finished_by_its_end_not_by_the_notice() -> None:
    t = Listening()
    reply = t.agent_speaking()
    t.feed(dx.ReplyPlayingOut(reply))
    assert t.machine.active_response_id == reply and t.machine.phase is dx.Phase.AGENT_SPEAKING
    assert t.feed(dx.ReplyPlayingOut("resp_gone")) == [], "a reply no longer live: nothing to do"
    assert of(t.feed(dx.ReplyFinished(reply)), dx.CompleteReply) == [dx.CompleteReply(reply, "completed")]


def test_answers_overlapping_the_last_stretch_of_replies_are_not_counted_as_barge_ins() -> None:
    """Quick questions and answers, each "yes" overlapping the agent's last words: three within 10 s cancel three
    paused tails, but the storm guard counts no barge-in (the agent's words were all out)."""
    t = Listening()
    reply = t.agent_speaking()
    for _ in range(3):
        t.feed(dx.ReplyPlayingOut(reply))
        t.frames(0.9, 480, energy_db=-25.0)
        item = of(t.silence(544), dx.AwaitClassification)[0].item_id
        decided = t.feed(dx.SegmentTranscribed(item, Transcript("Yes.", avg_logprob=-0.2)))
        assert of(decided, dx.CancelReply) == [dx.CancelReply(reply, "turn_detected")]
        reply = of(decided, dx.StartReply)[0].response_id
        t.feed(dx.ReplyAudio(reply, "a"))
    assert t.now_ms < 10_000 and not of(t.actions, dx.ModeChanged)


def test_confirm_mode_tells_the_client_of_speech_over_the_reply_only_once_it_pauses_the_reply() -> None:
    """OpenAI's clients stop playing at ``speech_started``. In confirm mode speech over the agent must last 600 ms to
    pause it, so its ``speech_started`` waits until then (with its real onset), and a short sound the reply talks
    through is never told at all: the client plays on, as the server does."""
    t = Listening()
    reply = _confirm_mode(t)
    short_onset = t.now_ms
    started = of(t.speech(320), dx.SpeechStarted)
    assert [(a.told, a.cuts_playing) for a in started] == [(False, False)]
    ended = t.silence(1056)
    assert [a.told for a in of(ended, dx.SpeechStopped)] == [False] and not of(t.actions, dx.SpeechAnnounced)
    short = of(ended, dx.AwaitClassification)[0].item_id
    t.feed(dx.SegmentClassified(short, "query", ListenDecision("query", ("1 words of speech",))))
    assert t.machine.active_response_id == reply, "ignored: the reply plays on"
    onset = t.now_ms
    long = t.speech(736)
    announced = of(long, dx.SpeechAnnounced)
    assert [a.audio_start_ms for a in announced] == [onset] and onset > short_onset
    assert long.index(announced[0]) < long.index(of(long, dx.PauseReply)[0]), "told before the pause"
    assert [a.told for a in of(t.silence(1056), dx.SpeechStopped)] == [True]


def test_speech_held_back_in_confirm_mode_is_told_when_the_reply_it_spoke_over_ends() -> None:
    t = Listening()
    reply = _confirm_mode(t)
    onset = t.now_ms
    t.speech(320)
    told = t.feed(dx.ReplyFinished(reply))
    assert of(told, dx.SpeechAnnounced) == [dx.SpeechAnnounced(of(t.actions, dx.SpeechStarted)[-1].item_id, onset)]
    assert [a.told for a in of(t.silence(1056), dx.SpeechStopped)] == [True]


def test_short_speech_held_back_in_confirm_mode_stays_ignored_when_the_reply_ends_before_its_verdict() -> None:
    """The client never heard of it: answering it would cancel nothing it was told of and answer a sound it never
    saw begin. It is ignored, as confirm mode ignores speech too short to pause the reply."""
    t = Listening()
    reply = _confirm_mode(t)
    t.speech(320)
    short = of(t.silence(1056), dx.AwaitClassification)[0].item_id
    t.feed(dx.ReplyFinished(reply))
    verdict = ListenDecision("query", ("1 words of speech",))
    decided = t.feed(dx.SegmentClassified(short, "query", verdict))
    assert decided == [dx.ReportSegment(short, verdict, "ignore (confirm mode: too short to interrupt)"),
                       dx.DiscardSegment(short)]
    assert not of(t.actions, dx.SpeechAnnounced)


def test_confirm_mode_holds_back_speech_over_a_reply_playing_out_until_the_reply_ends() -> None:
    t = Listening()
    reply = _confirm_mode(t)
    t.feed(dx.ReplyPlayingOut(reply))
    onset = t.now_ms
    assert [a.told for a in of(t.speech(320), dx.SpeechStarted)] == [False]
    assert of(t.feed(dx.ReplyFinished(reply)), dx.SpeechAnnounced)[0].audio_start_ms == onset


def test_speech_told_because_its_reply_ended_follows_that_reply_s_close() -> None:
    """The reply's ``response.done`` goes out first, then the held-back ``speech_started``: the shell can then cut
    what the client still plays of that closed reply where the speech began."""
    t = Listening()
    reply = _confirm_mode(t)
    t.speech(320)
    told = t.feed(dx.ReplyFinished(reply))
    assert [type(a) for a in told][:2] == [dx.CompleteReply, dx.SpeechAnnounced]
