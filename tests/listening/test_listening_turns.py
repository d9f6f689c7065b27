"""Listening and turn-taking timelines: pause then decide, abandoned interruptions, speculation, answers over a
reply playing out."""

from __future__ import annotations

import pytest

from bargein.session import core as dx
from bargein.values import Transcript
from tests.support.timelines import Listening, of


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


def test_speculation_starts_at_first_silence_and_is_voided_when_speech_resumes() -> None:
    t = Listening()
    t.speech(640)
    began = of(t.silence(256), dx.SilenceBegan)
    assert began == [dx.SilenceBegan("item_1", 640.0)]
    resumed = t.speech(320)
    assert resumed == [dx.SpeechResumed("item_1")]
    # no reply of any kind exists for a turn that continued
    assert not of(t.actions, dx.StartReply) and not of(t.actions, dx.CommitBuffer)


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
