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

from bargein.engines.fair import current_owner
from bargein.engines.process import wire
from bargein.engines.process.wire import FD_ENV, WorkerSpec
from bargein.metrics.cost_meter import RequestMeter, request_usage
from bargein.values import CancelToken

log = logging.getLogger(__name__)


@runtime_checkable
class Service(Protocol):
    """What a worker serves: each request's items as they are made. Optional methods a service may have:
    ``describe() -> dict`` (sent with ``ready``), ``notify(payload)`` (hints), ``summary() -> Any`` (sent
    with each ``end``), and ``aclose()``; and a ``cancel_task`` attribute: True cancels the request's task
    on ``cancel`` as well (for engines whose calls take no cancel token, such as a recogniser's queue,
    which then drops the job if it has not started)."""

    def handle(self, request: Any, cancel: CancelToken) -> AsyncIterator[Any]:
        """Serve one request; stop within one item of ``cancel``."""
        ...


class EngineService:
    """Base of the services that wrap one engine (``self.engine``): closing the service closes the engine."""

    engine: Any

    async def aclose(self) -> None:
        """Release the engine."""
        closer = getattr(self.engine, "aclose", None)
        if closer is not None:
            await closer()


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
    except BaseException as error:
        with contextlib.suppress(OSError, ValueError):
            wire.send(conn, ("failed", f"{type(error).__name__}: {error}"))
        raise
    describe = getattr(service, "describe", None)
    wire.send(conn, ("ready", describe() if describe is not None else {}))
    asyncio.run(serve(service, conn))
    return 0


async def serve(service: Service, conn: Connection) -> None:
    """Serve requests from ``conn`` until a ``None`` message or the pipe closes."""
    loop = asyncio.get_running_loop()
    cancels: dict[int, CancelToken] = {}
    tasks: dict[int, asyncio.Task[None]] = {}
    stopped = asyncio.Event()
    summary = getattr(service, "summary", None)
    cancel_task = bool(getattr(service, "cancel_task", False))
    meter = RequestMeter()

    def send(message: tuple[Any, ...]) -> None:
        with contextlib.suppress(OSError):  # the server is gone; a value the wire cannot carry raises (WireError)
            wire.send(conn, message)

    def bill(request_id: int) -> None:
        if request_id in meter:  # once: a request's cost goes before its end (a hub forgets it at its end)
            send(("cost", request_id, {**meter.finish(request_id), "usage": request_usage.get() or {}}))

    async def run(request_id: int, session: int | None, request: Any, cancel: CancelToken) -> None:
        current_owner.set(session)  # this task's own context: the engine's fair queue sees the session
        request_usage.set({})  # and what the engine notes the request used goes back with its cost
        try:
            async for item in service.handle(request, cancel):
                if cancel.cancelled:
                    break
                send(("item", request_id, item))
            bill(request_id)
            send(("end", request_id, summary() if summary is not None else None))
        except Exception as error:
            log.exception("request failed")
            bill(request_id)
            send(("error", request_id, f"{type(error).__name__}: {error}"))
        finally:
            bill(request_id)  # a task cancelled on ``cancel`` ends here
            cancels.pop(request_id, None)
            tasks.pop(request_id, None)

    def dispatch(message: Any) -> None:
        if message is None:
            stopped.set()
        elif message[0] == "start":
            _, request_id, session, request = message
            cancel = cancels[request_id] = CancelToken()
            meter.start(request_id)
            tasks[request_id] = loop.create_task(run(request_id, session, request, cancel))
        elif message[0] == "cancel" and (token := cancels.get(message[1])) is not None:
            token.cancel("cancelled")
            if cancel_task and (task := tasks.get(message[1])) is not None:
                task.cancel()
        elif message[0] == "notify" and (notify := getattr(service, "notify", None)) is not None:
            context = contextvars.copy_context()  # the hint is the session's work too: its fair turn
            context.run(current_owner.set, message[2] if len(message) > 2 else None)
            context.run(notify, message[1])
        elif message[0] == "ping":
            send(("pong", message[1]))

    def read() -> None:
        while True:
            try:
                message = wire.receive(conn)
            except (EOFError, OSError, ValueError):  # the server is gone (or garbled): so are we
                loop.call_soon_threadsafe(stopped.set)
                return
            loop.call_soon_threadsafe(dispatch, message)
            if message is None:
                return

    threading.Thread(target=read, name="worker-inbox", daemon=True).start()
    await stopped.wait()
    for token in list(cancels.values()):
        token.cancel("shutdown")
    closer = getattr(service, "aclose", None)
    if closer is not None:
        await closer()


if __name__ == "__main__":
    sys.exit(main())
