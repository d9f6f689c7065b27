"""The ``session`` stage: a session's own work on the server's event loop, measured per session.

Every session shares one event loop, so the process's CPU cannot be divided among them after the fact, and a
session's work is spread over many short callbacks (a client event parsed, base64 decoded and resampled, the turn
machine's decision, a reply's delta encoded and written, the pacing timers). What can be measured is each of its
tasks' steps: between two awaits a task runs on the loop's thread alone, so the thread's CPU time
(``time.thread_time()``) around one step is that step's cost, whichever sessions' steps run before and after.

:func:`install` sets the loop's task factory: a task created while a session's meter is current
(:data:`~.cost_meter.current_meter`: every task the session starts inherits it) runs its coroutine inside
:class:`MeteredCoroutine`, which charges each step's thread CPU to the ``session`` stage on a bill for the turn
current at that step (a speculative job's steps count as its waste too). A task created anywhere else (the server's
own watches, the engines' shared batchers, which start in a context of their own) is a plain task and costs
nothing extra. CPU that a step's own code already charged to another stage on this thread
(:func:`~.cost_meter.measured`, the VAD's inline batch) is not counted twice.

A session's WebSocket frames are parsed in its connection's callbacks, before any task of it reads them: the
session host leaves the session's meter in the connection's ASGI scope (:func:`meter_connection`), and the
server's WebSocket protocol measures each parse the same way (:func:`metered_callback`).

What the measure does not see is said where the figures are (``docs/results``): the loop's own machinery between
steps, the threads that read the engine workers' pipes, the garbage collector's passes outside a session's step.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Coroutine, Generator, Iterator, MutableMapping
from typing import Any, cast

from bargein.metrics.cost_meter import CostMeter, charge, current_meter
from bargein.metrics.cost_meter import thread_claims as _claims

SESSION_STAGE = "session"
CONNECTION_METER = "bargein.meter"
"""The ASGI scope key under which a connection's session meter is left for its protocol's callbacks."""


class MeteredCoroutine(Coroutine[Any, Any, Any]):
    """A session task's coroutine whose every step charges its thread CPU to the session's ``session`` stage."""

    __slots__ = ("_inner", "_meter")

    def __init__(self, inner: Coroutine[Any, Any, Any], meter: CostMeter) -> None:
        self._inner = inner
        self._meter = meter

    def _charge(self, started: float, claimed: float) -> None:
        spent = time.thread_time() - started - (_claims.cpu_s - claimed)
        if spent > 0.0:
            charge(SESSION_STAGE, self._meter.bill(), spent)

    def send(self, value: Any) -> Any:
        """One step of the task (the event loop calls it)."""
        started, claimed = time.thread_time(), _claims.cpu_s
        try:
            return self._inner.send(value)
        finally:
            self._charge(started, claimed)

    def throw(self, typ: Any, value: Any = None, traceback: Any = None) -> Any:
        """One step that starts with an exception (a cancellation) raised into the task."""
        started, claimed = time.thread_time(), _claims.cpu_s
        try:
            if value is None and traceback is None:
                return self._inner.throw(typ)
            return self._inner.throw(typ, value, traceback)  # the deprecated three-argument form, passed on
        finally:
            self._charge(started, claimed)

    def close(self) -> None:
        """Close the wrapped coroutine."""
        self._inner.close()

    def __await__(self) -> Generator[Any, None, Any]:
        return self._inner.__await__()

    # what asyncio's reprs and stack dumps read of a coroutine
    @property
    def cr_frame(self) -> Any:
        """The wrapped coroutine's frame."""
        return getattr(self._inner, "cr_frame", None)

    @property
    def cr_running(self) -> bool:
        """Whether the wrapped coroutine is running."""
        return bool(getattr(self._inner, "cr_running", False))

    @property
    def cr_await(self) -> Any:
        """What the wrapped coroutine awaits."""
        return getattr(self._inner, "cr_await", None)

    @property
    def cr_code(self) -> Any:
        """The wrapped coroutine's code."""
        return getattr(self._inner, "cr_code", None)


def meter_connection(socket: Any, meter: CostMeter) -> None:
    """Charge the callbacks of ``socket``'s connection (a WebSocket's frames parsed) to ``meter``'s session."""
    scope = getattr(socket, "scope", None)
    if isinstance(scope, MutableMapping):
        scope[CONNECTION_METER] = meter


def connection_meter(scope: Any) -> CostMeter | None:
    """The session meter a connection's scope holds, if its session has started."""
    meter = scope.get(CONNECTION_METER) if isinstance(scope, MutableMapping) else None
    return cast(CostMeter, meter) if callable(getattr(meter, "bill", None)) else None


@contextlib.contextmanager
def metered_callback(meter: CostMeter | None) -> Iterator[None]:
    """Charge the loop thread's CPU over the block (one callback of a session's connection) to ``meter``'s session
    stage, as a step of its task would be; nothing is measured without a meter."""
    if meter is None:
        yield
        return
    started, claimed = time.thread_time(), _claims.cpu_s
    try:
        yield
    finally:
        spent = time.thread_time() - started - (_claims.cpu_s - claimed)
        if spent > 0.0:
            charge(SESSION_STAGE, meter.bill(), spent)


def metered_task_factory(loop: asyncio.AbstractEventLoop, coro: Any,
                         **options: Any) -> asyncio.Task[Any]:
    """The loop's task factory: a session's task (a meter current where it is created) runs metered."""
    context: contextvars.Context | None = options.get("context")
    meter = current_meter.get() if context is None else context.get(current_meter)
    if meter is not None and isinstance(coro, Coroutine) and not isinstance(coro, MeteredCoroutine):
        coro = MeteredCoroutine(coro, meter)
    return asyncio.Task(coro, loop=loop, **options)


def install(loop: asyncio.AbstractEventLoop | None = None) -> None:
    """Meter the sessions' tasks on ``loop`` (the running one by default). A loop with a task factory of its own
    keeps it: the ``session`` stage then stays unmeasured, as before."""
    loop = loop or asyncio.get_running_loop()
    if loop.get_task_factory() is None:
        loop.set_task_factory(metered_task_factory)


def uninstall(loop: asyncio.AbstractEventLoop | None = None) -> None:
    """Stop metering new tasks on ``loop``."""
    loop = loop or asyncio.get_running_loop()
    if loop.get_task_factory() is metered_task_factory:
        loop.set_task_factory(None)
