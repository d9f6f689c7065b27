"""Scripted timelines of a reply's own course through the machine: what a reply does once the words it answers are
in (``ReplyInputReady``), and when the client truncates a reply playing out its last stretch (``ReplyTruncated``)."""

from __future__ import annotations

from bargein.session import core as dx
from bargein.session.core.reply_course import DIDNT_CATCH
from tests.support.timelines import Listening, Timeline, of

PIECE = dx.AudioPiece(b"\0\0" * 480, 20.0, ())
IDLE = dx.TurnSettings(listening=dx.Listening(classify=False), idle_timeout_ms=5000)


def _turn_reply(t: Timeline) -> str:
    """The user speaks and the endpoint starts a reply to the turn: its response id."""
    t.speech(640)
    (started,) = of(t.silence(544), dx.StartReply)
    assert started.trigger == "turn_detected"
    return started.response_id


def test_a_reply_to_words_runs_the_model() -> None:
    t = Timeline()
    reply = _turn_reply(t)
    assert t.feed(dx.ReplyInputReady(reply, "some")) == [dx.GenerateReply(reply)]
    assert t.machine.phase is dx.Phase.THINKING


def test_a_reply_to_lost_words_says_it_did_not_catch_them() -> None:
    t = Timeline()
    reply = _turn_reply(t)
    assert t.feed(dx.ReplyInputReady(reply, "lost")) == [dx.GenerateReply(reply, DIDNT_CATCH)]


def test_a_reply_to_a_turn_without_words_ends_with_nothing_to_answer() -> None:
    t = Timeline(IDLE)
    reply = _turn_reply(t)
    ended = t.feed(dx.ReplyInputReady(reply, "none"))
    assert ended == [dx.CompleteReply(reply, "completed"), dx.ArmIdleTimer(5000)], "idle again, as after a reply"
    assert not of(ended, dx.GenerateReply)
    assert t.machine.phase is dx.Phase.LISTENING
    assert t.feed(dx.ReplyFinished(reply)) == [], "its task ending afterwards changes nothing"


def test_a_clients_reply_answers_the_conversation_whatever_the_last_turn_held() -> None:
    """Only a reply to the user's turn answers that turn's words: a ``response.create`` is the client's own ask."""
    for words in ("none", "lost"):
        t = Timeline()
        (started,) = of(t.feed(dx.ClientResponseCreate()), dx.StartReply)
        assert t.feed(dx.ReplyInputReady(started.response_id, words)) == [dx.GenerateReply(started.response_id)]


def test_an_idle_prompt_runs_the_model_with_no_words_from_the_user() -> None:
    t = Timeline(IDLE)
    assert of(t.feed(dx.ReplyInputReady(_turn_reply(t), "none")), dx.ArmIdleTimer), "the turn led to no reply"
    (prompt,) = of(t.feed(dx.IdleTimerFired(t.now_ms + 5000)), dx.StartReply)
    assert prompt.trigger == "idle_timeout"
    assert t.feed(dx.ReplyInputReady(prompt.response_id, "none")) == [dx.GenerateReply(prompt.response_id)]


def test_the_input_of_a_reply_cancelled_while_it_waited_for_words_changes_nothing() -> None:
    t = Timeline()
    reply = _turn_reply(t)
    assert of(t.feed(dx.ClientResponseCancel()), dx.CancelReply)
    assert t.feed(dx.ReplyInputReady(reply, "some")) == []
    assert t.feed(dx.ReplyInputReady(reply, "none")) == []


def test_a_paused_reply_with_nothing_to_answer_completes_once_the_cough_over_it_resumes_it() -> None:
    t = Listening()
    item = t.segment()
    reply = of(t.feed(dx.SegmentClassified(item, "query")), dx.StartReply)[0].response_id
    assert of(t.speech(64), dx.PauseReply), "the user's cough pauses the reply while it waits for the words"
    cough = of(t.silence(544), dx.AwaitClassification)[0].item_id
    assert t.feed(dx.ReplyInputReady(reply, "none")) == [], "paused: it ends only once the pause is decided"
    resumed = t.feed(dx.SegmentClassified(cough, "noise"))
    assert resumed[:3] == [dx.DiscardSegment(cough), dx.ResumeReply(reply), dx.CompleteReply(reply, "completed")]
    assert t.machine.phase is dx.Phase.LISTENING


def _playing_out(t: Listening) -> str:
    reply = t.agent_speaking()
    t.feed(dx.ReplyPlayingOut(reply))
    return reply


def test_a_truncate_of_a_reply_playing_out_ends_it() -> None:
    t = Listening(dx.TurnSettings(idle_timeout_ms=5000))
    reply = _playing_out(t)
    assert t.feed(dx.ReplyTruncated(reply)) == [dx.CompleteReply(reply, "completed"), dx.ArmIdleTimer(5000)]
    started = t.feed(dx.ClientResponseCreate())
    assert of(started, dx.StartReply) and not of(started, dx.Reject), "a create right behind finds no reply"


def test_a_truncate_of_a_reply_still_speaking_leaves_it_live() -> None:
    t = Listening()
    reply = t.agent_speaking()
    assert t.feed(dx.ReplyTruncated(reply)) == []
    assert t.feed(dx.ReplyAudio(reply, PIECE)) == [dx.ForwardAudio(reply, PIECE)]


def test_a_truncate_of_a_paused_reply_playing_out_waits_for_the_verdict() -> None:
    t = Listening()
    reply = _playing_out(t)
    assert of(t.speech(64), dx.PauseReply)
    assert t.feed(dx.ReplyTruncated(reply)) == []
    assert t.machine.phase is dx.Phase.USER_SPEAKING


def test_a_truncate_of_a_reply_already_ended_changes_nothing() -> None:
    t = Listening()
    reply = _playing_out(t)
    assert of(t.feed(dx.ReplyFinished(reply)), dx.CompleteReply)
    assert t.feed(dx.ReplyTruncated(reply)) == []
