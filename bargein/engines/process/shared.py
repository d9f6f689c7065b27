"""One engine worker shared by several session worker processes: a hub on a Unix socket, and its clients.

With ``bargein serve --workers N`` the parent of the session workers starts each stage's
:class:`~bargein.engines.process.supervisor.EngineProcess` once (so each model is loaded once) and an
:class:`EngineHub` beside it, listening on ``<directory>/<stage>.sock`` in a private directory (mode 0700).
A session worker's engine connects there instead of spawning a worker of its own (see
:mod:`~bargein.engines.process.hub_link`: both ends first prove they hold the server's hub key) and speaks
the same wire messages. The hub answers the handshake with ``ready`` once
the engine is ready (with the engine worker's pid and restart count), renumbers each request
(its key is the client and the client's request id) and sends it on with the owner ``(client, session)``,
so the engine's fair queues take turns between the sessions of every session worker; items come back to
the client that asked, through a bounded outbox per client (a client that stops reading is dropped, the
engine never waits for it). The hub answers pings itself: the parent's supervisor watches the engine.

When the engine worker dies, the hub shuts every client's connection: each session worker's supervisor
fails its requests in flight with :class:`~bargein.engines.process.wire.WorkerDied` (that turn's fallback)
and reconnects, and the hub's handshake holds the reconnect until the parent has restarted the engine.
Bounds: ``max_clients`` connections, ``max_per_client`` requests in flight for one client.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import queue
import threading
from collections.abc import Hashable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, Listener
from typing import Any

from bargein.engines.process import wire
from bargein.engines.process.hub_link import (
    SHARED_DIR_ENV,
    authenticate_client,
    connect,
    hub_key,
    shared_socket,
    shut,
    socket_path,
)
from bargein.engines.process.supervisor import EngineProcess
from bargein.engines.process.wire import WorkerBusy, WorkerDied

log = logging.getLogger(__name__)
__all__ = ["SHARED_DIR_ENV", "EngineHub", "connect", "shared_socket", "shut", "socket_path"]
_TERMINAL = frozenset({"end", "error", "died"})


@dataclass(eq=False)
class _Client:
    number: int
    conn: Connection
    outbox: queue.Queue[tuple[Any, ...] | None]
    requests: dict[int, int] = field(default_factory=dict)
    """The client's request id -> the engine's request id."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    gone: bool = False

    def post(self, message: tuple[Any, ...]) -> None:
        """Queue a message for the client; a client that does not keep up is dropped."""
        if self.gone:
            return
        try:
            self.outbox.put_nowait(message)
        except queue.Full:
            log.error("shared engine: client %d is not reading its replies; dropping it", self.number)
            self.gone = True
            shut(self.conn)


class EngineHub:
    """Serves one :class:`EngineProcess` to the session workers that connect to ``path`` (module docstring)."""

    def __init__(self, process: EngineProcess, path: str, *, max_clients: int = 64, max_per_client: int = 512,
                 outbox_size: int = 8192) -> None:
        self.process = process
        self.path = path
        self.max_clients = max_clients
        self.max_per_client = max_per_client
        self.outbox_size = outbox_size
        self._clients: dict[int, _Client] = {}
        self._connections = 0  # clients served or waiting for the engine in their handshake
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._listener = Listener(path, family="AF_UNIX")
        os.chmod(path, 0o600)
        process.on_death = self._engine_died
        threading.Thread(target=self._accept, name=f"{process.name}-hub", daemon=True).start()

    @property
    def clients(self) -> int:
        """Session workers connected now."""
        return len(self._clients)

    def close(self) -> None:
        """Stop listening and drop every client (the engine itself is the caller's to close)."""
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        self._engine_died()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn = self._listener.accept()
            except OSError:
                return
            if self._connections >= self.max_clients:
                log.error("%s hub: %d clients already; refusing another", self.process.name, self.max_clients)
                conn.close()
                continue
            client = _Client(next(self._numbers), conn, queue.Queue(self.outbox_size))
            with self._lock:
                self._connections += 1
            threading.Thread(target=self._serve, args=(client,), name=f"{self.process.name}-client{client.number}",
                             daemon=True).start()

    def _serve(self, client: _Client) -> None:
        writer = threading.Thread(target=self._write, args=(client,), daemon=True,
                                  name=f"{self.process.name}-client{client.number}-out")
        try:
            authenticate_client(client.conn, hub_key())
            if not self.process.wait_ready(self.process.start_timeout_s) or self._closed.is_set():
                return
            with self._lock:
                self._clients[client.number] = client
            writer.start()
            client.post(("ready", {**self.process.info, "pid": self.process.pid, "restarts": self.process.restarts}))
            while not client.gone:
                try:
                    message = wire.receive(client.conn)
                except (EOFError, OSError, TypeError, ValueError):  # gone, or a frame that does not parse
                    return
                if message is None:  # the session worker is closing its engine
                    return
                self._dispatch(client, message)
        except (EOFError, OSError) as error:  # no key (HubAuthenticationError), or gone during the handshake
            log.warning("%s hub: refused client %d: %s", self.process.name, client.number, error)
        finally:
            with self._lock:
                self._connections -= 1
            self._drop(client)
            if writer.is_alive():
                writer.join(timeout=5)
            client.conn.close()

    def _write(self, client: _Client) -> None:
        while (message := client.outbox.get()) is not None:
            try:
                wire.send(client.conn, message)
            except (OSError, ValueError):
                client.gone = True
                return

    def _dispatch(self, client: _Client, message: Any) -> None:
        kind = message[0]
        if kind == "start":
            _, request_id, session, request = message
            self._start(client, int(request_id), session, request)
        elif kind == "cancel":
            with client.lock:
                engine_id = client.requests.pop(int(message[1]), None)
            if engine_id is not None:
                self.process.forget(engine_id, cancel=True)
        elif kind == "notify":
            session = message[2] if len(message) > 2 else None  # keyed like the client's requests
            self.process.notify(message[1], None if session is None else (client.number, session))
        elif kind == "ping":
            client.post(("pong", message[1]))

    def _start(self, client: _Client, request_id: int, session: Hashable | None, request: Any) -> None:
        if len(client.requests) >= self.max_per_client:
            client.post(("error", request_id, f"WorkerBusy: {self.max_per_client} requests of this client in flight"))
            return

        def deliver(kind: str, payload: Any) -> None:  # on the engine's supervisor thread
            if kind in _TERMINAL:
                with client.lock:
                    engine_id = client.requests.pop(request_id, None)
                if engine_id is not None:
                    self.process.forget(engine_id, cancel=False)
            client.post((kind, request_id, payload))

        with client.lock:  # registered before the engine can answer
            try:
                client.requests[request_id] = self.process.forward(request, (client.number, session), deliver)
            except WorkerBusy as error:
                client.post(("error", request_id, f"WorkerBusy: {error}"))
            except WorkerDied as error:
                client.post(("died", request_id, str(error)))

    def _drop(self, client: _Client) -> None:
        with self._lock:
            self._clients.pop(client.number, None)
        client.gone = True
        with client.lock:
            engine_ids, client.requests = list(client.requests.values()), {}
        for engine_id in engine_ids:  # the session worker is gone: so is its work
            self.process.forget(engine_id, cancel=True)
        with contextlib.suppress(queue.Full):
            client.outbox.put_nowait(None)

    def _engine_died(self) -> None:
        with self._lock:
            clients = list(self._clients.values())
        for client in clients:  # each session worker fails its requests in flight and reconnects
            shut(client.conn)
