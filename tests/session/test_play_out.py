"""Closed replies the client may still be playing: each told once, and never more kept than the bound (the shell's
handles, with the machine deciding)."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

from bargein.session import core as dx
from bargein.session.core.closed_playback import MAX_PLAYING
from bargein.session.play_out import PlayingOut


def _reply(number: int, *, audio_ms: float = 3000.0, sent_ms: float = 1000.0, played_ms: float = 400.0) -> object:
    """A reply whose deltas have not all left (so no play-out timer is due): it waits for its playback's end."""
    return SimpleNamespace(response_id=f"resp_{number}",
                           state=SimpleNamespace(item=SimpleNamespace(id=f"item_{number}", audio_ms=audio_ms,
                                                                      heard_ms=None)),
                           playback=SimpleNamespace(sent_ms=sent_ms, heard_ms=lambda: played_ms),
                           audio_left_ms=lambda: audio_ms - played_ms)


def _playing_out(told: list[tuple[str, float]]) -> PlayingOut:
    """The shell's closed replies wired to a machine, as a session wires them: its ``ReplyHeard`` carried out (its
    timers are not: these replies' deltas never all leave)."""
    counter = itertools.count(1)
    machine = dx.DuplexMachine(lambda prefix: f"{prefix}_{next(counter)}")

    def feed(event: dx.Event) -> None:
        machine.feed(event)
        for action in machine.take_actions():
            if isinstance(action, dx.ReplyHeard):
                playing.played(action.response_id, action.heard_ms)

    playing = PlayingOut(lambda response_id, heard_ms: told.append((response_id, heard_ms)), feed)
    return playing


def test_replies_whose_playback_never_ends_are_told_as_played_so_far_past_the_bound() -> None:
    told: list[tuple[str, float]] = []
    playing = _playing_out(told)
    for number in range(MAX_PLAYING + 3):
        playing.add(_reply(number))  # type: ignore[arg-type]
    assert len(playing.replies) == MAX_PLAYING
    assert told == [(f"resp_{number}", 400.0) for number in range(3)], "the oldest, as far as they had played"
    playing.close()
    assert len(told) == MAX_PLAYING + 3 and not playing.replies, "each told once"


async def test_a_cut_reply_evicted_past_the_bound_is_told_as_far_as_its_cut() -> None:
    """The user spoke over the oldest reply 250 ms in (the history holds the cut) while the estimate says 400 ms
    played: pushed out by the ninth reply it counts as heard to the cut, as the session's close would count it."""
    told: list[tuple[str, float]] = []
    playing = _playing_out(told)
    cut = _reply(0)
    playing.add(cut)  # type: ignore[arg-type]
    cut.state.item.heard_ms = 250.0  # type: ignore[attr-defined]
    playing.cut(cut, 250.0)  # type: ignore[arg-type]
    for number in range(1, MAX_PLAYING + 1):
        playing.add(_reply(number))  # type: ignore[arg-type]
    assert told == [("resp_0", 250.0)]
    playing.close()
    assert len(told) == MAX_PLAYING + 1 and not playing.replies
