"""The per-session outbound event queue: ordered, bounded in bytes, purgeable by response id.

Control events (errors, speech_started, response.done) are always accepted, so a slow client can
never stop the server from telling it that a reply was cancelled. Audio deltas count against a
bound of their own and are what backpressure slows. When a reply is cancelled its queued deltas are
purged before its ``response.done`` is queued, so the client never receives stale audio after it.

Every event is serialised once, when queued, and the whole queue is budgeted in those bytes: a
client that does not read lets the queue grow past ``max_bytes``, and then the queue drops
everything it holds, closes, and sets :attr:`Outbound.overflowed` (the connection then ends the
session with a policy close, even while its writer is stuck on the unread socket).
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from dataclasses import dataclass
from typing import Any

MAX_OUTBOUND_BYTES = 32 * 1024 * 1024
"""Bytes of serialised events a session may have waiting for its client (a 15 MiB item's echo fits twice)."""


class OutboundClosed(Exception):
    """The queue was closed: nothing more will come out of it."""


@dataclass
class Outgoing:
    """One queued server event."""

    event: dict[str, Any]
    response_id: str | None = None
    audio_ms: float = 0.0
    """Play time carried by an audio delta (0 for anything else)."""
    wire: str = ""
    """The event as sent (JSON), filled in when it is queued."""
    text_output: bool = False
    """A text delta of a text-only reply: that reply's output, as an audio delta is a spoken reply's (a spoken
    reply's transcript delta is not). It is control all the same: never purged, never backpressured."""

    @property
    def is_data(self) -> bool:
        """Audio deltas are data; everything else is control."""
        return self.audio_ms > 0

    @property
    def is_output(self) -> bool:
        """A delta of a reply's own output (audio, or a text-only reply's text): what the client waits for."""
        return self.is_data or self.text_output


class Outbound:
    """FIFO of server events with a bound on queued audio deltas and on queued bytes."""

    def __init__(self, max_data_events: int = 256, max_bytes: int = MAX_OUTBOUND_BYTES) -> None:
        self.max_data_events = max_data_events
        self.max_bytes = max_bytes
        self._queue: deque[Outgoing] = deque()
        self._data_count = 0
        self.queued_bytes = 0
        self._ready = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self.closed = False
        self.overflowed = asyncio.Event()
        """Set once the client let more than ``max_bytes`` wait: the queue was dropped and closed."""
        self.purged = 0

    def put(self, item: Outgoing) -> None:
        """Queue an event now (callers of data wait for :meth:`wait_for_room` first)."""
        if self.closed:
            return
        if not item.wire:
            item.wire = json.dumps(item.event, separators=(",", ":"))
        self._queue.append(item)
        self.queued_bytes += len(item.wire)
        if item.is_data:
            self._data_count += 1
            if self._data_count >= self.max_data_events:
                self._room.clear()
        if self.queued_bytes > self.max_bytes:
            self.overflowed.set()
            self.close()
        self._ready.set()

    async def wait_for_room(self) -> None:
        """Backpressure: returns once fewer than ``max_data_events`` deltas are queued."""
        await self._room.wait()

    def purge(self, response_id: str) -> int:
        """Drop every queued delta of ``response_id``; returns how many were dropped."""
        kept = deque(item for item in self._queue if not (item.is_data and item.response_id == response_id))
        dropped = len(self._queue) - len(kept)
        self._queue = kept
        self.queued_bytes = sum(len(item.wire) for item in kept)
        self._data_count -= dropped
        self.purged += dropped
        if self._data_count < self.max_data_events:
            self._room.set()
        return dropped

    async def get(self) -> Outgoing:
        """The next event, in order; raises :class:`OutboundClosed` once the queue is closed and empty."""
        while not self._queue:
            if self.closed:
                raise OutboundClosed("the outbound queue is closed")
            self._ready.clear()
            await self._ready.wait()
        item = self._queue.popleft()
        self.queued_bytes -= len(item.wire)
        if item.is_data:
            self._data_count -= 1
            if self._data_count < self.max_data_events:
                self._room.set()
        return item

    def close(self) -> None:
        """Stop accepting events, drop what waits (its memory goes now) and release anyone waiting."""
        self.closed = True
        self._queue.clear()
        self.queued_bytes = 0
        self._data_count = 0
        self._room.set()
        self._ready.set()

    def __len__(self) -> int:
        return len(self._queue)
