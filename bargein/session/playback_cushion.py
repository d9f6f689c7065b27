"""How much of a reply's audio the client still has ahead of it: when that runs short, the next clause goes early.

A reply's later clauses end at a sentence end (or a long clause's comma), which reads and sounds best. But the
model writes a long sentence more slowly than the clause before it plays when the machine is busy, and the
client's speaker then waits in the middle of the reply. After the first clause, the reply pipeline asks
:meth:`PlaybackCushion.running_short` at every token that completes no clause while no clause is queued. While the
speech stage waits for text and the audio forwarded but not yet played (the reply's playback estimate,
:class:`~bargein.session.playback.PlaybackEstimate`) is under :data:`CUSHION_LOW_MS`, the whole words written so
far are spoken as a clause of their own (at least :data:`HURRY_MIN_WORDS`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

CUSHION_LOW_MS = 400.0
"""Audio still to play under which the next clause is released early: a clause's synthesis starts speaking in
tens of milliseconds, and a token that completes a word comes every 30 to 60 ms, so this leaves room for both."""
HURRY_MIN_WORDS = 3
"""Fewest whole words released early: fewer sound like a stammer (as many as a reply's first clause has at most)."""


@dataclass
class PlaybackCushion:
    """One reply's audio still to play, and whether its speech stage is busy with a clause (then the audio it is
    making is on its way, whatever the client has left)."""

    ahead_ms: Callable[[], float | None]
    """Audio forwarded to the client and not yet played (``None``: none forwarded yet, or the reply is paused)."""
    speaking: bool = False
    """The speech stage holds a clause (set when it takes one, cleared when it waits for the next)."""

    def running_short(self) -> bool:
        """The speech stage waits for text while the client is about to run out of audio."""
        if self.speaking:
            return False
        ahead = self.ahead_ms()
        return ahead is not None and ahead < CUSHION_LOW_MS
