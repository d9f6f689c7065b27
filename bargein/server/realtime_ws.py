"""The ``/v1/realtime`` WebSocket: authentication, the read loop, the write loop, one session each.

Every connection runs four tasks: the reader (client events, held back above the event rate), the
writer (the session's outbound queue), a watchdog (idle time, session length) and one waiting for the
outbound queue to overflow. Whichever ends first ends the session: a client that leaves, a writer
that can no longer write, a client over a budget. A session closed by the server gets an ``error``
event that says why, then a close code: 1008 (policy) for a client over a budget (the event rate,
or events left unread past the outbound queue's byte budget), 1001 (going away) for idle or
too-long sessions, 1011 for a failure of ours, 1013 (try again later) for a full or loaded server.

bargein's own events (``bargein.*``: listening segments, turn metrics, paused replies) go only to a client
that asks for them with the ``bargein_events=1`` query parameter (the browser page does): standard
clients validate every server event against the GA union and would report each one as an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.engines.fair import current_owner
from bargein.memory.session_memory import SessionMemory
from bargein.memory.store import MemoryStore, MemoryStoreError
from bargein.metrics.cost_meter import current_meter
from bargein.metrics.prometheus import ServerMetrics
from bargein.protocol.errors import ProtocolError
from bargein.protocol.server_events import error_event
from bargein.protocol.session_config import SessionConfig
from bargein.server.auth import SOCKET_SCOPE_KEY, authorize, client_address, peer_address
from bargein.server.client_counts import CountsBusy, LocalSessionCounts, SessionCounts
from bargein.server.client_secrets import (
    BUSY_SECRETS,
    INVALID_SECRET,
    ClientSecrets,
    ClientSecretsBusy,
    SecretOffer,
    check_offered_secret,
)
from bargein.server.history_budget import HistoryLedger
from bargein.server.limits import EventRateLimiter
from bargein.server.serving import abort_connection
from bargein.server.session_locks import SessionLocks
from bargein.session.history import MAX_HISTORY_BYTES
from bargein.session.observers import ReplyClosedHook
from bargein.session.outbound import OutboundClosed, Outgoing
from bargein.session.realtime_session import RealtimeSession
from bargein.tools.memory_tools import memory_tools
from bargein.tools.registry import ToolRegistry, default_registry

log = logging.getLogger(__name__)
POLICY_CLOSE = 1008
GOING_AWAY_CLOSE = 1001
TRY_LATER_CLOSE = 1013
FAREWELL_TIMEOUT_S = 1.0
"""How long the last error and the close frame may take to go out to a client that does not read."""
FIRST_RECALL_S = 0.5
"""How long a new session waits for its first recalled memories before it starts (then they come in the background)."""


class SessionRegistry:
    """The live sessions of this server (bounded by ``max_sessions``, and per client address)."""

    def __init__(self, max_sessions: int, per_address: int = 16, history: HistoryLedger | None = None,
                 addresses: SessionCounts | None = None) -> None:
        self.max_sessions = max_sessions
        self.live: set[RealtimeSession] = set()
        self.addresses = addresses or LocalSessionCounts(per_address)
        """Open sessions per client address (across the workers of one server when they share a directory)."""
        self.history = history or HistoryLedger(MAX_HISTORY_BYTES * per_address, MAX_HISTORY_BYTES * max_sessions)
        """The history memory of this worker's sessions, per client address and in all."""
        self.sockets: dict[RealtimeSession, WebSocket] = {}
        """Each live session's socket (the drain closes them)."""


@dataclass(frozen=True)
class Ending:
    """Why the server ends a session: the error the client is sent, and the close code."""

    code: str
    message: str
    close_code: int


async def serve_realtime(websocket: WebSocket, settings: Settings, engines: Engines | None,
                         registry: SessionRegistry, metrics: ServerMetrics | None = None,
                         refusal: Callable[[], str | None] | None = None, *,
                         client_secrets: ClientSecrets | None = None, memory_store: MemoryStore | None = None) -> None:
    """Run one Realtime session over ``websocket`` until the client leaves or the server ends it.

    ``refusal`` says why this worker cannot take one more session (load), or ``None``; a refused client
    gets an ``error`` event and close code 1013 (try again later, elsewhere) before any audio is read.
    A client secret (``client_secrets``) stands in for the API key once, and brings its session's settings;
    it is spent only when the session starts, so a connection refused for load leaves it usable.
    """
    offer = await check_offered_secret(websocket, client_secrets, settings)
    decision = authorize(websocket, settings) if offer is None else offer.decision
    if not decision.allowed:
        log.warning("refused a realtime connection from %s: %s", peer_address(websocket.scope), decision.reason)
        await websocket.close(code=POLICY_CLOSE, reason=decision.reason[:120])
        return
    await websocket.accept(subprotocol=decision.subprotocol)
    address = client_address(websocket.scope) or "unknown"  # behind a trusted proxy, the user's, not the proxy's
    if engines is None:
        if metrics is not None:
            metrics.refused.labels("loading").inc()
        await _farewell(websocket, Ending("server_unavailable", "the server is still loading its models",
                                          TRY_LATER_CLOSE))
        return
    if (ending := await _admission(registry, metrics, refusal, address)) is not None:
        await _farewell(websocket, ending)
        return
    try:
        ending = await _spend(client_secrets, offer.secret) \
            if offer is not None and offer.secret is not None and client_secrets is not None else None
        if ending is not None:
            await _farewell(websocket, ending)
            return
        place = _Place(address, offer.locks if offer is not None else SessionLocks(), decision.memory_scope)
        await _run_session(websocket, _new_session(websocket, settings, engines, metrics, offer),
                           settings, registry, metrics, place, memory_store)
    finally:
        await registry.addresses.release(address)


async def _admission(registry: SessionRegistry, metrics: ServerMetrics | None,
                     refusal: Callable[[], str | None] | None, address: str) -> Ending | None:
    """None once the session holds a place for ``address`` (released by the caller), else why it may not start."""
    busy = refusal() if refusal is not None else (
        "too many sessions" if len(registry.live) >= registry.max_sessions else None)
    if busy is not None:
        if metrics is not None:
            metrics.refused.labels("load").inc()
        return Ending("server_unavailable", f"{busy}; retry on another worker", TRY_LATER_CLOSE)
    try:
        admitted = await registry.addresses.acquire(address)
    except CountsBusy:
        return Ending("server_unavailable", "the server is busy; retry shortly", TRY_LATER_CLOSE)
    if not admitted:
        return Ending("too_many_sessions", f"at most {registry.addresses.per_address} sessions per client address",
                      POLICY_CLOSE)
    return None


def _new_session(websocket: WebSocket, settings: Settings, engines: Engines, metrics: ServerMetrics | None,
                 offer: SecretOffer | None) -> RealtimeSession:
    """The session a connection asked for: a client secret's bound settings, else the server's for its language."""
    model = websocket.query_params.get("model") or "bargein"
    config = SessionConfig.for_language(settings.language, model=model[:200]) \
        if offer is None or offer.config is None else offer.config
    return RealtimeSession(engines, config=config, metrics=metrics,
                           listen=settings.listen, outbound_bytes=settings.max_outbound_bytes,
                           builtin_tools=default_registry() if settings.builtin_tools else None,
                           semantic_default=settings.turn_detection == "semantic_vad",
                           tiered_default=settings.tiered_endpoint)


@dataclass(frozen=True)
class _Place:
    """What an admitted connection brings its session: the address it counts against, what its client secret
    locked, and whose long-term memories it may use (None: nobody decided)."""

    address: str
    locks: SessionLocks
    memory_scope: str | None


async def _run_session(websocket: WebSocket, session: RealtimeSession, settings: Settings,
                       registry: SessionRegistry, metrics: ServerMetrics | None, place: _Place,
                       memory_store: MemoryStore | None) -> None:
    """Register ``session``, run its connection to the end, then release what it held."""
    session.conversation.bind_budget(settings.max_history_bytes, registry.history.account(place.address))
    memory = await _attach_memory(session, memory_store, place.memory_scope, settings)
    locks = place.locks
    if locks.locked:
        session.message_guard = locks.check
    # every task the session starts inherits this: shared engines serve sessions in turn by it
    current_owner.set(session)
    current_meter.set(session.ledgers)  # and charge the CPU they spend to the session's turns
    registry.live.add(session)
    registry.sockets[session] = websocket
    try:
        session.start()
        own_events = websocket.query_params.get("bargein_events", "").lower() in ("1", "true", "yes")
        await RealtimeConnection(websocket, session, settings, metrics, own_events=own_events, locks=locks).run()
    finally:
        registry.live.discard(session)
        registry.sockets.pop(session, None)
        await session.close()
        if memory is not None:
            await memory.close()
        session.conversation.release()


async def _attach_memory(session: RealtimeSession, store: MemoryStore | None, scope: str | None,
                         settings: Settings) -> SessionMemory | None:
    """Give ``session`` its scope's long-term memory: recalled notes in its prompts, learning after each turn and
    the memory tools (None: memory is off on this server, or nobody decided whose memories these would be).
    The first notes are recalled before the session starts (from a slow store: in the background instead)."""
    if store is None or scope is None:
        return None
    memory = SessionMemory(store, scope, lambda: session.conversation.chat_messages(None),
                           enabled=lambda: session.config.memory is not False)
    session.replies.remembered = memory.prompt
    session.replies.builtins = default_registry(extra=memory_tools(memory)) if settings.builtin_tools \
        else ToolRegistry(memory_tools(memory))
    session.observe(ReplyClosedHook(memory.on_reply_closed))
    try:
        await asyncio.wait_for(memory.refresh(), FIRST_RECALL_S)
    except (TimeoutError, MemoryStoreError):
        memory.start()
    return memory


async def _spend(client_secrets: ClientSecrets, secret: str) -> Ending | None:
    """Redeem the session's secret: None once spent here, else why the session cannot start."""
    try:
        if await client_secrets.redeem_async(secret) is None:  # spent or expired meanwhile (another worker)
            return Ending("invalid_client_secret", INVALID_SECRET, POLICY_CLOSE)
    except ClientSecretsBusy:
        return Ending("server_unavailable", BUSY_SECRETS, TRY_LATER_CLOSE)
    return None


async def refuse_session(websocket: WebSocket, message: str) -> None:
    """Accept only to say why not (an ``error`` event), then close 1013: try again later."""
    subprotocol = "realtime" if "realtime" in websocket.scope.get("subprotocols", []) else None
    await websocket.accept(subprotocol=subprotocol)
    await _farewell(websocket, Ending("server_unavailable", message, TRY_LATER_CLOSE))


class RealtimeConnection:
    """One live session's socket: its reader, writer, watchdog and overflow watch (a phone line's serializer
    subclasses it, reading and writing its provider's messages instead)."""

    def __init__(self, websocket: WebSocket, session: RealtimeSession, settings: Settings,
                 metrics: ServerMetrics | None, *, own_events: bool, locks: SessionLocks | None = None) -> None:
        self.websocket = websocket
        self.locks = locks or SessionLocks()
        self.session = session
        self.settings = settings
        self.metrics = metrics
        self.own_events = own_events
        self.limiter = EventRateLimiter(settings.events_per_s, settings.event_burst,
                                        sustain_s=settings.rate_limit_sustain_s)
        self.started = self.last_heard = time.monotonic()

    async def run(self) -> None:
        """Serve until the client leaves or the server ends the session (then it says why, and closes)."""
        tasks = {asyncio.create_task(self._read(), name="realtime-reader"),
                 asyncio.create_task(self._write(), name="realtime-writer"),
                 asyncio.create_task(self._watch(), name="realtime-watchdog"),
                 asyncio.create_task(self._overflow(), name="realtime-overflow")}
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        ending: Ending | None = None
        for task in sorted(done, key=lambda task: task.get_name() == "realtime-overflow"):  # an overflow says why
            if task.cancelled():
                continue
            if (error := task.exception()) is not None:
                log.error("a realtime connection task failed", exc_info=error)
                ending = Ending("server_error", "the session failed on the server", 1011)
            elif isinstance(result := task.result(), Ending):
                ending = result
        self.session.outbound.close()  # nothing more goes out; queued events are released with the session
        if ending is not None:
            log.info("ending a session: %s (%s)", ending.code, ending.message)
            if self.metrics is not None:
                self.metrics.errors.labels(ending.code).inc()
            await self.farewell(ending)

    async def farewell(self, ending: Ending) -> None:
        """Tell the client why the server ends the session, and close."""
        await _farewell(self.websocket, ending)

    async def _read(self) -> Ending | None:
        max_bytes = self.settings.max_message_bytes
        while True:
            try:
                message = await self.websocket.receive()
            except (WebSocketDisconnect, RuntimeError):
                return None
            if message["type"] == "websocket.disconnect":
                return None
            self.last_heard = time.monotonic()
            data: str | bytes | None = message.get("text")
            if data is None:
                data = message.get("bytes")
            if data is None:
                continue
            size = message_bytes(data)
            throttle = self.limiter.admit(size)
            if throttle.close:
                return Ending("rate_limit_exceeded", f"over {self.settings.events_per_s:g} events per second for "
                              f"{self.limiter.sustain_s:g} s", POLICY_CLOSE)
            if throttle.tell:
                self.session.outbound.put(Outgoing(error_event(ProtocolError(
                    f"over {self.settings.events_per_s:g} events per second: events are being delayed",
                    code="rate_limit_exceeded"))))
            if throttle.wait_s > 0:
                await asyncio.sleep(throttle.wait_s)  # meanwhile the socket is not read: TCP slows the client
            if size > max_bytes:
                self.session.outbound.put(Outgoing(error_event(ProtocolError(
                    f"message of {size} bytes exceeds the limit of {max_bytes} bytes; split the audio into "
                    "smaller appends", code="message_too_large"))))
                continue
            await self.session.handle_message(data)

    async def _overflow(self) -> Ending:
        outbound = self.session.outbound
        await outbound.overflowed.wait()
        return Ending("outbound_overflow", f"over {outbound.max_bytes // (1024 * 1024)} MiB of events waited for "
                      "the client to read them", POLICY_CLOSE)

    async def _write(self) -> None:
        outbound = self.session.outbound
        while True:
            try:
                item = await outbound.get()
            except OutboundClosed:
                return None  # the overflow watch says why, if it was an overflow
            if self.websocket.application_state != WebSocketState.CONNECTED:
                return None
            if not self.own_events and item.event["type"].startswith("bargein."):
                self.session.on_sent(item)  # the session's bookkeeping of what left is the same either way
                continue
            try:
                await self.websocket.send_text(self.locks.visible(item.wire, item.event["type"], item.event))
            except (WebSocketDisconnect, RuntimeError, OSError):
                return None
            self.last_heard = time.monotonic()  # a session whose reply is still playing is not idle
            self.session.on_sent(item)
            if self.metrics is not None and item.event["type"] == "error":
                self.metrics.errors.labels(str(item.event["error"].get("code"))).inc()

    async def _watch(self) -> Ending:
        idle_s, longest_s = self.settings.idle_timeout_s, self.settings.max_session_s
        while True:
            now = time.monotonic()
            if longest_s and now - self.started >= longest_s:
                return Ending("session_expired", f"the session reached its maximum length of {longest_s:g} s",
                              GOING_AWAY_CLOSE)
            if idle_s and now - self.last_heard >= idle_s:
                return Ending("session_idle", f"the client sent nothing for {idle_s:g} s", GOING_AWAY_CLOSE)
            deadlines = [self.started + longest_s] if longest_s else []
            if idle_s:
                deadlines.append(self.last_heard + idle_s)
            await asyncio.sleep(max(0.05, min(deadlines) - now) if deadlines else 3600.0)


def message_bytes(data: str | bytes) -> int:
    """The size of a client message on the wire: a text frame's UTF-8 bytes, not its characters."""
    if isinstance(data, bytes) or data.isascii():  # isascii is constant time: JSON text is mostly ASCII
        return len(data)
    return len(data.encode("utf-8", "surrogatepass"))


async def _farewell(websocket: WebSocket, ending: Ending) -> None:
    """Tell the client why with an ``error`` event, then close; drop a client that does not read.

    The TCP connection is aborted right away if the error could not be sent, else after
    :data:`FAREWELL_TIMEOUT_S` unless the client has completed the close handshake by then.
    """
    event = error_event(ProtocolError(ending.message, code=ending.code, type="server_error"
                                      if ending.close_code in (TRY_LATER_CLOSE, 1011) else "invalid_request_error"))
    told = False
    with contextlib.suppress(Exception):
        if websocket.application_state == WebSocketState.CONNECTED:
            await asyncio.wait_for(websocket.send_text(json.dumps(event, separators=(",", ":"))), FAREWELL_TIMEOUT_S)
            told = True
    with contextlib.suppress(Exception):
        if websocket.application_state == WebSocketState.CONNECTED:
            await asyncio.wait_for(websocket.close(code=ending.close_code, reason=ending.message[:120]),
                                   FAREWELL_TIMEOUT_S)
    client = websocket.scope.get(SOCKET_SCOPE_KEY, websocket.scope.get("client"))
    asyncio.get_running_loop().call_later(FAREWELL_TIMEOUT_S if told else 0.0, abort_connection, client)
