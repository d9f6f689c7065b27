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


def _wired(told: list[tuple[str, float]]) -> tuple[PlayingOut, dx.DuplexMachine]:
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
    return playing, machine


def _playing_out(told: list[tuple[str, float]]) -> PlayingOut:
    """:func:`_wired`'s closed replies alone."""
    return _wired(told)[0]


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


def test_the_idle_timer_waits_for_what_is_left_of_the_replies_the_machine_says_play_to_their_end() -> None:
    """The executor arms the idle timer for what is left of the replies the machine counts: a reply the user cut
    (with more left by its estimate than any other) no longer counts; none left, nothing to wait for."""
    told: list[tuple[str, float]] = []
    playing, machine = _wired(told)
    short, long = _reply(0, played_ms=2500.0), _reply(1, played_ms=400.0)
    playing.add(short)  # type: ignore[arg-type]
    playing.add(long)  # type: ignore[arg-type]
    assert playing.left_ms(machine.closed_playback.playing_to_end()) == 2600.0, "the longer of the two"
    long.state.item.heard_ms = 400.0  # type: ignore[attr-defined]
    playing.cut(long, 400.0)  # type: ignore[arg-type]
    assert playing.left_ms(machine.closed_playback.playing_to_end()) == 500.0, "the cut one stopped at its cut"
    playing.close()
    assert playing.left_ms(machine.closed_playback.playing_to_end()) == 0.0
