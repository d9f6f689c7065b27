"""Graceful drain: on SIGTERM stop taking sessions, let live replies finish, then close the rest politely.

Timeline (``--drain-s`` D):

1. The signal arrives: ``/healthz`` answers 503 ``draining`` at once (a load balancer stops routing here)
   and new ``/v1/realtime`` connections get an ``error`` and close 1013 (try again later). With
   ``--workers N`` the supervisor raises a shared flag before it signals the workers, so no worker accepts
   a session from then on, even one whose signal has not arrived yet.
2. Live sessions go on; the drain waits until none has a reply in progress or owed (or D seconds pass).
   Replies already streaming finish and their audio goes out; a turn the user had just ended when the signal
   came (still being recognised and judged) is answered too.
3. A reply still live at the deadline is cancelled (``response.done`` ``cancelled``, as if the client
   had sent ``response.cancel``). Every session then gets a final ``error`` (code
   ``server_shutting_down``) saying why, and its WebSocket closes with 1001 (going away); a reply that
   began meanwhile (a turn that had just ended) is cancelled too, so its ``response.done`` precedes the close.
4. The server stops accepting connections, gives those still open (a late client's refusal being said) up
   to 1 s to end, so uvicorn's own shutdown does not close them with 1012 instead, and exits.

A second SIGTERM (or SIGINT) skips the wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import time
from collections.abc import Callable
from typing import Any, Protocol

from starlette.websockets import WebSocket

from bargein.protocol.errors import ProtocolError
from bargein.protocol.server_events import error_event
from bargein.server.auth import SOCKET_SCOPE_KEY
from bargein.server.serving import abort_connection
from bargein.session.outbound import Outgoing

log = logging.getLogger(__name__)
GOING_AWAY = 1001
FLUSH_S = 1.0
"""Longest wait for a session's queued events (the final error among them) to reach the socket."""
SHUTDOWN_MESSAGE = "the server is shutting down; reconnect to continue"
LAST_LOOKS = 5
"""Most times a closing session is looked at again for a reply begun while its last events left (each one is cut)."""


DRAIN_FLAG_FILE = "draining"


def shared_drain_flag(runtime_directory: str | None) -> str | None:
    """The shared draining flag in the workers' runtime directory (None: one process, no flag)."""
    return os.path.join(runtime_directory, DRAIN_FLAG_FILE) if runtime_directory else None


def raise_drain_flag(runtime_directory: str) -> None:
    """Tell every worker serving from ``runtime_directory`` to refuse new sessions (the supervisor's part)."""
    flag = shared_drain_flag(runtime_directory)
    assert flag is not None
    with open(flag, "w"):
        pass


class DrainRegistry(Protocol):
    """What the drain needs of the live sessions: the sessions and the socket of each."""

    live: set[Any]
    sockets: dict[Any, WebSocket]


class DrainedSession(Protocol):
    """What the drain reads of a session (:class:`~bargein.session.realtime_session.RealtimeSession`'s public
    surface, backed by its duplex machine)."""

    @property
    def replying(self) -> bool:
        """A reply is in progress."""

    @property
    def owes_reply(self) -> bool:
        """A reply is in progress, or owed to a turn that has ended."""


def replying(session: DrainedSession) -> bool:
    """True while ``session`` has a reply in progress."""
    return session.replying


def owes_reply(session: DrainedSession) -> bool:
    """True while ``session`` has a reply in progress or owed to a turn that has ended."""
    return session.owes_reply


class Drain:
    """The drain of one server: its state and the coroutine that carries it out."""

    def __init__(self, registry: DrainRegistry, drain_s: float, *, shared_flag: str | None = None) -> None:
        self.registry = registry
        self.drain_s = drain_s
        self.shared_flag = shared_flag
        """A file whose existence means the whole server drains (``--workers``: the supervisor creates it
        before it signals any worker, so every worker refuses new sessions at once, signalled or not)."""
        self.signalled = False
        self.started_at: float | None = None
        self.hurry = asyncio.Event()
        self.timeline: list[tuple[float, str]] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        """The serving loop, set at start-up: signal handlers hand the drain to it."""

    @property
    def draining(self) -> bool:
        """True from the signal on (or from the moment the shared flag exists)."""
        if self.signalled or self.started_at is not None:
            return True
        if self.shared_flag is not None and os.path.exists(self.shared_flag):
            self.signalled = True  # the flag is only ever raised: no need to look again
            return True
        return False

    def _mark(self, what: str) -> None:
        assert self.started_at is not None
        self.timeline.append((time.monotonic() - self.started_at, what))
        log.info("drain +%.2f s: %s", self.timeline[-1][0], what)

    async def run(self) -> None:
        """Wait for live and owed replies (up to ``drain_s``), then close every session with 1001."""
        self.started_at = time.monotonic()
        self._mark(f"draining: {len(self.registry.live)} live session(s), up to {self.drain_s:.1f} s")
        deadline = self.started_at + self.drain_s
        while any(owes_reply(s) for s in list(self.registry.live)) and time.monotonic() < deadline \
                and not self.hurry.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.hurry.wait(), 0.05)
        busy = sum(owes_reply(s) for s in list(self.registry.live))
        self._mark("replies finished" if busy == 0 else f"deadline: {busy} reply(ies) still live or owed")
        sessions = list(self.registry.live)
        await asyncio.gather(*(self._close(session) for session in sessions), return_exceptions=True)
        self._mark(f"closed {len(sessions)} session(s) with {GOING_AWAY}")

    async def _close(self, session: Any) -> None:
        websocket = self.registry.sockets.get(session)
        await _cancel_reply(session)  # past the deadline: cancel it as a client would, so no audio follows the error
        session.outbound.put(Outgoing(error_event(ProtocolError(
            SHUTDOWN_MESSAGE, code="server_shutting_down", type="server_error"))))
        await _flush(session)
        # the session still hears its client meanwhile: a turn that ended just before (its transcript or reply
        # still on the way) may have begun a reply since. Cut it the same way, so its response.done goes out
        # before the close frame instead of the client being left with a reply that never ends
        if await _cancel_reply(session):
            await _flush(session)
        for _ in range(LAST_LOOKS):
            await asyncio.sleep(0.05)  # the writer's last send leaves before the close frame
            # a reply begun during that wait is cut too; with no reply, nothing awaits between this look and the close
            if not await _cancel_reply(session):
                break
            await _flush(session)
        if websocket is not None:
            try:
                # a client that reads nothing has left the server's writes paused: the close frame would wait for it
                await asyncio.wait_for(websocket.close(code=GOING_AWAY, reason="server shutting down"), FLUSH_S)
            except TimeoutError:
                abort_connection(websocket.scope.get(SOCKET_SCOPE_KEY, websocket.scope.get("client")))
            except Exception:  # closed already by another path: what it sent stays sent
                pass


async def _cancel_reply(session: Any) -> bool:
    """Cancel ``session``'s reply in progress, if any (``response.done`` ``cancelled``); True if there was one."""
    if not replying(session):
        return False
    await session.handle_message(json.dumps({"type": "response.cancel"}))
    return True


async def _flush(session: Any) -> None:
    """Wait (up to :data:`FLUSH_S`) until the writer has taken every queued event of ``session``."""
    flush_until = time.monotonic() + FLUSH_S
    while len(session.outbound) and time.monotonic() < flush_until:  # noqa: ASYNC110 (polls another task's queue)
        await asyncio.sleep(0.02)


_PENDING = object()


def install_drain(server: Any, drain: Drain, on_done: Callable[[], None] | None = None) -> None:
    """Make a ``uvicorn.Server`` drain on its first SIGTERM/SIGINT instead of dropping connections."""
    original = server.handle_exit
    task: object | None = None

    def handle_exit(sig: int, frame: Any) -> None:
        nonlocal task
        if task is not None:  # a second signal: stop waiting
            if drain.loop is not None:
                drain.loop.call_soon_threadsafe(drain.hurry.set)
            return
        loop = drain.loop
        if loop is None or loop.is_closed():  # not serving yet: nothing to drain
            original(sig, frame)
            return
        drain.signalled = True  # refuse new sessions from now on, before the drain task gets to run

        async def drain_then_exit() -> None:
            try:
                await drain.run()
                await settle_connections(server, hurry=drain.hurry)
            finally:
                if on_done is not None:
                    on_done()
                server.should_exit = True  # a clean exit (0): the drain was the signal's whole answer

        def start() -> None:
            nonlocal task
            task = loop.create_task(drain_then_exit(), name="drain")

        # a signal handler may run between any two bytecodes: hand the work to the loop
        loop.call_soon_threadsafe(start)
        task = _PENDING

    server.handle_exit = handle_exit


async def settle_connections(server: Any, limit_s: float = FLUSH_S, *, hurry: asyncio.Event | None = None) -> None:
    """Stop this server accepting connections, then give those still open up to ``limit_s`` to end.

    uvicorn's own shutdown closes every open WebSocket with 1012 at once: a late client whose refusal (its
    ``error`` event and close 1013, try again later) was still being said would get that instead. With
    ``--workers`` a worker that had no session to drain reaches this within a few ms of the signal, while its
    listener can still take a connection until uvicorn's next tick. ``hurry`` (a second signal) ends the wait."""
    for listener in getattr(server, "servers", None) or []:
        listener.close()  # the other workers' listeners refuse what would have come here
    state = getattr(server, "server_state", None)
    deadline = time.monotonic() + limit_s
    while state is not None and state.connections and time.monotonic() < deadline \
            and not (hurry is not None and hurry.is_set()):  # noqa: ASYNC110 (uvicorn's set)
        await asyncio.sleep(0.02)


def drain_running_server(drain: Drain) -> bool:
    """Make the ``uvicorn.Server`` serving this process drain on SIGTERM/SIGINT (``--workers``).

    uvicorn builds each worker process's server itself; while it serves, its bound ``handle_exit`` is the
    process's signal handler, so that is where the server is found. Call from the app's startup, in the
    main thread. False when no uvicorn server is serving here (the signals then keep their handlers).
    """
    import uvicorn

    found: object = getattr(signal.getsignal(signal.SIGTERM), "__self__", None)
    if not isinstance(found, uvicorn.Server):
        return False
    server: uvicorn.Server = found
    install_drain(server, drain)
    for sig in (signal.SIGTERM, signal.SIGINT):
        if getattr(signal.getsignal(sig), "__self__", None) is server:
            signal.signal(sig, server.handle_exit)  # the signal module kept the method bound before
    return True
