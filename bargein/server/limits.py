"""Per-connection budgets of the WebSocket layer: the client event rate and per-address sessions."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

BYTES_PER_EVENT = 16 * 1024
"""A message costs one event plus one per 16 KiB it carries (an 8 MiB message costs 513: it waits about
2.5 s at the default rate, so big messages cannot keep the event loop parsing; 20 ms audio appends
cost 1.1)."""


@dataclass(frozen=True)
class Throttle:
    """What the limiter says about one message: wait this long first; tell the client; or end the session."""

    wait_s: float = 0.0
    tell: bool = False
    """The client is being slowed down: send it a ``rate_limit_exceeded`` error (at most once a second)."""
    close: bool = False
    """The client has been over the rate for too long: end the session (policy close)."""


class EventRateLimiter:
    """A token bucket of client events (``rate`` a second, ``burst`` at once), enforced by waiting.

    A message over the rate is not dropped: the reader waits until the bucket allows it, so the
    socket is not read meanwhile and TCP slows the client down. A client kept waiting for
    ``sustain_s`` without once letting the bucket refill halfway is closed.
    """

    def __init__(self, rate: float, burst: float, *, sustain_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.burst = burst
        self.sustain_s = sustain_s
        self.clock = clock
        self.tokens = burst
        self.throttled_s = 0.0
        """Total time messages were held back (for metrics and tests)."""
        self._last = clock()
        self._streak_since: float | None = None
        self._told_at = float("-inf")

    def admit(self, size: int) -> Throttle:
        """Charge one message of ``size`` bytes and say how long the reader must wait before handling it."""
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self._last) * self.rate)
        self._last = now
        self.tokens -= 1.0 + size / BYTES_PER_EVENT
        if self.tokens >= 0.0:
            if self.tokens >= self.burst / 2:
                # the client let the bucket refill halfway: whatever it did before was a burst, not a flood
                self._streak_since = None
            return Throttle()
        wait_s = -self.tokens / self.rate
        self.throttled_s += wait_s
        if self._streak_since is None:
            self._streak_since = now
        if now + wait_s - self._streak_since > self.sustain_s:
            return Throttle(wait_s, close=True)
        tell = now - self._told_at >= 1.0
        if tell:
            self._told_at = now
        return Throttle(wait_s, tell=tell)


class AddressCounter:
    """Open sessions (or connections) per client address, with a cap."""

    def __init__(self, per_address: int) -> None:
        self.per_address = per_address
        self.open: Counter[str] = Counter()

    def acquire(self, address: str) -> bool:
        """Count one more from ``address``; False (and nothing counted) over the cap."""
        if self.open[address] >= self.per_address:
            return False
        self.open[address] += 1
        return True

    def release(self, address: str) -> None:
        """One from ``address`` ended."""
        self.open[address] -= 1
        if self.open[address] <= 0:
            del self.open[address]
