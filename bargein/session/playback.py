"""The server's estimate of what the client has played, from real-time pacing of what it sent.

A client that sends no ``conversation.item.truncate`` still gets heard-only history: an item's audio
cannot have played faster than real time from the moment its first delta left, nor past what was sent.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class PlaybackEstimate:
    """Audio sent for one assistant item and when it started leaving."""

    clock: Callable[[], float] = time.monotonic
    sent_ms: float = 0.0
    first_sent_wall_s: float | None = None
    _stall_ms: float = field(default=0.0, init=False)

    def on_sent(self, duration_ms: float) -> None:
        """A delta of ``duration_ms`` was written to the socket."""
        now = self.clock()
        if self.first_sent_wall_s is None:
            self.first_sent_wall_s = now
        else:
            # a gap in sending (the TTS fell behind) leaves the client's buffer empty for a while
            played_by_now = 1000.0 * (now - self.first_sent_wall_s) - self._stall_ms
            if played_by_now > self.sent_ms:
                self._stall_ms += played_by_now - self.sent_ms
        self.sent_ms += duration_ms

    def heard_ms(self) -> float:
        """How much of the item the client has played by now, at most."""
        if self.first_sent_wall_s is None:
            return 0.0
        played = 1000.0 * (self.clock() - self.first_sent_wall_s) - self._stall_ms
        return max(0.0, min(self.sent_ms, played))


@dataclass
class Pacer:
    """Keeps a reply's audio at most ``lead_ms`` ahead of real-time playback.

    Sending a whole reply at once would leave it "done" on the server while the client still plays
    it; pacing keeps the client's buffer to ``lead_ms``, so it never holds more than that to throw away,
    and the reply runner keeps the reply live while that last stretch plays.
    """

    lead_ms: float = 1000.0
    clock: Callable[[], float] = time.monotonic
    started_s: float | None = None

    def delay_s(self, forwarded_ms: float) -> float:
        """How long to wait before forwarding more, given ``forwarded_ms`` already forwarded."""
        now = self.clock()
        if self.started_s is None:
            self.started_s = now
        played_ms = 1000.0 * (now - self.started_s)
        return max(0.0, (forwarded_ms - played_ms - self.lead_ms) / 1000.0)
