"""The caller's packets put back in order with no prefetch, and a missing packet declared lost after a short wait.

aiortc's own audio jitter buffer holds four packets back before it releases one (``prefetch=4``, 60 to 80 ms of
every word on its way to the VAD), and a missing packet at its head stops it until 16 more have piled up, after
which it stays that far behind. :class:`Reorderer` instead releases each packet the moment it is next in sequence;
a packet after a gap is held until the missing one arrives or its wait runs out, and then the missing one is
released as a concealment (``payload`` None) for the decoder to fill in, with the packet after it when that one is
here (its in-band FEC copy recovers the lost one). The wait follows how late reordered
packets have come (the largest of the recent ones, with a margin, between ``MIN_WAIT_S`` and ``MAX_WAIT_S``), so
a clean network costs nothing and a reordering one costs only the frames after a gap that much.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

CAPACITY = 16
"""Packets (320 ms) a gap may hold back; a packet further ahead than this is a jump, and the gap is given up."""
MAX_MISORDER = 100
"""A packet this many behind the next expected is a sender that started over, not a late one (as aiortc's)."""
MIN_WAIT_S = 0.02
MAX_WAIT_S = 0.12
WAIT_MARGIN = 1.25
LATENESS_SEEN = 64
DEFAULT_STEP = 960
"""RTP timestamp units per packet before two consecutive packets have shown it (20 ms of Opus at 48 kHz)."""


@dataclass(frozen=True)
class Release:
    """A packet's turn to be decoded: its payload, or None for a lost one to conceal, at its RTP timestamp."""

    timestamp: int
    payload: bytes | None
    recovery: bytes | None = None
    """For a lost packet, the payload of the packet after it when that one has come (it may carry a FEC copy)."""


@dataclass
class _Held:
    timestamp: int
    payload: bytes
    arrived: float


class Reorderer:
    """Sequence numbers in, packets out in order as soon as they can be, lost ones marked for concealment."""

    def __init__(self) -> None:
        self.expected: int | None = None
        """The next sequence number to release, unwrapped (it counts on past 65535)."""
        self._held: dict[int, _Held] = {}
        self._last_timestamp: int | None = None
        self._step = DEFAULT_STEP
        self._lateness: deque[float] = deque(maxlen=LATENESS_SEEN)
        self.wait_s = MIN_WAIT_S
        self.late = 0
        """Packets dropped because they came after their turn (already concealed, or duplicates)."""
        self.concealed = 0

    def take(self, sequence: int, timestamp: int, payload: bytes, now: float) -> list[Release]:
        """Take one packet (16-bit ``sequence``, arriving at ``now``); what can be released now, in order."""
        if self.expected is None:
            self.expected = sequence
        delta = (sequence - self.expected + 0x8000) % 0x10000 - 0x8000
        if delta < -MAX_MISORDER:  # far behind: the sender started over (a new stream), not a late packet
            released = self._give_up_gap()
            self.expected, self._last_timestamp = sequence, None
            return [*released, *self.take(sequence, timestamp, payload, now)]
        if delta < 0 or self.expected + delta in self._held:
            self.late += 1
            self._saw_lateness(self.wait_s + MIN_WAIT_S)  # it missed the wait: wait longer next time
            return []
        if delta >= CAPACITY:
            released = self._give_up_gap()
            self.expected += delta
            self._last_timestamp = None
            return [*released, *self.take(sequence, timestamp, payload, now)]
        if delta == 0 and self._held:  # the missing packet came: how late it was tells how long to wait
            self._saw_lateness(now - self._oldest_arrival())
        self._held[self.expected + delta] = _Held(timestamp, payload, now)
        return self.due(now)

    def due(self, now: float) -> list[Release]:
        """What is ready at ``now``: packets next in order, and the missing ones whose wait ran out."""
        released: list[Release] = []
        while self._held and self.expected is not None:
            held = self._held.pop(self.expected, None)
            if held is not None:
                released.append(self._release(held.timestamp, held.payload))
            elif now - self._oldest_arrival() >= self.wait_s:
                after = self._held.get(self.expected + 1)
                released.append(self._release(self._next_timestamp(), None, after.payload if after else None))
            else:
                break
            self.expected += 1
        return released

    def deadline(self) -> float | None:
        """When the oldest held packet's wait runs out (None when nothing waits)."""
        if not self._held:
            return None
        return self._oldest_arrival() + self.wait_s

    def _oldest_arrival(self) -> float:
        """When the packet held longest arrived (some are held)."""
        return min(held.arrived for held in self._held.values())

    def _release(self, timestamp: int, payload: bytes | None, recovery: bytes | None = None) -> Release:
        if payload is None:
            self.concealed += 1
        elif self._last_timestamp is not None and 0 < timestamp - self._last_timestamp <= 4 * DEFAULT_STEP:
            self._step = timestamp - self._last_timestamp
        self._last_timestamp = timestamp
        return Release(timestamp, payload, recovery)

    def _next_timestamp(self) -> int:
        return (self._last_timestamp + self._step) if self._last_timestamp is not None else 0

    def _give_up_gap(self) -> list[Release]:
        """A jump past the capacity: what was held goes out in order, its gaps left as gaps (the clock fills them)."""
        released = [self._release(self._held[key].timestamp, self._held[key].payload) for key in sorted(self._held)]
        self._held.clear()
        return released

    def _saw_lateness(self, seconds: float) -> None:
        self._lateness.append(seconds)
        self.wait_s = min(MAX_WAIT_S, max(MIN_WAIT_S, WAIT_MARGIN * max(self._lateness)))
