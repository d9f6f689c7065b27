"""Corners of the duplex machine a second reader found: each sequence here once left a session stuck, deaf,
answering twice or answering a cough."""

from __future__ import annotations

from bargein.protocol.client_events import ResponseParams
from bargein.session import core as dx
from bargein.session.core.listening.classifier import ListenDecision
from tests.support.timelines import NO_CLASSIFIER, Listening, of

NO_INTERRUPT = dx.TurnSettings(interruption=dx.Interruption(enabled=False))


def test_without_the_classifier_a_reply_created_mid_turn_is_never_paused() -> None:
    """``--no-listen`` cancels at the onset and has no verdict or pause timer to end a pause: the reply a client
    creates while the user still speaks plays on instead of pausing for good."""
    t = Listening(NO_CLASSIFIER)
    t.speech(640)
    first = of(t.silence(544), dx.StartReply)[0].response_id
    t.feed(dx.ReplyAudio(first, "a"))
    assert of(t.speech(64), dx.CancelReply)
    second = of(t.feed(dx.ClientResponseCreate()), dx.StartReply)[0].response_id
    t.speech(800)
    t.silence(544)
    t.feed(dx.ReplyAudio(second, "b"))
    assert not of(t.actions, dx.PauseReply)
    ended = t.feed(dx.ReplyFinished(second))
    assert of(ended, dx.CompleteReply) and of(ended, dx.StartReply), "then the user's turn is answered"


def test_without_the_classifier_interruption_switched_on_mid_turn_does_not_pause_the_reply() -> None:
    off = dx.TurnSettings(listening=dx.Listening(classify=False), interruption=dx.Interruption(enabled=False))
    t = Listening(off)
    t.speech(640)
    reply = of(t.silence(544), dx.StartReply)[0].response_id
    t.feed(dx.ReplyAudio(reply, "a"))
    t.speech(64)  # over the reply, interruption off: it plays on
    t.feed(dx.SettingsChanged(NO_CLASSIFIER))  # session.update: interrupt_response true
    t.speech(800)
    t.silence(544)
    assert not of(t.actions, dx.PauseReply)
    assert of(t.feed(dx.ReplyFinished(reply)), dx.CompleteReply)


def test_a_client_cancel_drops_the_answer_owed_to_a_query_waiting_behind_the_reply() -> None:
    """With ``interrupt_response`` off a query over a reply waits for it; a client that cancels the reply stops
    the agent talking, so neither the cancel nor a cough judged later starts the owed answer."""
    t = Listening(NO_INTERRUPT)
    t.agent_speaking()
    query = t.segment()
    assert not of(t.feed(dx.SegmentClassified(query, "query")), dx.StartReply)
    cancelled = t.feed(dx.ClientResponseCancel())
    assert of(cancelled, dx.CancelReply) and not of(cancelled, dx.StartReply)
    t.silence(3000)
    cough = t.segment(96)
    decided = t.feed(dx.SegmentClassified(cough, "noise"))
    assert of(decided, dx.DiscardSegment) and not of(decided, dx.StartReply)
    assert t.machine.phase is dx.Phase.LISTENING


def test_a_waiting_query_is_still_answered_when_the_reply_ends_by_itself() -> None:
    t = Listening(NO_INTERRUPT)
    reply = t.agent_speaking()
    query = t.segment()
    t.feed(dx.SegmentClassified(query, "query"))
    assert of(t.feed(dx.ReplyFinished(reply)), dx.StartReply)


def test_a_turn_the_client_s_response_already_answers_is_not_answered_again_nor_cuts_it() -> None:
    """A client creating its response at the commit (before the verdict) answers that turn: its prompt waits
    for every pending transcript. The verdict must neither start a second reply nor cut the first."""
    t = Listening()
    item = t.segment()
    reply = of(t.feed(dx.ClientResponseCreate()), dx.StartReply)[0].response_id
    verdict = t.feed(dx.SegmentClassified(item, "query"))
    assert not of(verdict, dx.StartReply) and not of(verdict, dx.CancelReply)
    t.feed(dx.ReplyAudio(reply, "a"))
    done = t.feed(dx.ReplyFinished(reply))
    assert of(done, dx.CompleteReply) and not of(done, dx.StartReply)


def test_a_turn_spoken_over_a_reply_and_answered_ahead_by_the_client_does_not_cut_its_answer() -> None:
    """The user's speech paused a reply; the client cancels it and creates its own response before the verdict.
    The verdict (a query, spoken over a reply) must not cut that response as a barge-in: it answers the turn."""
    t = Listening()
    t.agent_speaking()
    item = t.segment()  # paused the reply at its onset
    assert of(t.feed(dx.ClientResponseCancel()), dx.CancelReply)
    answer = of(t.feed(dx.ClientResponseCreate()), dx.StartReply)[0].response_id
    verdict = t.feed(dx.SegmentClassified(item, "query"))
    assert not of(verdict, dx.CancelReply) and not of(verdict, dx.StartReply)
    assert t.machine.active_response_id == answer


def test_the_idle_timer_waits_while_the_user_s_segment_is_being_judged() -> None:
    """A reply ending while the user's segment is still being judged (a slow transcript) must not start the idle
    timer: the user spoke. The prompt is owed, armed once the verdict leaves the session idle, and fires then."""
    t = Listening(dx.TurnSettings(idle_timeout_ms=5000, interruption=dx.Interruption(enabled=False)))
    reply = t.agent_speaking()
    item = t.segment()  # over the reply (it plays on), its transcript slow
    assert not of(t.feed(dx.ReplyFinished(reply)), dx.ArmIdleTimer)
    assert of(t.feed(dx.SegmentClassified(item, "noise")), dx.ArmIdleTimer) == [dx.ArmIdleTimer(5000)]
    assert of(t.feed(dx.IdleTimerFired(t.now_ms + 5000)), dx.IdleTimeout)


def test_a_query_that_cut_the_client_s_reply_is_answered_once_the_answered_turn_s_verdict_is_in() -> None:
    t = Listening()
    answered = t.segment()
    reply = of(t.feed(dx.ClientResponseCreate()), dx.StartReply)[0].response_id  # answers that segment
    t.feed(dx.ReplyAudio(reply, "a"))
    cutting = t.segment()  # over the client's reply: paused it at the onset
    assert of(t.feed(dx.SegmentClassified(cutting, "query")), dx.CancelReply)  # its answer waits for the other
    assert of(t.feed(dx.SegmentClassified(answered, "query")), dx.StartReply)


def test_the_last_verdict_resumes_a_reply_nothing_cut_even_when_it_was_answered_ahead() -> None:
    t = Listening()
    answered = t.segment()
    reply = of(t.feed(dx.ClientResponseCreate()), dx.StartReply)[0].response_id
    t.feed(dx.ReplyAudio(reply, "a"))
    cough = t.segment()  # paused the client's reply
    assert not of(t.feed(dx.SegmentClassified(cough, "noise")), dx.ResumeReply)  # the other is still judged
    assert of(t.feed(dx.SegmentClassified(answered, "query")), dx.ResumeReply)


def test_an_out_of_band_response_does_not_answer_the_turn_being_judged() -> None:
    """A reply with its own ``input`` and kept out of the conversation never saw the turn: it is owed still."""
    t = Listening()
    item = t.segment()
    aside = ResponseParams(conversation="none", input=[])
    reply = of(t.feed(dx.ClientResponseCreate(params=aside)), dx.StartReply)[0].response_id
    t.feed(dx.SegmentClassified(item, "query"))
    assert of(t.feed(dx.ReplyFinished(reply)), dx.StartReply)


def test_a_client_cancel_also_drops_a_query_over_the_reply_whose_verdict_comes_after_it() -> None:
    t = Listening(NO_INTERRUPT)
    t.agent_speaking()
    query = t.segment()  # over the reply, still being judged
    assert of(t.feed(dx.ClientResponseCancel()), dx.CancelReply)
    late = t.feed(dx.SegmentClassified(query, "query"))
    assert not of(late, dx.StartReply) and not of(late, dx.DiscardSegment), "kept in the conversation, unanswered"


CANCELLED_ANSWER = "not answered: the client cancelled the reply that answered it"


def _query(item_id: str) -> dx.SegmentClassified:
    return dx.SegmentClassified(item_id, "query", ListenDecision("query", ("words",)))


def test_a_turn_answered_ahead_whose_answer_the_client_cancels_is_not_reported_answered() -> None:
    """The client's reply created while the turn was judged answers it; the client then cancels that reply. The
    verdict must not claim the turn answered (nor answer it behind the client's back): kept, unanswered."""
    t = Listening()
    item = t.segment()
    reply = of(t.feed(dx.ClientResponseCreate()), dx.StartReply)[0].response_id
    t.feed(dx.ReplyAudio(reply, "a"))
    assert of(t.feed(dx.ClientResponseCancel()), dx.CancelReply)
    verdict = t.feed(_query(item))
    assert of(verdict, dx.ReportSegment)[0].action == CANCELLED_ANSWER
    assert not of(verdict, dx.StartReply) and not of(verdict, dx.DiscardSegment)


def test_a_turn_answered_ahead_is_answered_by_the_client_s_next_reply_after_the_cancel() -> None:
    t = Listening(NO_INTERRUPT)
    t.agent_speaking()
    item = t.segment()  # over the reply, which plays on
    t.feed(dx.ClientResponseCancel())
    first = of(t.feed(dx.ClientResponseCreate()), dx.StartReply)[0].response_id
    t.feed(dx.ClientResponseCancel())
    assert of(t.feed(dx.ClientResponseCreate()), dx.StartReply)[0].response_id != first
    verdict = t.feed(_query(item))
    assert of(verdict, dx.ReportSegment)[0].action == "answered by the reply the client started while it was judged"
    assert not of(verdict, dx.StartReply)


def test_cancelling_a_later_reply_leaves_a_turn_answered_by_an_earlier_one_answered() -> None:
    t = Listening()
    item = t.segment()
    answer = of(t.feed(dx.ClientResponseCreate()), dx.StartReply)[0].response_id
    t.feed(dx.ReplyFinished(answer))
    assert of(t.feed(dx.ClientResponseCreate()), dx.StartReply), "a second reply while the turn is still judged"
    t.feed(dx.ClientResponseCancel())
    verdict = t.feed(_query(item))
    assert of(verdict, dx.ReportSegment)[0].action == "answered by the reply the client started while it was judged"
    assert not of(verdict, dx.StartReply)


def test_speech_over_a_finished_reply_the_client_may_still_play_cuts_it_at_the_onset_whatever_the_verdict() -> None:
    """A reply whose ``response.done`` is out cannot be paused or resumed: a client stops playing it at
    ``speech_started`` (interruptions on), and no verdict restarts it, so it was heard up to the onset even when
    the sound is then judged a cough. With interruptions off the client plays it on and none of it is cut."""
    t = Listening()
    reply = t.agent_speaking()
    t.feed(dx.ReplyFinished(reply))
    assert of(t.speech(64), dx.SpeechStarted)[0].cuts_playing
    quiet = Listening(NO_INTERRUPT)
    played_on = quiet.agent_speaking()
    quiet.feed(dx.ReplyFinished(played_on))
    assert not of(quiet.speech(64), dx.SpeechStarted)[0].cuts_playing
