"""Edges of the duplex machine found by a bug hunt: each scripted timeline once left a session without its idle
prompt (or with one the client had switched off), with an owed answer waiting for the user to speak again, or
answering a turn long after its settings said not to."""

from __future__ import annotations

from dataclasses import replace

from bargein.session import core as dx
from bargein.session.core.settings import Interruption
from tests.support.timelines import Listening, of

IDLE = dx.TurnSettings(idle_timeout_ms=5000)
NO_AUTO_REPLY = dx.TurnSettings(create_response=False)


def _idle_after_a_reply(t: Listening) -> None:
    reply = t.agent_speaking()
    assert of(t.feed(dx.ReplyFinished(reply)), dx.ArmIdleTimer) == [dx.ArmIdleTimer(5000)]


def test_a_cough_after_a_reply_does_not_cancel_the_idle_prompt_for_good() -> None:
    """The user's onset disarms the idle timer; a segment then judged noise starts no reply, so the session is idle
    again and the timer must run again, or a phone call whose caller only coughed is silent forever."""
    t = Listening(IDLE)
    _idle_after_a_reply(t)
    cough = t.segment(96)
    assert of(t.actions, dx.DisarmIdleTimer)
    decided = t.feed(dx.SegmentClassified(cough, "noise"))
    assert of(decided, dx.ArmIdleTimer) == [dx.ArmIdleTimer(5000)]
    assert of(t.feed(dx.IdleTimerFired(t.now_ms + 5000)), dx.IdleTimeout)


def test_a_turn_the_client_clears_does_not_cancel_the_idle_prompt_for_good() -> None:
    t = Listening(IDLE)
    _idle_after_a_reply(t)
    t.speech(320)
    cleared = t.feed(dx.ClientClear())
    assert of(cleared, dx.ClearBuffer) and of(cleared, dx.ArmIdleTimer) == [dx.ArmIdleTimer(5000)]


def test_noise_before_any_reply_arms_no_idle_timer() -> None:
    """The idle prompt follows the agent's last reply: a session that has not replied yet has none to re-arm."""
    t = Listening(IDLE)
    cough = t.segment(96)
    assert not of(t.feed(dx.SegmentClassified(cough, "noise")), dx.ArmIdleTimer)


def test_a_query_heard_while_create_response_was_off_is_not_answered_once_it_is_on() -> None:
    """``create_response: false``: the client answers turns itself. Switching it on later must not make the next
    cough start an automatic reply to a turn from long before."""
    t = Listening(NO_AUTO_REPLY)
    query = t.segment()
    assert not of(t.feed(dx.SegmentClassified(query, "query")), dx.StartReply)
    t.feed(dx.SettingsChanged(dx.TurnSettings()))
    t.silence(5000)
    cough = t.segment(96)
    assert not of(t.feed(dx.SegmentClassified(cough, "noise")), dx.StartReply)


def test_a_query_judged_after_turn_detection_went_off_is_not_answered_once_it_is_back() -> None:
    t = Listening()
    query = t.segment()
    t.feed(dx.SettingsChanged(dx.TurnSettings.manual()))  # push to talk, while the segment is being judged
    assert not of(t.feed(dx.SegmentClassified(query, "query")), dx.StartReply)
    t.feed(dx.SettingsChanged(dx.TurnSettings()))
    cough = t.segment(96)
    assert not of(t.feed(dx.SegmentClassified(cough, "noise")), dx.StartReply)


def test_a_query_judged_while_create_response_is_off_still_cuts_the_reply_it_paused() -> None:
    """``interrupt_response`` stays in force without automatic replies: the query cancels the reply, no answer."""
    t = Listening(NO_AUTO_REPLY)
    reply = of(t.feed(dx.ClientResponseCreate()), dx.StartReply)[0].response_id
    t.feed(dx.ReplyAudio(reply, "a"))
    query = t.segment()
    decided = t.feed(dx.SegmentClassified(query, "query"))
    assert of(decided, dx.CancelReply) == [dx.CancelReply(reply, "turn_detected")] and not of(decided, dx.StartReply)


def test_a_query_waiting_behind_a_turn_the_client_clears_is_answered_at_the_clear() -> None:
    """The verdict on the first segment comes while the user speaks again, so its answer waits for that turn; the
    client clearing the buffer ends that turn with no endpoint, and the first one's answer must not wait for the
    user to speak a third time."""
    t = Listening()
    query = t.segment()
    t.speech(320)  # the user goes on before the verdict
    assert not of(t.feed(dx.SegmentClassified(query, "query")), dx.StartReply)
    cleared = t.feed(dx.ClientClear())
    assert of(cleared, dx.ClearBuffer) and of(cleared, dx.StartReply)


def test_an_idle_timer_armed_before_the_client_switched_idle_timeouts_off_prompts_nothing() -> None:
    """A ``session.update`` that drops ``idle_timeout_ms`` leaves the timer armed at the last reply's end; when it
    fires the session must not prompt the user (nor while the user's segment is being judged)."""
    t = Listening(IDLE)
    _idle_after_a_reply(t)
    t.feed(dx.SettingsChanged(dx.TurnSettings()))
    assert not of(t.feed(dx.IdleTimerFired(t.now_ms + 5000)), dx.StartReply)
    item = t.segment()
    fired = t.feed(dx.IdleTimerFired(t.now_ms + 10_000))
    assert not of(fired, dx.IdleTimeout) and not of(fired, dx.StartReply), "the user's segment is being judged"
    assert of(t.feed(dx.SegmentClassified(item, "query")), dx.StartReply)


def test_an_idle_timer_that_fires_while_the_user_speaks_is_owed_when_the_turn_ends_in_nothing() -> None:
    """The reply ended while the user spoke over it (interruptions off) and the timer fired during that long turn:
    the fire is no prompt, but once the turn is judged noise the session is idle and the prompt is owed again."""
    t = Listening(replace(IDLE, interruption=Interruption(enabled=False)))
    reply = t.agent_speaking()
    t.speech(320)
    t.feed(dx.ReplyFinished(reply))
    t.speech(6000)
    assert not of(t.feed(dx.IdleTimerFired(t.now_ms)), dx.IdleTimeout), "the user is speaking: not idle"
    (judged,) = of(t.silence(544), dx.AwaitClassification)
    assert of(t.feed(dx.SegmentClassified(judged.item_id, "noise")), dx.ArmIdleTimer) == [dx.ArmIdleTimer(5000)]


def test_a_tool_output_that_arrives_while_the_user_coughs_owes_the_idle_prompt() -> None:
    t = Listening(IDLE)
    item = t.segment()
    reply = of(t.feed(dx.SegmentClassified(item, "query")), dx.StartReply)[0].response_id
    t.feed(dx.ReplyAudio(reply, "a0"))
    t.feed(dx.ToolWait(True))  # the reply made a client function call
    t.feed(dx.ReplyFinished(reply))
    t.speech(320)
    assert not of(t.feed(dx.ToolWait(False)), dx.ArmIdleTimer), "the user is speaking"
    (judged,) = of(t.silence(544), dx.AwaitClassification)
    assert of(t.feed(dx.SegmentClassified(judged.item_id, "noise")), dx.ArmIdleTimer) == [dx.ArmIdleTimer(5000)]


def test_a_query_the_client_answers_itself_arms_no_idle_prompt() -> None:
    """``create_response: false``: the client answers queries itself, however long it takes; an idle prompt the
    server started meanwhile would answer for it and refuse the client's own response."""
    t = Listening(replace(IDLE, create_response=False))
    reply = of(t.feed(dx.ClientResponseCreate()), dx.StartReply)[0].response_id
    t.feed(dx.ReplyAudio(reply, "a0"))
    t.feed(dx.ReplyFinished(reply))
    query = t.segment()
    assert not of(t.feed(dx.SegmentClassified(query, "query")), dx.ArmIdleTimer)
    assert not of(t.feed(dx.IdleTimerFired(t.now_ms + 5000)), dx.StartReply)
    assert of(t.feed(dx.ClientResponseCreate()), dx.StartReply)


def test_a_query_left_to_the_client_during_a_reply_arms_no_idle_prompt_when_that_reply_ends() -> None:
    t = Listening(replace(IDLE, create_response=False, interruption=Interruption(enabled=False)))
    reply = of(t.feed(dx.ClientResponseCreate()), dx.StartReply)[0].response_id
    t.feed(dx.ReplyAudio(reply, "a0"))
    query = t.segment()  # over the reply, which plays on
    t.feed(dx.SegmentClassified(query, "query"))
    assert not of(t.feed(dx.ReplyFinished(reply)), dx.ArmIdleTimer), "the client owes the answer"
    answer = of(t.feed(dx.ClientResponseCreate()), dx.StartReply)[0].response_id
    t.feed(dx.ReplyAudio(answer, "a1"))
    assert of(t.feed(dx.ReplyFinished(answer)), dx.ArmIdleTimer) == [dx.ArmIdleTimer(5000)], "answered: idle again"


def test_a_client_cancel_leaves_the_session_idle_and_the_idle_prompt_armed() -> None:
    """``response.cancel`` ends the agent's turn as surely as the reply ending by itself: the idle timeout counts
    from there, or a caller who stays silent after the client stopped the agent is never prompted."""
    t = Listening(IDLE)
    _idle_after_a_reply(t)
    t.feed(dx.IdleTimerFired(t.now_ms + 5000))  # the first idle prompt starts a reply
    prompt = t.machine.active_response_id
    assert prompt is not None
    t.feed(dx.ReplyAudio(prompt, "a1"))
    cancelled = t.feed(dx.ClientResponseCancel())
    assert of(cancelled, dx.CancelReply) and of(cancelled, dx.ArmIdleTimer) == [dx.ArmIdleTimer(5000)]
    assert of(t.feed(dx.IdleTimerFired(t.now_ms + 5000)), dx.IdleTimeout)


def test_a_client_cancel_while_the_user_speaks_owes_the_idle_prompt_until_the_turn_ends_in_nothing() -> None:
    t = Listening(replace(IDLE, interruption=Interruption(enabled=False)))
    t.agent_speaking()
    t.speech(320)  # over the reply, which plays on
    assert not of(t.feed(dx.ClientResponseCancel()), dx.ArmIdleTimer), "the user is speaking"
    (judged,) = of(t.silence(544), dx.AwaitClassification)
    assert of(t.feed(dx.SegmentClassified(judged.item_id, "noise")), dx.ArmIdleTimer) == [dx.ArmIdleTimer(5000)]


def test_a_client_cancel_while_a_tool_output_is_owed_arms_no_idle_prompt() -> None:
    t = Listening(IDLE)
    reply = t.agent_speaking()
    t.feed(dx.ToolWait(True))
    assert not of(t.feed(dx.ClientResponseCancel()), dx.ArmIdleTimer), "the client owes the call's output"
    assert t.machine.phase is dx.Phase.AWAITING_TOOL and t.machine.active_response_id != reply
    assert of(t.feed(dx.ToolWait(False)), dx.ArmIdleTimer) == [dx.ArmIdleTimer(5000)]


def test_a_new_idle_timeout_applies_to_the_idle_timer_already_armed() -> None:
    """``session.update`` raising or lowering ``idle_timeout_ms`` while the timer runs re-arms it with the new
    delay; one that leaves it alone does not restart the count; one that switches it off disarms it."""
    t = Listening(IDLE)
    _idle_after_a_reply(t)
    assert t.feed(dx.SettingsChanged(dx.TurnSettings(idle_timeout_ms=20_000))) == [dx.ArmIdleTimer(20_000)]
    assert t.feed(dx.SettingsChanged(dx.TurnSettings(idle_timeout_ms=2000))) == [dx.ArmIdleTimer(2000)]
    assert t.feed(dx.SettingsChanged(dx.TurnSettings(idle_timeout_ms=2000))) == [], "unchanged: the count goes on"
    assert t.feed(dx.SettingsChanged(dx.TurnSettings())) == [dx.DisarmIdleTimer()]
    assert t.feed(dx.SettingsChanged(IDLE)) == [dx.ArmIdleTimer(5000)], "still idle since the reply ended"
    assert of(t.feed(dx.IdleTimerFired(t.now_ms + 5000)), dx.IdleTimeout)


def test_an_idle_timeout_switched_on_after_the_reply_ended_arms_the_timer() -> None:
    t = Listening()
    reply = t.agent_speaking()
    assert not of(t.feed(dx.ReplyFinished(reply)), dx.ArmIdleTimer)
    assert t.feed(dx.SettingsChanged(IDLE)) == [dx.ArmIdleTimer(5000)]


def test_a_new_idle_timeout_arms_nothing_while_a_reply_plays_or_the_user_speaks() -> None:
    t = Listening()
    t.agent_speaking()
    assert not of(t.feed(dx.SettingsChanged(IDLE)), dx.ArmIdleTimer), "the reply's end arms it"
    t2 = Listening(IDLE)
    _idle_after_a_reply(t2)
    t2.speech(320)
    assert not of(t2.feed(dx.SettingsChanged(dx.TurnSettings(idle_timeout_ms=9000))), dx.ArmIdleTimer)
    (judged,) = of(t2.silence(544), dx.AwaitClassification)
    assert of(t2.feed(dx.SegmentClassified(judged.item_id, "noise")), dx.ArmIdleTimer) == [dx.ArmIdleTimer(9000)]


def test_an_idle_timeout_switched_back_on_after_a_stale_fire_arms_the_timer_again() -> None:
    """A timer that fires after idle prompts were switched off prompts nothing, and leaves the session as idle as
    it was: a delay set again starts the timer."""
    t = Listening(IDLE)
    _idle_after_a_reply(t)
    t.feed(dx.SettingsChanged(dx.TurnSettings()))
    assert t.feed(dx.IdleTimerFired(t.now_ms + 5000)) == []
    assert t.feed(dx.SettingsChanged(IDLE)) == [dx.ArmIdleTimer(5000)]


def test_a_reply_that_ends_under_manual_turns_leaves_no_idle_prompt_for_later() -> None:
    """Manual turns have no idle prompt: a reply that ends under them arms nothing, so switching to VAD turns
    with an idle timeout later starts no timer at once; the next reply's end does."""
    t = Listening(dx.TurnSettings.manual())
    (started,) = of(t.feed(dx.ClientResponseCreate()), dx.StartReply)
    assert not of(t.feed(dx.ReplyFinished(started.response_id)), dx.ArmIdleTimer)
    assert not of(t.feed(dx.SettingsChanged(IDLE)), dx.ArmIdleTimer), "idle since a reply under manual turns"
    _idle_after_a_reply(t)


def _truncate_a_closed_reply(t: Listening) -> list[dx.Action]:
    """The client truncates a closed reply it still plays (a stop button): its playback is told as heard to the
    truncate; what else the truncate did."""
    assert t.feed(dx.ClosedReplyPlaying("resp_closed", "item_closed", 3000.0, 1000.0, 2600.0)) == []
    truncated = t.feed(dx.ClosedReplyTruncated("item_closed", 500.0))
    assert truncated[:1] == [dx.ReplyHeard("resp_closed", 500.0)]
    return truncated[1:]


def test_a_reply_whose_playback_the_client_cuts_counts_the_idle_timeout_from_the_cut() -> None:
    """The timer armed at the reply's end counts from the end of its audio (the shell adds what the client still
    has to play); a ``conversation.item.truncate`` of that reply (a stop button) ended its playback now, so the
    timer is armed again, counted from the truncate."""
    t = Listening(IDLE)
    _idle_after_a_reply(t)
    assert _truncate_a_closed_reply(t) == [dx.ArmIdleTimer(5000)]
    assert of(t.feed(dx.IdleTimerFired(t.now_ms + 5000)), dx.IdleTimeout)


def test_a_playback_cut_arms_no_idle_timer_while_none_runs() -> None:
    """No timer runs while a reply lives, while the user speaks (the turn's end arms it) or without idle prompts:
    a truncate then arms nothing."""
    live = Listening(IDLE)
    live.agent_speaking()
    assert _truncate_a_closed_reply(live) == []
    speaking = Listening(IDLE)
    _idle_after_a_reply(speaking)
    speaking.speech(320)
    assert _truncate_a_closed_reply(speaking) == []
    off = Listening()
    assert not of(off.feed(dx.ReplyFinished(off.agent_speaking())), dx.ArmIdleTimer)
    assert _truncate_a_closed_reply(off) == []
