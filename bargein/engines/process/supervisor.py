"""One engine in a supervised worker process: spawn, health, restart with backoff, per-request failure.

:class:`EngineProcess` starts a worker (any command that speaks :mod:`~bargein.engines.process.wire` over
the socket it inherits), waits until it has loaded its engine, and serves every session's requests
through that one pipe. Each request streams items back (tokens, transcripts, audio chunks) and ends with
``end`` or ``error``; a cancel reaches the worker as a message and the caller stops waiting at once.

A supervisor thread reads the pipe. When the worker dies (a segfault in native code, the OOM killer,
``kill -9``), every request it was serving fails with :class:`~bargein.engines.process.wire.WorkerDied`
(the resilience layer turns that into the stage's fallback for that turn only), and a new worker is
started: at once after a worker that ran for ``stable_s``, else after a backoff that doubles (a worker
that keeps dying is not restarted in a tight loop). Requests that arrive meanwhile wait up to
``ready_wait_s`` for it, then fail. The thread also pings the worker's serving loop: a loop that has not
answered for ``ping_timeout_s`` is wedged, and the worker is killed and restarted.

The queue is bounded: at most ``max_in_flight`` requests at once, and ``max_per_owner`` for one session
(:class:`~bargein.engines.process.wire.WorkerBusy` beyond, as is a refusal the worker's engine or a hub
reports: load, which the stage's health does not count); fair turns between sessions are the worker's
engines' own (each request carries its session, see :mod:`bargein.engines.fair`).

A launch with ``connect`` set does not start a worker: it connects to an engine the parent process
shares between session workers (:mod:`~bargein.engines.process.shared`); the hub's closing the
connection counts as the worker's death (its requests fail, and the supervisor reconnects with the same
backoff). :meth:`EngineProcess.forward` is the hub's way in: a request whose messages go to a callback.

A worker tells each request's CPU seconds in a ``cost`` message before its end
(:mod:`bargein.engines.process.child`): it is charged to the stage (``stage``) and to the bill the calling session
took when the request started (:mod:`bargein.metrics.cost_meter`), even when the caller stopped waiting first (a
barge-in's cancelled reply costs what it burned); a hub relays it to its client.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import itertools
import logging
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Hashable
from typing import Any

from bargein.engines.fair import owner_now, refusal_text
from bargein.engines.process import wire
from bargein.engines.process.hub_link import connect, shut
from bargein.engines.process.in_flight import Pending, Relay, RequestBills
from bargein.engines.process.spawn import Launch, Worker, python_worker, spawn, stop, tail
from bargein.engines.process.wire import WorkerBusy, WorkerDied, WorkerError
from bargein.metrics.cost_meter import bill_now, note_usage
from bargein.values import CancelToken

__all__ = ["EngineProcess", "Launch", "python_worker"]
log = logging.getLogger(__name__)
_LIVE: weakref.WeakSet[EngineProcess] = weakref.WeakSet()


class EngineProcess:
    """A supervised worker process serving streamed requests (see the module docstring)."""

    def __init__(self, launch: Launch, *, name: str, start_timeout_s: float = 600.0, ready_wait_s: float = 60.0,
                 restart_backoff_s: float = 0.5, max_backoff_s: float = 60.0, stable_s: float = 10.0,
                 max_in_flight: int = 512, max_per_owner: int = 64, ping_interval_s: float = 5.0,
                 ping_timeout_s: float = 60.0, stage: str | None = None) -> None:
        self.launch = launch
        self.name = name
        self.stage = stage or name
        """The stage its requests' CPU is counted under (``llm``, ``asr``, ``tts``)."""
        self.start_timeout_s = start_timeout_s
        self.ready_wait_s = ready_wait_s
        self.restart_backoff_s = restart_backoff_s
        self.max_backoff_s = max_backoff_s
        self.stable_s = stable_s
        self.max_in_flight = max_in_flight
        self.max_per_owner = max_per_owner
        self._bills = RequestBills(self.stage, 2 * max_in_flight)
        self.ping_interval_s = ping_interval_s
        self.ping_timeout_s = ping_timeout_s
        self.restarts = 0
        """Workers started after the first (each one a death survived; a shared engine's own count)."""
        self.on_death: Callable[[], None] | None = None
        """Called first when the worker dies (a hub shuts its clients' connections)."""
        self._starts = 0
        self.info: dict[str, Any] = {}
        """What the worker said when it was ready (a recogniser's languages, a voice's sample rate...)."""
        self._pending: dict[int, Pending | Relay] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._closed = threading.Event()
        self._worker: Worker | None = None
        self._backoff = restart_backoff_s
        self._ping_sent: float | None = None
        self._worker = self._start_worker()
        self._supervisor = threading.Thread(target=self._supervise, name=f"{name}-supervisor", daemon=True)
        self._supervisor.start()
        if not _LIVE:
            atexit.register(_close_all)
        _LIVE.add(self)

    # --- the caller's side ----------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The worker's process id (None while it restarts)."""
        worker = self._worker
        return worker.pid if worker is not None and self._ready.is_set() else None

    @property
    def queue_depth(self) -> int:
        """Requests the worker is serving (the ``bargein_queue_depth`` gauge)."""
        return len(self._pending)

    def wait_ready(self, timeout_s: float) -> bool:
        """Block until a worker is ready (True) or ``timeout_s`` passes (False)."""
        return self._ready.wait(timeout_s)

    async def stream(self, request: Any, cancel: CancelToken, *,
                     on_end: Callable[[Any], None] | None = None) -> AsyncIterator[Any]:
        """Send ``request`` and yield the worker's items as they come; return at once when ``cancel`` fires.

        Raises :class:`WorkerDied` if the worker dies first (or is restarting past ``ready_wait_s``),
        :class:`WorkerError` if the engine raised, :class:`WorkerBusy` past the queue's bounds (or the
        worker's engine refused it for load).
        ``on_end`` receives the ``end`` message's payload.
        """
        if cancel.cancelled:
            return
        await self._wait_ready(cancel)
        if cancel.cancelled:
            return
        key = owner_now()
        if len(self._pending) >= self.max_in_flight or (
                key is not None and sum(p.owner == key for p in list(self._pending.values())) >= self.max_per_owner):
            raise WorkerBusy(f"{self.name}: {len(self._pending)} requests are already in flight")
        request_id = next(self._ids)
        pending = Pending(asyncio.get_running_loop(), asyncio.Queue(), key)
        self._pending[request_id] = pending
        self._bills.keep(request_id, pending.loop, bill_now())

        async def watch_cancel() -> None:
            await cancel.wait()
            pending.queue.put_nowait(("cancelled", None))

        watcher = asyncio.ensure_future(watch_cancel())
        finished = False
        try:
            self._send(("start", request_id, key, request))
            while True:
                kind, payload = await pending.queue.get()
                if kind == "item" and not cancel.cancelled:
                    yield payload
                    continue
                if kind == "cost":  # what the request used, noted in the caller's own context
                    if isinstance(payload, dict) and isinstance(usage := payload.get("usage"), dict):
                        note_usage({str(name): int(count) for name, count in usage.items()})
                    continue
                finished = kind in ("end", "error", "died")
                if kind == "end" and on_end is not None:
                    on_end(payload)
                elif kind == "error":
                    # a refusal for load inside the worker (or a hub's) must stay one here: the stage's health
                    # counts an engine's error, never a refusal
                    raise (WorkerBusy if refusal_text(str(payload)) else WorkerError)(f"{self.name}: {payload}")
                elif kind == "died":
                    raise WorkerDied(f"{self.name}: the worker process ended ({payload})")
                return
        finally:
            watcher.cancel()
            self._pending.pop(request_id, None)
            if not finished:  # cancelled, or the consumer walked away: stop the worker's work
                with contextlib.suppress(OSError, ValueError, WorkerDied):
                    self._send(("cancel", request_id))

    def notify(self, payload: Any, for_owner: Hashable | None = None) -> None:
        """Send a hint that needs no answer; dropped while the worker restarts. Never waits.

        The hint is the current session's unless ``for_owner`` names one (a hub forwarding a client's hint).
        """
        key = for_owner if for_owner is not None else owner_now()
        with contextlib.suppress(OSError, ValueError, WorkerDied):
            self._send(("notify", payload, key))

    def forward(self, request: Any, owner: Hashable | None, deliver: Callable[[str, Any], None]) -> int:
        """Send a request for a hub's client; its messages go to ``deliver``. Returns the request's id.

        Raises :class:`WorkerBusy` past ``max_in_flight``, :class:`WorkerDied` while the worker restarts.
        """
        if len(self._pending) >= self.max_in_flight:
            raise WorkerBusy(f"{self.name}: {len(self._pending)} requests are already in flight")
        request_id = next(self._ids)
        self._pending[request_id] = Relay(owner, deliver)
        try:
            self._send(("start", request_id, owner, request))
        except WorkerDied:
            self._pending.pop(request_id, None)
            raise
        return request_id

    def forget(self, request_id: int, *, cancel: bool) -> None:
        """Stop routing a forwarded request (and tell the worker to stop it, with ``cancel``)."""
        if self._pending.pop(request_id, None) is not None and cancel:
            with contextlib.suppress(OSError, ValueError, WorkerDied):
                self._send(("cancel", request_id))

    async def _wait_ready(self, cancel: CancelToken) -> None:
        deadline = time.monotonic() + self.ready_wait_s
        while not self._ready.is_set():
            if self._closed.is_set() or time.monotonic() >= deadline:
                raise WorkerDied(f"{self.name}: no worker is running (restarting)")
            if cancel.cancelled:
                return
            await asyncio.sleep(0.02)

    def _send(self, message: Any) -> None:
        with self._lock:
            worker = self._worker
            if worker is None or not self._ready.is_set():
                raise WorkerDied(f"{self.name}: the worker process is restarting")
            try:
                wire.send(worker.conn, message)
            except OSError as error:  # it died and the supervisor thread has not seen it yet
                raise WorkerDied(f"{self.name}: the worker process ended ({error})") from error

    def close(self) -> None:
        """Stop the worker (politely, then by force); closing twice is harmless."""
        _LIVE.discard(self)
        self._closed.set()
        with self._lock:
            worker = self._worker
            self._ready.clear()
        if worker is not None:
            with contextlib.suppress(OSError, ValueError):
                wire.send(worker.conn, None)
            stop(worker.process, grace_s=5.0)
            worker.conn.close()
        if self._supervisor is not threading.current_thread():
            self._supervisor.join(timeout=5)

    async def aclose(self) -> None:
        """Close without blocking the event loop."""
        await asyncio.to_thread(self.close)

    # --- the supervisor thread --------------------------------------------------------------------------

    def _start_worker(self) -> Worker:
        if self.launch.connect is not None:
            conn, info = connect(self.launch.connect, name=self.name, timeout_s=self.start_timeout_s)
            return self._ready_with(Worker(None, conn, time.monotonic(), int(info.pop("pid"))), info)
        worker = spawn(self.launch, self.name)
        process, conn = worker.process, worker.conn
        assert process is not None
        try:
            if self.launch.spec is not None:
                wire.send(conn, ("spec", self.launch.spec))
            if not conn.poll(self.start_timeout_s):
                raise WorkerDied(f"{self.name}: the worker did not load its engine in {self.start_timeout_s:.0f} s")
            kind, detail = wire.receive(conn)
        except (TypeError, ValueError) as error:  # a frame that does not parse: nothing it says is believed
            stop(process, grace_s=0.0)
            conn.close()
            raise WorkerDied(f"{self.name}: the worker's first message does not parse ({error}); killed") from error
        except (EOFError, OSError) as error:
            stop(process, grace_s=5.0)
            conn.close()
            raise WorkerDied(f"{self.name}: the worker died while loading (exit code {process.returncode})"
                             f"{tail(worker)}") from error
        except WorkerDied:
            stop(process, grace_s=0.0)
            conn.close()
            raise
        if kind != "ready":
            stop(process, grace_s=5.0)
            conn.close()
            raise WorkerDied(f"{self.name}: the worker could not load its engine: {detail}")
        return self._ready_with(worker, dict(detail or {}))

    def _ready_with(self, worker: Worker, info: dict[str, Any]) -> Worker:
        shared_restarts = info.pop("restarts", None)
        self.info = info
        with self._lock:
            self.restarts = int(shared_restarts) if shared_restarts is not None else self._starts
            self._starts += 1
            self._worker = worker
            self._ping_sent = None
            self._ready.set()
        log.info("%s: worker %d ready%s", self.name, worker.pid, " (shared)" if worker.process is None else "")
        return worker

    def _supervise(self) -> None:
        while not self._closed.is_set():
            worker = self._worker  # only this thread replaces it (after a restart), so it is set here
            if worker is None:
                return
            try:
                if not worker.conn.poll(self.ping_interval_s):
                    self._ping(worker)
                    continue
                message = wire.receive(worker.conn)
                self._route(message)
            except (EOFError, OSError, TypeError, ValueError, IndexError):
                # the worker died, or sent a frame that does not parse or a message out of the protocol: nothing
                # it says is believed any more (a compromised worker can send wrong values, never code)
                if self._closed.is_set():
                    return
                if worker.process is not None:
                    with contextlib.suppress(OSError):
                        worker.process.kill()
                self._worker_died(worker)

    def _route(self, message: Any) -> None:
        kind = message[0]
        if kind == "pong":
            self._ping_sent = None
        elif kind == "cost":
            self._charge(message[1], message[2])
        elif kind in ("item", "end", "error", "died") and (pending := self._pending.get(message[1])) is not None:
            pending.deliver(kind, message[2])
        if kind in ("end", "error", "died"):
            self._bills.drop(message[1])

    def _charge(self, request_id: int, cost: Any) -> None:
        """A request's CPU seconds: relayed to a hub's client, else charged here (a stopped request's too)."""
        pending = self._pending.get(request_id)
        if pending is not None:
            pending.deliver("cost", cost)  # a hub's client charges it itself; a caller here notes its usage
        if not isinstance(pending, Relay):
            self._bills.charge(request_id, cost)

    def _ping(self, worker: Worker) -> None:
        now = time.monotonic()
        if self._ping_sent is None:
            with contextlib.suppress(OSError, ValueError, WorkerDied):
                self._send(("ping", 0))
                self._ping_sent = now
        elif now - self._ping_sent > self.ping_timeout_s:
            log.error("%s: worker %d has not answered for %.0f s; killing it", self.name, worker.pid,
                      now - self._ping_sent)
            if worker.process is None:
                shut(worker.conn)  # a shared engine's hub that does not answer: reconnect
            else:
                with contextlib.suppress(OSError):
                    worker.process.kill()  # the next read sees the pipe close and restarts it

    def _worker_died(self, worker: Worker) -> None:
        with self._lock:
            self._ready.clear()
            self._worker = None
        if self.on_death is not None:
            self.on_death()
        for pending in list(self._pending.values()):  # first: the sessions' fallbacks need not wait for us
            pending.deliver("died", "its pipe closed")
        self._bills.clear()  # what the dead worker burned is told by nobody
        stop(worker.process, grace_s=1.0)  # a worker that closed its pipe but lingers is killed
        worker.conn.close()
        lived = time.monotonic() - worker.started
        log.error("%s: worker %d died (exit code %s) after %.0f s; its requests failed over; restarting%s",
                  self.name, worker.pid, worker.process and worker.process.returncode, lived, tail(worker))
        if lived >= self.stable_s:
            self._backoff, delay = self.restart_backoff_s, 0.0
        else:  # it died young: wait, longer each time it happens again
            delay, self._backoff = self._backoff, min(self.max_backoff_s, self._backoff * 2)
        while not self._closed.wait(delay):
            try:
                worker = self._start_worker()
            except Exception:
                delay, self._backoff = self._backoff, min(self.max_backoff_s, self._backoff * 2)
                log.exception("%s: restarting the worker failed; retrying in %.1f s", self.name, delay)
                continue
            if self._closed.is_set():  # closed while it loaded: nobody will stop it but us
                with contextlib.suppress(OSError, ValueError):
                    wire.send(worker.conn, None)
                stop(worker.process, grace_s=5.0)
            return


def _close_all() -> None:
    """At interpreter exit: ask every worker to stop (they ignore SIGINT and SIGTERM, see the child)."""
    for engine in list(_LIVE):
        engine.close()
