"""A share of one core that a shared model may spend, as a bucket of CPU seconds.

Optional work (the end-of-turn model's score at a pause, whose absence leaves a turn on plain silence) is
worth running only while the machine has CPU to spare: spent without limit on a busy server it delays every
session's audio. The bucket refills at ``share`` CPU seconds per second of wall time and holds at most
``share * burst_s``; a request is admitted while the bucket is not empty, and pays what its pass really
cost once it has run (an estimate is held back meanwhile, so a burst of requests cannot all slip in on one
refill; a request whose pass failed keeps paying the estimate). One session's pauses never come near the
limit; a crowd's are cut to the share. Pure code (the clock is a parameter).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class CpuBudget:
    """CPU seconds a shared model may spend: ``share`` of one core, bursts of up to ``burst_s`` at that share."""

    share: float
    burst_s: float = 4.0
    clock: Callable[[], float] = time.monotonic
    _tokens: float = field(init=False)
    _at: float = field(init=False)

    def __post_init__(self) -> None:
        if not self.share > 0.0:  # NaN too
            raise ValueError(f"a CPU share must be positive, not {self.share}")
        self._tokens = self.capacity
        self._at = self.clock()

    @property
    def capacity(self) -> float:
        """The most CPU seconds the bucket holds."""
        return self.share * self.burst_s

    @property
    def available(self) -> float:
        """CPU seconds that may be spent now (negative after passes that cost more than was held back)."""
        self._refill()
        return self._tokens

    def admit(self, estimate_s: float) -> bool:
        """Take ``estimate_s`` for a request if the bucket is not empty; False: the request should not run."""
        self._refill()
        if self._tokens <= 0.0:
            return False
        self._tokens -= estimate_s
        return True

    def settle(self, estimate_s: float, spent_s: float) -> None:
        """A request admitted with ``estimate_s`` ran and cost ``spent_s`` (0 for one withdrawn before it ran)."""
        self._refill()
        self._tokens = min(self.capacity, self._tokens + estimate_s - spent_s)

    def _refill(self) -> None:
        now = self.clock()
        self._tokens = min(self.capacity, self._tokens + (now - self._at) * self.share)
        self._at = now
