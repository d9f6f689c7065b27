"""The worker side for engines of bargein's own environment: ``python -m bargein.engines.process.child``.

The worker reads its :class:`~bargein.engines.process.wire.WorkerSpec` from the inherited socket, builds
the :class:`Service` it names, says ``ready``, and serves requests until told to stop or orphaned. Each
request runs as its own task with :data:`~bargein.engines.fair.current_owner` set to the session that
sent it, so the engine's fair queues take turns between sessions exactly as they do in the server
process. A reader thread takes messages off the pipe, so a cancel arrives while a request is running.
The worker ignores SIGINT and SIGTERM: the server's graceful drain decides when it stops.
Each request's CPU seconds (the process's, split among the requests in flight:
:class:`~bargein.metrics.cost_meter.RequestMeter`) go back in a ``cost`` message just before its ``end`` or
``error``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator
from multiprocessing.connection import Connection
from typing import Any, Protocol, runtime_checkable

from bargein.engines.base import SharedEngine
from bargein.engines.fair import current_owner
from bargein.engines.process import wire
from bargein.engines.process.wire import FD_ENV, WorkerSpec
from bargein.metrics.cost_meter import RequestMeter, request_usage
from bargein.values import CancelToken

log = logging.getLogger(__name__)


@runtime_checkable
class Service(Protocol):
    """What a worker serves: each request's items as they are made (:meth:`handle`).

    Everything else a worker asks of its service is declared here with a default that fits a service
    without it, never probed: a service subclasses this protocol to inherit the defaults and overrides
    what it has (:meth:`describe`, :meth:`notify`, :meth:`summary`, :meth:`aclose`, :attr:`cancel_task`).
    """

    cancel_task: bool = False
    """True: a ``cancel`` cancels the request's task as well as its token (for engines whose calls take no
    cancel token, such as a recogniser's queue, which then drops the job if it has not started)."""

    def handle(self, request: Any, cancel: CancelToken) -> AsyncIterator[Any]:
        """Serve one request; stop within one item of ``cancel``."""
        ...

    def describe(self) -> dict[str, Any]:
        """Sent with ``ready``: what the client may read of the service (nothing by default)."""
        return {}

    def notify(self, payload: Any) -> None:
        """A hint that needs no answer, such as an LLM's prefill (ignored by default)."""
        return None

    def summary(self) -> Any:
        """Sent with each request's ``end`` (None by default)."""
        return None

    async def aclose(self) -> None:
        """Release what the service holds when the worker stops (nothing by default)."""
        return None


class EngineService(Service):
    """Base of the services that wrap one engine (``self.engine``): closing the service closes the engine."""

    engine: SharedEngine

    async def aclose(self) -> None:
        """Release the engine."""
        await self.engine.aclose()


def main() -> int:
    """Build the service the first message names, then serve it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s[worker]: %(message)s")
    conn = Connection(int(os.environ[FD_ENV]))
    try:
        kind, spec = wire.receive(conn)
        assert kind == "spec" and isinstance(spec, WorkerSpec), f"expected a spec, got {kind!r}"
        service = spec.build()
        if not isinstance(service, Service):
            raise TypeError(f"{spec.factory} built a {type(service).__name__}, not a Service")
    except BaseException as error:
        with contextlib.suppress(OSError, ValueError):
            wire.send(conn, ("failed", f"{type(error).__name__}: {error}"))
        raise
    wire.send(conn, ("ready", service.describe()))
    asyncio.run(serve(service, conn))
    return 0


async def serve(service: Service, conn: Connection) -> None:
    """Serve requests from ``conn`` until a ``None`` message or the pipe closes."""
    worker = _Worker(service, conn, asyncio.get_running_loop())
    threading.Thread(target=worker.read, name="worker-inbox", daemon=True).start()
    await worker.stopped.wait()
    for token in list(worker.cancels.values()):
        token.cancel("shutdown")
    await service.aclose()


class _Worker:
    """The serving loop: the requests in flight, their cancel tokens and tasks, and their CPU meter."""

    def __init__(self, service: Service, conn: Connection, loop: asyncio.AbstractEventLoop) -> None:
        self.service = service
        self.conn = conn
        self.loop = loop
        self.cancels: dict[int, CancelToken] = {}
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.stopped = asyncio.Event()
        self.meter = RequestMeter()

    def send(self, message: tuple[Any, ...]) -> None:
        """Write one message to the server; nothing if it is gone."""
        with contextlib.suppress(OSError):  # the server is gone; a value the wire cannot carry raises (WireError)
            wire.send(self.conn, message)

    def bill(self, request_id: int) -> None:
        """Send a request's cost (once: it goes before its end; a hub forgets the request at its end)."""
        if request_id in self.meter:
            self.send(("cost", request_id, {**self.meter.finish(request_id), "usage": request_usage.get() or {}}))

    async def run(self, request_id: int, session: int | None, request: Any, cancel: CancelToken) -> None:
        """Serve one request as its own task, its items then its cost and its end (or error)."""
        current_owner.set(session)  # this task's own context: the engine's fair queue sees the session
        request_usage.set({})  # and what the engine notes the request used goes back with its cost
        try:
            async for item in self.service.handle(request, cancel):
                if cancel.cancelled:
                    break
                self.send(("item", request_id, item))
            self.bill(request_id)
            self.send(("end", request_id, self.service.summary()))
        except Exception as error:
            log.exception("request failed")
            self.bill(request_id)
            self.send(("error", request_id, f"{type(error).__name__}: {error}"))
        finally:
            self.bill(request_id)  # a task cancelled on ``cancel`` ends here
            self.cancels.pop(request_id, None)
            self.tasks.pop(request_id, None)

    def dispatch(self, message: Any) -> None:
        """Act on one message from the server (on the loop)."""
        if message is None:
            self.stopped.set()
        elif message[0] == "start":
            _, request_id, session, request = message
            cancel = self.cancels[request_id] = CancelToken()
            self.meter.start(request_id)
            self.tasks[request_id] = self.loop.create_task(self.run(request_id, session, request, cancel))
        elif message[0] == "cancel" and (token := self.cancels.get(message[1])) is not None:
            token.cancel("cancelled")
            if self.service.cancel_task and (task := self.tasks.get(message[1])) is not None:
                task.cancel()
        elif message[0] == "notify":
            context = contextvars.copy_context()  # the hint is the session's work too: its fair turn
            context.run(current_owner.set, message[2] if len(message) > 2 else None)
            context.run(self.service.notify, message[1])
        elif message[0] == "ping":
            self.send(("pong", message[1]))

    def read(self) -> None:
        """The inbox thread: messages off the pipe onto the loop, so a cancel arrives while a request runs."""
        while True:
            try:
                message = wire.receive(self.conn)
            except (EOFError, OSError, ValueError):  # the server is gone (or garbled): so are we
                self.loop.call_soon_threadsafe(self.stopped.set)
                return
            self.loop.call_soon_threadsafe(self.dispatch, message)
            if message is None:
                return


if __name__ == "__main__":
    sys.exit(main())
