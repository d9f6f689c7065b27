"""Per-connection budgets of the WebSocket layer: the client event rate and per-address sessions."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from enum import Enum


class TokenBucket:
    """``rate`` tokens a second, at most ``capacity`` banked; :meth:`take` spends one if there is one."""

    def __init__(self, rate: float, capacity: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.capacity = capacity
        self.clock = clock
        self.tokens = capacity
        self._last = clock()

    def take(self) -> bool:
        """Spend a token; False when the bucket is empty."""
        now = self.clock()
        self.tokens = min(self.capacity, self.tokens + (now - self._last) * self.rate)
        self._last = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


class Verdict(Enum):
    """What to do with one client event."""

    ADMIT = "admit"
    DROP = "drop"
    """Over the rate: drop it (the client has been told, at most once a second)."""
    DROP_AND_TELL = "drop_and_tell"
    CLOSE = "close"
    """Over the rate for too long: end the session."""


class EventRateLimiter:
    """A token bucket for client events, and a second, slower one for the events dropped.

    A burst above the rate is dropped and answered with one error a second; a client that keeps
    sending faster than the rate (dropped events worth ``tolerance_s`` of the full rate, refilled
    at a tenth of the rate) is closed.
    """

    def __init__(self, rate: float, burst: int, *, tolerance_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.events = TokenBucket(rate, burst, clock)
        self.tolerance = TokenBucket(rate / 10, rate * tolerance_s, clock)
        self.clock = clock
        self.dropped = 0
        self._told_at = float("-inf")

    def check(self) -> Verdict:
        """The verdict for the event that just arrived."""
        if self.events.take():
            return Verdict.ADMIT
        self.dropped += 1
        if not self.tolerance.take():
            return Verdict.CLOSE
        now = self.clock()
        if now - self._told_at >= 1.0:
            self._told_at = now
            return Verdict.DROP_AND_TELL
        return Verdict.DROP


class AddressCounter:
    """Open sessions per client address, with a cap."""

    def __init__(self, per_address: int) -> None:
        self.per_address = per_address
        self.open: Counter[str] = Counter()

    def acquire(self, address: str) -> bool:
        """Count one more session from ``address``; False (and nothing counted) over the cap."""
        if self.open[address] >= self.per_address:
            return False
        self.open[address] += 1
        return True

    def release(self, address: str) -> None:
        """That session ended."""
        self.open[address] -= 1
        if self.open[address] <= 0:
            del self.open[address]
