"""The per-session outbound event queue: ordered, bounded for audio, purgeable by response id.

Control events (errors, speech_started, response.done) are always accepted, so a slow client can
never stop the server from telling it that a reply was cancelled. Audio deltas count against the
bound and are what backpressure slows. When a reply is cancelled its queued deltas are purged
before its ``response.done`` is queued, so the client never receives stale audio after it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import Any


@dataclass
class Outgoing:
    """One queued server event."""

    event: dict[str, Any]
    response_id: str | None = None
    audio_ms: float = 0.0
    """Play time carried by an audio delta (0 for anything else)."""

    @property
    def is_data(self) -> bool:
        """Audio deltas are data; everything else is control."""
        return self.audio_ms > 0


class Outbound:
    """FIFO of server events with a bound on queued audio deltas."""

    def __init__(self, max_data_events: int = 256) -> None:
        self.max_data_events = max_data_events
        self._queue: deque[Outgoing] = deque()
        self._data_count = 0
        self._ready = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self.closed = False
        self.purged = 0

    def put(self, item: Outgoing) -> None:
        """Queue an event now (callers of data wait for :meth:`wait_for_room` first)."""
        if self.closed:
            return
        self._queue.append(item)
        if item.is_data:
            self._data_count += 1
            if self._data_count >= self.max_data_events:
                self._room.clear()
        self._ready.set()

    async def wait_for_room(self) -> None:
        """Backpressure: returns once fewer than ``max_data_events`` deltas are queued."""
        await self._room.wait()

    def purge(self, response_id: str) -> int:
        """Drop every queued delta of ``response_id``; returns how many were dropped."""
        kept = deque(item for item in self._queue if not (item.is_data and item.response_id == response_id))
        dropped = len(self._queue) - len(kept)
        self._queue = kept
        self._data_count -= dropped
        self.purged += dropped
        if self._data_count < self.max_data_events:
            self._room.set()
        return dropped

    async def get(self) -> Outgoing:
        """The next event, in order."""
        while not self._queue:
            self._ready.clear()
            await self._ready.wait()
        item = self._queue.popleft()
        if item.is_data:
            self._data_count -= 1
            if self._data_count < self.max_data_events:
                self._room.set()
        return item

    def close(self) -> None:
        """Stop accepting events and release anyone waiting for room."""
        self.closed = True
        self._room.set()
        self._ready.set()

    def __len__(self) -> int:
        return len(self._queue)
