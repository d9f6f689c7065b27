"""A tiny service for engine-process tests: echoes, reports its session, sleeps, wedges its loop on command."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from bargein.engines.fair import current_owner
from bargein.engines.process.child import Service
from bargein.values import CancelToken


class EchoService(Service):
    """``("echo", n)``: n items; ``("owner",)``: the session the request came from; ``("sleep", s)``: wait s
    seconds (cancellable); ``("cancelled",)``: how many sleeps were cancelled; ``("wedge", s)``: block the
    worker's loop for s seconds; ``("hinted",)``: the (payload, session) of every ``notify`` so far;
    ``("raise", name, message)``: raise an exception of a class called ``name`` (only its name and message
    cross to the supervisor, as for any engine's error)."""

    cancel_task = True

    def __init__(self, fail: bool = False) -> None:
        if fail:
            raise RuntimeError("this service cannot be built")
        self.cancelled = 0
        self.hints: list[tuple[Any, Any]] = []

    def notify(self, payload: Any) -> None:
        """Remember a hint and the session it came from."""
        self.hints.append((payload, current_owner.get()))

    def describe(self) -> dict[str, Any]:
        """Sent with ``ready``."""
        return {"kind": "echo"}

    async def handle(self, request: tuple[Any, ...], cancel: CancelToken) -> AsyncIterator[Any]:
        """See the class docstring."""
        kind = request[0]
        if kind == "echo":
            for index in range(int(request[1])):
                yield index
        elif kind == "owner":
            yield current_owner.get()
        elif kind == "sleep":
            try:
                await asyncio.sleep(float(request[1]))
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
            yield "slept"
        elif kind == "cancelled":
            yield self.cancelled
        elif kind == "hinted":
            yield list(self.hints)
        elif kind == "wedge":
            time.sleep(float(request[1]))  # noqa: ASYNC251 (wedging the loop is the point)
            yield "unwedged"
        elif kind == "raise":
            raise type(str(request[1]), (RuntimeError,), {})(str(request[2]))


class BareService(Service):
    """Declares nothing but :meth:`handle` (the protocol's defaults stand): ``("echo", n)`` gives n items."""

    async def handle(self, request: tuple[Any, ...], cancel: CancelToken) -> AsyncIterator[Any]:
        """n items."""
        for index in range(int(request[1])):
            yield index
