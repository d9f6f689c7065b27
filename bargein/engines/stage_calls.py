"""One engine call under a deadline, and how its failure is told: shared by every stage's wrapper.

An engine that queues calls in the caller's own task (flite waiting for a free process slot) can say so:
:func:`waiting_in_queue` when a call waits, :func:`serving_started` when it is served. Under a
:func:`next_within` given ``queue_s``, the wait may then last ``queue_s`` and the engine's own deadline
counts from when serving started, so a busy engine is not taken for a broken one; an engine that says
nothing keeps the plain deadline, and the user never waits longer than ``queue_s`` plus that deadline.

:func:`record_failed_call` tells a stage's health how a call failed: a refusal for load, a deadline missed
before the first result (maybe in a queue), or the engine's failure (:mod:`bargein.engines.health`).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from bargein.engines.fair import refused
from bargein.engines.health import StageHealth
from bargein.protocol.errors import EngineFailure

if TYPE_CHECKING:
    from bargein.engines.base import SharedEngine
    from bargein.values import WorkerProcess

Inner = TypeVar("Inner", bound="SharedEngine")


class StageFailed(EngineFailure):
    """A stage raised, timed out, or is down; the message says which, ``detail`` why.

    An :class:`~bargein.protocol.errors.EngineFailure`, so a session that meets it tells the client which
    stage failed (the message) rather than a bare "internal error"; the detail (the inner error's text,
    which may name upstream addresses) goes to the log only.
    """

    def __init__(self, message: str, *, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail

    def __str__(self) -> str:
        return f"{self.message}: {self.detail}" if self.detail else self.message


@dataclass(frozen=True)
class Deadlines:
    """Seconds each engine call may take before it counts as failed."""

    llm_first_token_s: float = 15.0
    llm_next_token_s: float = 5.0
    tts_first_chunk_s: float = 5.0
    tts_next_chunk_s: float = 5.0
    asr_s: float = 10.0
    vad_frame_s: float = 5.0
    tts_fallback_queue_s: float = 10.0
    """How long a fallback clause may wait for the fallback synthesizer (a free flite slot) before its
    chunk deadlines start; the clause fails past it (a burst must not hold a reply for good)."""


def what_failed(error: BaseException) -> str:
    """An engine call's failure in a few words, for the health record and the log."""
    return "timed out" if isinstance(error, TimeoutError) else f"{type(error).__name__}: {error}"


def record_failed_call(health: StageHealth, stage: str, error: BaseException, *, since: int | None) -> str:
    """Record a failed call on ``health`` and return :func:`what_failed`: a refusal for load (a full queue) is
    counted apart, never as a failure; a timeout with ``since`` (the stage's deliveries when the call began,
    given while it had no result yet) is a miss that may be the queue's; anything else is a failure."""
    what = what_failed(error)
    note = f"{stage} {what}"[:300]
    if refused(error):
        health.record_refusal(note)
    elif since is not None and isinstance(error, TimeoutError):
        health.record_miss(note, since=since)
    else:
        health.record_failure(note)
    return what


class _Clock:
    """One :func:`next_within` call's deadline, moved by what the engine says of its queue."""

    def __init__(self, scope: asyncio.Timeout, timeout_s: float, queue_s: float) -> None:
        self.scope = scope
        self.timeout_s = timeout_s
        self.queue_s = queue_s
        self.loop = asyncio.get_running_loop()
        self.asked = self.loop.time()
        self.serving = False

    def queued(self) -> None:
        # an expired scope's cancel is on its way: moving it now would raise, and change nothing
        if not self.serving and not self.scope.expired():
            self.scope.reschedule(self.asked + max(self.timeout_s, self.queue_s))

    def served(self) -> None:
        self.serving = True
        if not self.scope.expired():
            self.scope.reschedule(self.loop.time() + self.timeout_s)


_clock: contextvars.ContextVar[_Clock | None] = contextvars.ContextVar("bargein_call_clock", default=None)


def waiting_in_queue() -> None:
    """An engine's word that the current call waits in its queue: under a :func:`next_within` with ``queue_s``,
    the wait may last that long (a no-op elsewhere). Call it in the caller's task (an async generator's body)."""
    clock = _clock.get()
    if clock is not None:
        clock.queued()


def serving_started() -> None:
    """An engine's word that the current call left its queue and is served now: under a :func:`next_within`
    with ``queue_s``, its deadline counts from here (a no-op elsewhere)."""
    clock = _clock.get()
    if clock is not None:
        clock.served()


async def next_within(iterator: AsyncIterator[Any], timeout_s: float, *, queue_s: float | None = None) -> Any:
    """The next item, or StopAsyncIteration; TimeoutError past the deadline (``timeout_s``; with ``queue_s``,
    as the engine's queue moves it: module docstring)."""
    # asyncio.timeout rather than wait_for: no extra task per token or frame
    async with asyncio.timeout(timeout_s) as scope:
        # set even without queue_s: an engine inside must not move an outer call's deadline
        token = _clock.set(_Clock(scope, timeout_s, queue_s) if queue_s is not None else None)
        try:
            return await anext(iterator)
        finally:
            _clock.reset(token)


class GuardedEngine(Generic[Inner]):
    """What every stage's wrapper shares: the engine it guards, that stage's health and deadlines, and the
    engine's own queue, worker and close, which the wrapper passes through unchanged.

    The stage's health probes the engine through :meth:`_probe` (each wrapper's cheapest real call) while
    the stage is down.
    """

    def __init__(self, inner: Inner, health: StageHealth, deadlines: Deadlines) -> None:
        self.inner = inner
        self.health = health
        self.deadlines = deadlines
        health.probe = self._probe

    @property
    def queue_depth(self) -> int | None:
        """The guarded engine's."""
        return self.inner.queue_depth

    @property
    def worker(self) -> WorkerProcess | None:
        """The guarded engine's."""
        return self.inner.worker

    async def aclose(self) -> None:
        """Close the guarded engine."""
        await self.inner.aclose()

    async def _probe(self) -> None:
        raise NotImplementedError
