"""Continuous micro-batching of one shared model across sessions.

Requests queue up while a batch runs; the worker takes whatever is waiting, runs it as one batch in a
thread (off the event loop), and resolves each request's future. A model failure reaches every caller
of that batch (a failure to deliver the answers too); closing the batcher fails the requests it holds.
The worker belongs to one event loop; a model reused on a new loop (tests, benchmarks) starts a fresh
worker there and forgets requests of the old one.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import Sequence
from typing import Any, Generic, Protocol, TypeVar

log = logging.getLogger(__name__)


class Request(Protocol):
    """A queued request: whatever the model needs, and the future its answer goes to."""

    @property
    def future(self) -> asyncio.Future[Any]: ...


R = TypeVar("R", bound=Request)


class MicroBatcher(Generic[R]):
    """The queue, the worker and the error handling; subclasses say how to batch, infer and deliver."""

    name = "batcher"

    def __init__(self) -> None:
        self._pending: list[R] = []
        self._wakeup = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None

    @property
    def queue_depth(self) -> int:
        """Requests waiting for the next batch (withdrawn ones, which the next batch skips, do not count)."""
        return sum(1 for item in self._pending if not item.future.done())

    def _loop(self) -> asyncio.AbstractEventLoop:
        """The running loop, with a worker on it (started, or restarted on a new loop)."""
        loop = asyncio.get_running_loop()
        if self._worker is None or self._worker.done() or self._worker.get_loop() is not loop:
            # an Event and its waiters belong to one loop: a model reused on a new loop needs fresh ones
            self._wakeup = asyncio.Event()
            self._pending = [item for item in self._pending if item.future.get_loop() is loop]
            # every session's batches: created in no session's context, so no session's meter charges its steps
            self._worker = loop.create_task(self._run(), name=self.name, context=contextvars.Context())
        return loop

    def _enqueue(self, request: R) -> None:
        self._pending.append(request)
        self._wakeup.set()

    def _take_batch(self) -> list[R]:
        """The next batch, removed from the queue (default: everything waiting)."""
        batch, self._pending = self._pending, []
        return batch

    def _infer(self, batch: list[R]) -> Any:
        """Run one batch; called in a worker thread."""
        raise NotImplementedError

    def _deliver(self, batch: list[R], results: Any) -> None:
        """Hand each request its answer (on the loop)."""
        raise NotImplementedError

    async def _run(self) -> None:
        batch: list[R] = []
        try:
            while True:
                await self._wakeup.wait()
                self._wakeup.clear()
                while self._pending:
                    batch = self._take_batch()
                    if not batch:
                        continue
                    try:
                        results = await asyncio.to_thread(self._infer, batch)
                        self._deliver(batch, results)
                    except Exception as error:  # an engine (or delivery) failure reaches each waiting session
                        log.exception("%s batch failed", self.name)
                        _fail(batch, error)
        except asyncio.CancelledError:
            # closed (aclose, or its loop ending): nothing will run the batch in hand or the queue, so their
            # callers (the end-of-turn model has no deadline of its own) must not wait for good
            loop = asyncio.get_running_loop()
            closed = RuntimeError(f"{self.name} is closed")
            _fail(batch, closed)
            _fail([item for item in self._pending if item.future.get_loop() is loop], closed)
            self._pending = [item for item in self._pending if item.future.get_loop() is not loop]
            raise

    async def aclose(self) -> None:
        """Stop the batching task."""
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker


def _fail(batch: Sequence[Request], error: BaseException) -> None:
    for item in batch:
        if not item.future.done():
            item.future.set_exception(error)
