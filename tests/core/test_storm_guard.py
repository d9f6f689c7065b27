"""The storm guard: three barge-ins within 10 s put the session in confirm mode, where only longer speech over
the agent pauses it and is told to the client; calm seconds bring it back."""

from __future__ import annotations

from bargein.session import core as dx
from bargein.session.core.listening.classifier import ListenDecision
from bargein.session.core.storm_guard import StormGuard
from bargein.values import Transcript
from tests.support.timelines import Listening, of


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
