"""The ``/v1/realtime`` WebSocket: authentication, the read loop, the write loop, one session each.

Every connection runs the tasks of :class:`~bargein.server.session_connection.SessionConnection` (reader,
writer, watchdog, overflow watch); this module supplies how a WebSocket receives and sends, and the set-up it
shares with the other transports is :mod:`.session_host`'s. A session closed by the server gets an ``error``
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

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.memory.store import MemoryStore
from bargein.metrics.prometheus import ServerMetrics
from bargein.protocol.errors import ProtocolError
from bargein.protocol.server_events import error_event
from bargein.server.auth import SOCKET_SCOPE_KEY, authorize, client_address, peer_address
from bargein.server.client_secrets import ClientSecrets, check_offered_secret
from bargein.server.serving import abort_connection
from bargein.server.session_connection import SessionConnection, message_bytes
from bargein.server.session_host import (
    GOING_AWAY_CLOSE,
    POLICY_CLOSE,
    TRY_LATER_CLOSE,
    Ending,
    SessionPlace,
    SessionRegistry,
    admit,
    hosted,
    new_session,
    session_config,
    spend,
)
from bargein.server.session_locks import SessionLocks
from bargein.session.realtime_session import RealtimeSession

__all__ = ["FAREWELL_TIMEOUT_S", "GOING_AWAY_CLOSE", "POLICY_CLOSE", "TRY_LATER_CLOSE", "Ending",
           "RealtimeConnection", "SessionRegistry", "message_bytes", "refuse_session", "serve_realtime"]
log = logging.getLogger(__name__)
FAREWELL_TIMEOUT_S = 1.0
"""How long the last error and the close frame may take to go out to a client that does not read."""


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
    if (ending := await admit(registry, metrics, refusal, address)) is not None:
        await _farewell(websocket, ending)
        return
    try:
        ending = await spend(client_secrets, offer.secret) \
            if offer is not None and offer.secret is not None and client_secrets is not None else None
        if ending is not None:
            await _farewell(websocket, ending)
            return
        place = SessionPlace(address, offer.locks if offer is not None else SessionLocks(), decision.memory_scope)
        config = session_config(settings, websocket.query_params.get("model"),
                                offer.config if offer is not None else None)
        await _run_session(websocket, new_session(settings, engines, metrics, config),
                           settings, registry, metrics, place, memory_store)
    finally:
        await registry.addresses.release(address)


async def _run_session(websocket: WebSocket, session: RealtimeSession, settings: Settings,
                       registry: SessionRegistry, metrics: ServerMetrics | None, place: SessionPlace,
                       memory_store: MemoryStore | None) -> None:
    """Host ``session`` and run its connection to the end."""
    async with hosted(session, settings, registry, place, memory_store, socket=websocket):
        own_events = websocket.query_params.get("bargein_events", "").lower() in ("1", "true", "yes")
        await RealtimeConnection(websocket, session, settings, metrics, own_events=own_events,
                                 locks=place.locks).run()


async def refuse_session(websocket: WebSocket, message: str) -> None:
    """Accept only to say why not (an ``error`` event), then close 1013: try again later."""
    subprotocol = "realtime" if "realtime" in websocket.scope.get("subprotocols", []) else None
    await websocket.accept(subprotocol=subprotocol)
    await _farewell(websocket, Ending("server_unavailable", message, TRY_LATER_CLOSE))


class RealtimeConnection(SessionConnection):
    """One live session's socket: JSON events as WebSocket text frames both ways (a phone line's serializer
    subclasses it, reading and writing its provider's messages instead)."""

    def __init__(self, websocket: WebSocket, session: RealtimeSession, settings: Settings,
                 metrics: ServerMetrics | None, *, own_events: bool, locks: SessionLocks | None = None) -> None:
        super().__init__(session, settings, metrics, own_events=own_events, locks=locks)
        self.websocket = websocket

    async def farewell(self, ending: Ending) -> None:
        """Tell the client why the server ends the session, and close."""
        await _farewell(self.websocket, ending)

    async def _read(self) -> Ending | None:
        while True:
            try:
                message = await self.websocket.receive()
            except (WebSocketDisconnect, RuntimeError):
                return None
            if message["type"] == "websocket.disconnect":
                return None
            data: str | bytes | None = message.get("text")
            if data is None:
                data = message.get("bytes")
            if data is None:
                continue
            if (ending := await self.take(data, message_bytes(data))) is not None:
                return ending

    async def _write(self) -> None:
        async for item in self.outgoing():
            if self.websocket.application_state != WebSocketState.CONNECTED:
                return None
            text = self.visible(item)
            if text is not None:
                try:
                    await self.websocket.send_text(text)
                except (WebSocketDisconnect, RuntimeError, OSError):
                    return None
                self.last_heard = time.monotonic()  # a session whose reply is still playing is not idle
            self.sent(item)


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
