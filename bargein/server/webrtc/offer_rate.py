"""How often one client address may offer a call: a token bucket per address, checked before the offer is read.

An honest page offers one call at a time (a reload, a retry after a failed connect); a flood of offers from one
address would otherwise have every body read, every SDP parsed and, up to the address's cap of calls, a peer
connection built, all on the event loop. Over the rate an offer is refused with ``429`` and ``Retry-After``
before any of that. The book of addresses is bounded: an address whose bucket has refilled is forgotten (a fresh
bucket is the same), and past :data:`MAX_ADDRESSES` the longest-idle address is forgotten first. Each worker of
``--workers N`` keeps its own book, so one address may offer up to N times the rate in all.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

MAX_ADDRESSES = 4096
"""Addresses remembered at once (a few hundred KiB at most)."""


@dataclass
class _Bucket:
    tokens: float
    last: float


class OfferRate:
    """Offers per client address: ``rate`` a second sustained, ``burst`` at once."""

    def __init__(self, rate: float, burst: int, *, max_addresses: int = MAX_ADDRESSES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.burst = float(burst)
        self.max_addresses = max_addresses
        self.clock = clock
        self.buckets: OrderedDict[str, _Bucket] = OrderedDict()
        """The addresses seen lately, the longest idle first."""

    def admit(self, address: str) -> float:
        """Charge one offer from ``address``: 0.0 if it may go on, else the seconds until one would be allowed
        (nothing is charged for a refused offer, so a flood does not push its own wait further out)."""
        now = self.clock()
        bucket = self.buckets.pop(address, None)
        if bucket is None:
            bucket = _Bucket(self.burst, now)
            self._make_room(now)
        bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.last) * self.rate)
        bucket.last = now
        self.buckets[address] = bucket  # now the most recently seen
        if bucket.tokens < 1.0:
            return (1.0 - bucket.tokens) / self.rate
        bucket.tokens -= 1.0
        return 0.0

    def _make_room(self, now: float) -> None:
        """Forget the addresses whose buckets are full again, then (if still full) the longest idle."""
        if len(self.buckets) < self.max_addresses:
            return
        refill_s = self.burst / self.rate
        for address, bucket in list(self.buckets.items()):
            if now - bucket.last < refill_s:
                break  # the rest were seen more recently still
            del self.buckets[address]
        while len(self.buckets) >= self.max_addresses:
            self.buckets.popitem(last=False)


def retry_after(wait_s: float) -> str:
    """``Retry-After``'s whole seconds for a wait (at least 1)."""
    return str(max(1, math.ceil(wait_s)))
