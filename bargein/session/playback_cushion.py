"""How much of a reply's audio the client still has ahead of it: when that runs short, the next clause goes early.

A reply's later clauses end at a sentence end (or a long clause's comma), which reads and sounds best. But the
model writes a long sentence more slowly than the clause before it plays when the machine is busy, and the
client's speaker then waits in the middle of the reply. The reply pipeline asks :meth:`PlaybackCushion.running_short`
at every token: while the speech stage waits for text and the audio sent but not yet played has fallen under
:data:`CUSHION_LOW_MS`, the whole words written so far are spoken as a clause of their own (at least
:data:`HURRY_MIN_WORDS`). The played position is estimated as a client that plays each delta on arrival would:
wall time since the reply's first audio left, at the voice's own pace.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

CUSHION_LOW_MS = 400.0
"""Audio still to play under which the next clause is released early: a clause's synthesis starts speaking in
tens of milliseconds, and a token that completes a word comes every 30 to 60 ms, so this leaves room for both."""
HURRY_MIN_WORDS = 3
"""Fewest whole words released early: fewer sound like a stammer (the reply's first clause has the same cap)."""


@dataclass
class PlaybackCushion:
    """The audio of one reply sent so far against the time since its first delta left, and whether the speech
    stage is busy with a clause (then the audio it is making is on its way)."""

    clock: Callable[[], float] = time.monotonic
    sent_ms: float = 0.0
    first_sent_s: float | None = None
    speaking: bool = field(default=False)
    """The speech stage is synthesising a clause (set while it holds one, cleared when it waits for the next)."""

    def sent(self, duration_ms: float) -> None:
        """A delta of ``duration_ms`` of audio left for the client."""
        if self.first_sent_s is None:
            self.first_sent_s = self.clock()
        self.sent_ms += duration_ms

    def ahead_ms(self) -> float | None:
        """Audio sent but not yet played (``None`` before the first delta)."""
        if self.first_sent_s is None:
            return None
        return self.sent_ms - 1000.0 * (self.clock() - self.first_sent_s)

    def running_short(self) -> bool:
        """The speech stage waits for text while the client is about to run out of audio."""
        ahead = self.ahead_ms()
        return not self.speaking and ahead is not None and ahead < CUSHION_LOW_MS
