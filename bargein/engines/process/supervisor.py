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
(:class:`~bargein.engines.process.wire.WorkerBusy` beyond); fair turns between sessions are the worker's
engines' own (each request carries its session, see :mod:`bargein.engines.fair`).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import itertools
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable, Hashable, Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from bargein.engines.base import CancelToken
from bargein.engines.fair import owner
from bargein.engines.process.wire import FD_ENV, WorkerBusy, WorkerDied, WorkerError, WorkerSpec

log = logging.getLogger(__name__)
_LIVE: weakref.WeakSet[EngineProcess] = weakref.WeakSet()


@dataclass(frozen=True)
class Launch:
    """How to start a worker: its command line, extra environment, and the spec to send it first (if any)."""

    command: tuple[str, ...]
    spec: WorkerSpec | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    capture_stderr: bool = False
    """Keep the worker's stderr (its last lines name the cause when it dies) instead of sharing ours."""


def python_worker(spec: WorkerSpec, label: str = "engine") -> Launch:
    """A worker in this interpreter's environment that builds ``spec`` (see :mod:`bargein.engines.process.child`);
    ``label`` ends its command line, so ``ps`` tells the workers apart."""
    paths = [os.path.abspath(entry or os.curdir) for entry in sys.path]
    path = os.pathsep.join(dict.fromkeys(entry for entry in paths if os.path.isdir(entry)))
    return Launch((sys.executable, "-m", "bargein.engines.process.child", label), spec, {"PYTHONPATH": path})


@dataclass
class _Pending:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[tuple[str, Any]]
    owner: Hashable | None

    def deliver(self, kind: str, payload: Any) -> None:
        with contextlib.suppress(RuntimeError):  # that session's loop is gone: nobody listens
            self.loop.call_soon_threadsafe(self.queue.put_nowait, (kind, payload))


@dataclass
class _Worker:
    process: subprocess.Popen[bytes]
    conn: Connection
    started: float
    stderr_tail: deque[str] = field(default_factory=lambda: deque(maxlen=20))


class EngineProcess:
    """A supervised worker process serving streamed requests (see the module docstring)."""

    def __init__(self, launch: Launch, *, name: str, start_timeout_s: float = 600.0, ready_wait_s: float = 60.0,
                 restart_backoff_s: float = 0.5, max_backoff_s: float = 60.0, stable_s: float = 10.0,
                 max_in_flight: int = 512, max_per_owner: int = 64, ping_interval_s: float = 5.0,
                 ping_timeout_s: float = 60.0) -> None:
        self.launch = launch
        self.name = name
        self.start_timeout_s = start_timeout_s
        self.ready_wait_s = ready_wait_s
        self.restart_backoff_s = restart_backoff_s
        self.max_backoff_s = max_backoff_s
        self.stable_s = stable_s
        self.max_in_flight = max_in_flight
        self.max_per_owner = max_per_owner
        self.ping_interval_s = ping_interval_s
        self.ping_timeout_s = ping_timeout_s
        self.restarts = 0
        """Workers started after the first (each one a death survived)."""
        self.info: dict[str, Any] = {}
        """What the worker said when it was ready (a recogniser's languages, a voice's sample rate...)."""
        self._pending: dict[int, _Pending] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._closed = threading.Event()
        self._worker: _Worker | None = None
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
        return worker.process.pid if worker is not None and self._ready.is_set() else None

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
        :class:`WorkerError` if the engine raised, :class:`WorkerBusy` past the queue's bounds.
        ``on_end`` receives the ``end`` message's payload.
        """
        if cancel.cancelled:
            return
        await self._wait_ready(cancel)
        if cancel.cancelled:
            return
        session = owner()
        key = None if session is None else id(session)
        if len(self._pending) >= self.max_in_flight or (
                key is not None and sum(p.owner == key for p in list(self._pending.values())) >= self.max_per_owner):
            raise WorkerBusy(f"{self.name}: {len(self._pending)} requests are already in flight")
        request_id = next(self._ids)
        pending = _Pending(asyncio.get_running_loop(), asyncio.Queue(), key)
        self._pending[request_id] = pending

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
                finished = kind in ("end", "error", "died")
                if kind == "end" and on_end is not None:
                    on_end(payload)
                elif kind == "error":
                    raise WorkerError(f"{self.name}: {payload}")
                elif kind == "died":
                    raise WorkerDied(f"{self.name}: the worker process ended ({payload})")
                return
        finally:
            watcher.cancel()
            self._pending.pop(request_id, None)
            if not finished:  # cancelled, or the consumer walked away: stop the worker's work
                with contextlib.suppress(OSError, ValueError, WorkerDied):
                    self._send(("cancel", request_id))

    def notify(self, payload: Any) -> None:
        """Send a hint that needs no answer; dropped while the worker restarts. Never waits."""
        session = owner()
        with contextlib.suppress(OSError, ValueError, WorkerDied):
            self._send(("notify", payload, None if session is None else id(session)))

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
                worker.conn.send(message)
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
                worker.conn.send(None)
            _stop(worker.process, grace_s=5.0)
            worker.conn.close()
        if self._supervisor is not threading.current_thread():
            self._supervisor.join(timeout=5)

    async def aclose(self) -> None:
        """Close without blocking the event loop."""
        await asyncio.to_thread(self.close)

    # --- the supervisor thread --------------------------------------------------------------------------

    def _start_worker(self) -> _Worker:
        ours, theirs = socket.socketpair()
        environment = {**os.environ, **self.launch.env, FD_ENV: str(theirs.fileno())}
        try:
            process = subprocess.Popen(
                self.launch.command, stdin=subprocess.DEVNULL, env=environment, pass_fds=(theirs.fileno(),),
                stderr=subprocess.PIPE if self.launch.capture_stderr else None)
        finally:
            theirs.close()
        conn = Connection(ours.detach())
        worker = _Worker(process, conn, time.monotonic())
        if self.launch.capture_stderr:
            threading.Thread(target=_drain_stderr, args=(worker, self.name), name=f"{self.name}-stderr",
                             daemon=True).start()
        try:
            if self.launch.spec is not None:
                conn.send(("spec", self.launch.spec))
            if not conn.poll(self.start_timeout_s):
                raise WorkerDied(f"{self.name}: the worker did not load its engine in {self.start_timeout_s:.0f} s")
            kind, detail = conn.recv()
        except (EOFError, OSError) as error:
            _stop(process, grace_s=5.0)
            conn.close()
            raise WorkerDied(f"{self.name}: the worker died while loading (exit code {process.returncode})"
                             f"{_tail(worker)}") from error
        except WorkerDied:
            _stop(process, grace_s=0.0)
            conn.close()
            raise
        if kind != "ready":
            _stop(process, grace_s=5.0)
            conn.close()
            raise WorkerDied(f"{self.name}: the worker could not load its engine: {detail}")
        self.info = dict(detail or {})
        with self._lock:
            self._worker = worker
            self._ping_sent = None
            self._ready.set()
        log.info("%s: worker %d ready", self.name, process.pid)
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
                message = worker.conn.recv()
            except (EOFError, OSError, TypeError, ValueError):  # the worker died (or sent something torn)
                if self._closed.is_set():
                    return
                self._worker_died(worker)
                continue
            except Exception:  # an item that will not unpickle here: that request fails, the worker lives
                log.exception("%s: unreadable message from the worker", self.name)
                continue
            kind = message[0]
            if kind == "pong":
                self._ping_sent = None
            elif kind in ("item", "end", "error") and (pending := self._pending.get(message[1])) is not None:
                pending.deliver(kind, message[2])

    def _ping(self, worker: _Worker) -> None:
        now = time.monotonic()
        if self._ping_sent is None:
            with contextlib.suppress(OSError, ValueError, WorkerDied):
                self._send(("ping", 0))
                self._ping_sent = now
        elif now - self._ping_sent > self.ping_timeout_s:
            log.error("%s: worker %d has not answered for %.0f s; killing it", self.name, worker.process.pid,
                      now - self._ping_sent)
            with contextlib.suppress(OSError):
                worker.process.kill()  # the next read sees the pipe close and restarts it

    def _worker_died(self, worker: _Worker) -> None:
        with self._lock:
            self._ready.clear()
            self._worker = None
        for pending in list(self._pending.values()):  # first: the sessions' fallbacks need not wait for us
            pending.deliver("died", "its pipe closed")
        _stop(worker.process, grace_s=1.0)  # a worker that closed its pipe but lingers is killed
        worker.conn.close()
        lived = time.monotonic() - worker.started
        log.error("%s: worker %d died (exit code %s) after %.0f s; its requests failed over; restarting%s",
                  self.name, worker.process.pid, worker.process.returncode, lived, _tail(worker))
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
            self.restarts += 1
            if self._closed.is_set():  # closed while it loaded: nobody will stop it but us
                with contextlib.suppress(OSError, ValueError):
                    worker.conn.send(None)
                _stop(worker.process, grace_s=5.0)
            return


def _stop(process: subprocess.Popen[bytes], *, grace_s: float) -> None:
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _drain_stderr(worker: _Worker, name: str) -> None:
    stream = worker.process.stderr
    assert stream is not None
    for raw in stream:
        line = raw.decode(errors="replace").rstrip()
        if line:
            worker.stderr_tail.append(line)
            log.debug("%s worker: %s", name, line)


def _tail(worker: _Worker) -> str:
    return f"; its last output: {' | '.join(worker.stderr_tail)}" if worker.stderr_tail else ""


def _close_all() -> None:
    """At interpreter exit: ask every worker to stop (they ignore SIGINT and SIGTERM, see the child)."""
    for engine in list(_LIVE):
        engine.close()
