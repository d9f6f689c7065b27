"""The machine's closed replies the client still plays: when each playback ends and how much of it was heard, the
timers it arms for that, and the bound. Scripted tables of events and the actions each must give."""

from __future__ import annotations

import pytest

from bargein.session import core as dx
from bargein.session.core.closed_playback import CUT_GRACE_MS, MAX_PLAYING, speech_cuts
from tests.support.timelines import Listening, Timeline

R, ITEM, AUDIO = "resp_closed", "item_closed", 3000.0
"""One closed reply of 3 s of audio."""


def playing(sent_ms: float = AUDIO, left_ms: float = 900.0, response_id: str = R,
            item_id: str = ITEM) -> dx.ClosedReplyPlaying:
    """The reply closed while the client plays it: ``sent_ms`` of it left, ``left_ms`` of it not played yet."""
    return dx.ClosedReplyPlaying(response_id, item_id, AUDIO, sent_ms, left_ms)


SCENARIOS: dict[str, list[tuple[dx.Event, list[dx.Action]]]] = {
    "played out in full at once": [
        (playing(left_ms=0.5), [dx.ReplyHeard(R, AUDIO)]),
        (dx.ClosedPlaybackTimerFired(R, 1), []),
    ],
    "played out in full once the client has had time to play the last sample": [
        (playing(left_ms=900.0), [dx.ArmClosedPlaybackTimer(R, 900.0, 1)]),
        (dx.ClosedReplySent(R, AUDIO, 600.0), []),  # timed already
        (dx.ClosedPlaybackTimerFired(R, 1), [dx.ReplyHeard(R, AUDIO)]),
        (dx.ClosedPlaybackTimerFired(R, 1), []),  # told once
    ],
    "timed only once its last delta has left": [
        (playing(sent_ms=1000.0, left_ms=2600.0), []),
        (dx.ClosedReplySent(R, 2998.0, 2000.0), []),  # 2 ms still wait in the outbound queue
        (dx.ClosedReplySent(R, 2999.5, 1900.0), [dx.ArmClosedPlaybackTimer(R, 1900.0, 1)]),
        (dx.ClosedPlaybackTimerFired(R, 1), [dx.ReplyHeard(R, AUDIO)]),
    ],
    "cut, then the client's truncate within the grace": [
        (playing(left_ms=900.0), [dx.ArmClosedPlaybackTimer(R, 900.0, 1)]),
        (dx.ClosedReplyCut(R, 1200.0), [dx.ArmClosedPlaybackTimer(R, CUT_GRACE_MS, 2)]),
        (dx.ClosedPlaybackTimerFired(R, 1), []),  # the play-out timer the cut replaced: stale
        (dx.ClosedReplyTruncated(ITEM, 1100.0), [dx.ReplyHeard(R, 1100.0)]),  # the cut arms no idle timer again
        (dx.ClosedPlaybackTimerFired(R, 2), []),
    ],
    "cut, and the grace runs out with no truncate": [
        (playing(sent_ms=1000.0, left_ms=2600.0), []),
        (dx.ClosedReplyCut(R, 400.0), [dx.ArmClosedPlaybackTimer(R, CUT_GRACE_MS, 1)]),
        (dx.ClosedReplySent(R, AUDIO, 2000.0), []),  # the grace runs
        (dx.ClosedPlaybackTimerFired(R, 1), [dx.ReplyHeard(R, 400.0)]),
        (dx.ClosedReplyTruncated(ITEM, 300.0), []),  # told already
    ],
    "truncated by the client with no cut": [
        (playing(left_ms=900.0), [dx.ArmClosedPlaybackTimer(R, 900.0, 1)]),
        (dx.ClosedReplyTruncated("item_other", 100.0), []),
        (dx.ClosedReplyTruncated(ITEM, 700.0), [dx.ReplyHeard(R, 700.0)]),
        (dx.ClosedPlaybackTimerFired(R, 1), []),
    ],
    "stale firings": [
        (dx.ClosedPlaybackTimerFired("resp_never", 1), []),
        (playing(left_ms=900.0), [dx.ArmClosedPlaybackTimer(R, 900.0, 1)]),
        (dx.ClosedPlaybackTimerFired(R, 7), []),  # not its arming
        (dx.ClosedReplyCut("resp_never", 100.0), []),
        (dx.ClosedReplySent("resp_never", AUDIO, 0.0), []),
        (dx.ClosedPlaybackTimerFired(R, 1), [dx.ReplyHeard(R, AUDIO)]),
    ],
    "the session closes": [
        (playing(sent_ms=1000.0, left_ms=2600.0), []),
        (playing(sent_ms=1000.0, left_ms=2600.0, response_id="resp_cut", item_id="item_cut"), []),
        (dx.ClosedReplyCut("resp_cut", 250.0), [dx.ArmClosedPlaybackTimer("resp_cut", CUT_GRACE_MS, 1)]),
        (dx.SessionClosing(), [dx.ReplyHeard(R, None), dx.ReplyHeard("resp_cut", 250.0)]),
        (dx.ClosedPlaybackTimerFired("resp_cut", 1), []),
        (dx.SessionClosing(), []),
    ],
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_closed_playback(name: str) -> None:
    t = Timeline()
    for step, (event, expected) in enumerate(SCENARIOS[name]):
        assert t.feed(event) == expected, f"{name}, step {step}: {event}"


def test_no_more_than_the_bound_are_kept() -> None:
    """Replies whose deltas never all leave are pushed out oldest first: as far as they had played (the shell's
    estimate), a cut one as far as its cut."""
    t = Timeline()
    assert t.feed(playing(sent_ms=1000.0, left_ms=2600.0, response_id="resp_0")) == []
    assert t.feed(dx.ClosedReplyCut("resp_0", 250.0)) == [dx.ArmClosedPlaybackTimer("resp_0", CUT_GRACE_MS, 1)]
    for number in range(1, MAX_PLAYING):
        assert t.feed(playing(sent_ms=1000.0, left_ms=2600.0, response_id=f"resp_{number}")) == []
    told = [t.feed(playing(sent_ms=1000.0, left_ms=2600.0, response_id=f"resp_{number}"))
            for number in range(MAX_PLAYING, MAX_PLAYING + 3)]
    assert told == [[dx.ReplyHeard("resp_0", 250.0)], [dx.ReplyHeard("resp_1", None)], [dx.ReplyHeard("resp_2", None)]]
    assert len(t.machine.closed_playback.replies) == MAX_PLAYING
    assert t.feed(dx.ClosedPlaybackTimerFired("resp_0", 1)) == [], "told already: its grace is stale"


def test_a_truncate_counts_the_idle_timeout_from_now_unless_the_server_had_cut_the_reply() -> None:
    """The idle timer armed at the reply's end counts from the end of its audio; the client's truncate ended the
    playback now (re-armed), unless the user's speech had already cut it (the timer counted from that speech)."""
    for cut, rearmed in ((False, [dx.ArmIdleTimer(5000)]), (True, [])):
        t = Listening(dx.TurnSettings(idle_timeout_ms=5000))
        reply = t.agent_speaking()
        t.feed(dx.ReplyFinished(reply))
        assert t.feed(playing(sent_ms=1000.0, left_ms=2600.0, response_id=reply)) == []
        if cut:
            t.feed(dx.ClosedReplyCut(reply, 400.0))
        assert t.feed(dx.ClosedReplyTruncated(ITEM, 300.0)) == [dx.ReplyHeard(reply, 300.0), *rearmed]


@pytest.mark.parametrize(("sent_ms", "heard_ms", "cuts"), [
    (1000.0, 0.0, True),
    (1000.0, 998.9, True),  # just over 1 ms short of what was sent: cut
    (1000.0, 999.0, False),  # within 1 ms of it: played out
    (1000.0, 1000.0, False),
    (1000.0, 1400.0, False),  # the estimate's clock ran on past the last delta
    (0.0, 0.0, False),  # nothing was sent: nothing to cut
])
def test_speech_cuts_a_closed_reply_only_short_of_what_was_sent(sent_ms: float, heard_ms: float, cuts: bool) -> None:
    """The user speaking over a closed reply cuts it unless the client had played all it was sent (to within 1 ms)."""
    assert speech_cuts(sent_ms, heard_ms) is cuts


def test_the_idle_timeout_waits_for_the_replies_played_to_their_end_not_the_cut_ones() -> None:
    """Of the closed replies the client still plays, the idle timer waits for those not cut: a cut one's playback
    stopped at the cut (it leaves the count at the cut, and the reply at its truncate or the end of the grace)."""
    t = Timeline()
    for number in range(3):
        assert t.feed(playing(sent_ms=1000.0, left_ms=2600.0, response_id=f"resp_{number}",
                              item_id=f"item_{number}")) == []
    closed = t.machine.closed_playback
    assert closed.playing_to_end() == {"resp_0", "resp_1", "resp_2"}
    t.feed(dx.ClosedReplyCut("resp_1", 400.0))
    assert closed.playing_to_end() == {"resp_0", "resp_2"}, "cut: its playback stopped there"
    t.feed(dx.ClosedReplyCut("resp_gone", 400.0))
    assert closed.playing_to_end() == {"resp_0", "resp_2"}, "a reply not held changes nothing"
    t.feed(dx.ClosedReplyTruncated("item_2", 900.0))
    assert closed.playing_to_end() == {"resp_0"}, "truncated: played no further"
    t.feed(dx.ClosedPlaybackTimerFired("resp_1", 1))
    t.feed(dx.SessionClosing())
    assert closed.playing_to_end() == frozenset(), "the session closed: nothing left to play"
