"""Where a supervised worker's answers to a request go: a caller's queue on its own loop (:class:`Pending`), a hub's
client (:class:`Relay`), and the bill the calling session's CPU is charged to (:class:`RequestBills`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from bargein.metrics.cost_meter import Bill, charge


@dataclass
class Pending:
    """A request of a caller in this process: its messages go to ``queue``, on the caller's ``loop``."""

    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[tuple[str, Any]]
    owner: Hashable | None

    def deliver(self, kind: str, payload: Any) -> None:
        """Queue one message for the caller (from the supervisor thread)."""
        with contextlib.suppress(RuntimeError):  # that session's loop is gone: nobody listens
            self.loop.call_soon_threadsafe(self.queue.put_nowait, (kind, payload))


@dataclass
class Relay:
    """A request forwarded for a hub's client."""

    owner: Hashable | None
    deliver: Callable[[str, Any], None]
    """Called on the supervisor thread (a hub's client's outbox, see :mod:`.shared`)."""


class RequestBills:
    """The bill each request of this process's sessions charges its cost to, until its cost or end comes."""

    def __init__(self, stage: str, limit: int) -> None:
        self.stage = stage
        self.limit = limit
        self._bills: dict[int, tuple[asyncio.AbstractEventLoop, Bill | None]] = {}

    def keep(self, request_id: int, loop: asyncio.AbstractEventLoop, bill: Bill | None) -> None:
        """Remember the bill a request started under."""
        self._bills[request_id] = (loop, bill)
        while len(self._bills) > self.limit:  # ends lost with a worker: bounded all the same
            self._bills.pop(next(iter(self._bills)), None)

    def charge(self, request_id: int, cost: Any) -> None:
        """Charge a request's CPU seconds (the worker's ``cost`` message) to the stage and to its bill."""
        loop_bill = self._bills.pop(request_id, None)
        if loop_bill is None or not isinstance(cost, dict):
            return
        cpu_s, background_s = float(cost.get("cpu_s", 0.0)), float(cost.get("background_cpu_s", 0.0))
        charge(self.stage, loop_bill[1], cpu_s, background_s, loop=loop_bill[0])

    def drop(self, request_id: int) -> None:
        """Forget a request that ended without a cost."""
        self._bills.pop(request_id, None)

    def clear(self) -> None:
        """Forget every request (the worker died: what it burned is told by nobody)."""
        self._bills.clear()
