"""The machine's play-out timer: a reply whose words are all out stays live while the client plays its last stretch,
at most the session's wait (pauses not counted), and a stale firing changes nothing. Scripted timelines."""

from __future__ import annotations

from bargein.session import core as dx
from bargein.session.core.settings import PLAYOUT_WAIT_MS
from bargein.values import Transcript
from tests.support.timelines import Listening, of

WAITS = dx.TurnSettings(interruption=dx.Interruption(playout_wait_ms=PLAYOUT_WAIT_MS))
"""A session's settings as far as the play-out wait goes."""


def _playing_out() -> tuple[Listening, str, dx.ArmPlayOutTimer]:
    t = Listening(WAITS)
    reply = t.agent_speaking()
    armed = t.feed(dx.ReplyPlayingOut(reply))
    assert armed == [dx.ArmPlayOutTimer(reply, PLAYOUT_WAIT_MS, 1)], "its last stretch plays: the wait begins"
    return t, reply, armed[0]


def test_the_timer_running_out_ends_a_reply_playing_out_its_last_stretch() -> None:
    t, reply, armed = _playing_out()
    assert t.machine.active_response_id == reply, "live while the client plays it: speech would still pause it"
    done = t.feed(dx.PlayOutTimerFired(reply, armed.arm))
    assert of(done, dx.CompleteReply) == [dx.CompleteReply(reply, "completed")]
    assert t.machine.active_response_id is None and t.machine.phase is dx.Phase.LISTENING
    assert t.feed(dx.PlayOutTimerFired(reply, armed.arm)) == [], "fired again after the end: stale"


def test_a_reply_played_out_before_the_timer_ends_once() -> None:
    t, reply, armed = _playing_out()
    assert of(t.feed(dx.ReplyFinished(reply)), dx.CompleteReply) == [dx.CompleteReply(reply, "completed")]
    assert t.feed(dx.PlayOutTimerFired(reply, armed.arm)) == [], "the timer of a reply that ended is stale"


def test_a_pause_stops_the_count_and_the_resume_starts_it_afresh() -> None:
    t, reply, armed = _playing_out()
    assert of(t.frames(0.9, 96, energy_db=-25.0), dx.PauseReply), "a cough pauses the last stretch"
    assert t.feed(dx.PlayOutTimerFired(reply, armed.arm)) == [], "a paused reply waits for its verdict, not the timer"
    item = of(t.silence(544), dx.AwaitClassification)[0].item_id
    decided = t.feed(dx.SegmentTranscribed(item, Transcript("", no_speech_prob=0.9)))
    assert [type(a) for a in decided] == [dx.ReportSegment, dx.DiscardSegment, dx.ResumeReply, dx.ArmPlayOutTimer]
    again = of(decided, dx.ArmPlayOutTimer)[0]
    assert again == dx.ArmPlayOutTimer(reply, PLAYOUT_WAIT_MS, 2), "the resume sends the tail again: a full wait"
    assert t.feed(dx.PlayOutTimerFired(reply, armed.arm)) == [], "the timer armed before the pause is stale"
    assert of(t.feed(dx.PlayOutTimerFired(reply, again.arm)), dx.CompleteReply) == [
        dx.CompleteReply(reply, "completed")]


def test_a_firing_for_another_reply_changes_nothing() -> None:
    t, reply, armed = _playing_out()
    assert t.feed(dx.PlayOutTimerFired("resp_gone", armed.arm)) == []
    assert t.machine.active_response_id == reply


def test_a_reply_still_speaking_arms_no_timer() -> None:
    t = Listening(WAITS)
    t.agent_speaking()
    assert not of(t.actions, dx.ArmPlayOutTimer), "only once every word is out"


def test_every_session_waits_the_same_and_a_bare_machine_waits_for_the_shell_alone() -> None:
    from bargein.protocol.session_config import SessionConfig
    from bargein.session.core.settings import settings_from_config

    assert settings_from_config(SessionConfig()).interruption.playout_wait_ms == PLAYOUT_WAIT_MS
    assert dx.TurnSettings.manual().interruption.playout_wait_ms == PLAYOUT_WAIT_MS
    t = Listening()
    reply = t.agent_speaking()
    assert t.feed(dx.ReplyPlayingOut(reply)) == [], "no timer: the shell's ReplyFinished ends it"
