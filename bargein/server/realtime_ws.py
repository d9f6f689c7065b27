"""The ``/v1/realtime`` WebSocket: authentication, the read loop, the write loop, one session each.

bargein's own events (``bargein.*``: listening segments, turn metrics, paused replies) go only to a client
that asks for them with the ``bargein_events=1`` query parameter (the browser page does): standard
clients validate every server event against the GA union and would report each one as an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.metrics.prometheus import ServerMetrics
from bargein.protocol.errors import ProtocolError
from bargein.protocol.server_events import error_event
from bargein.protocol.session_config import SessionConfig
from bargein.server.auth import authorize
from bargein.session.outbound import Outgoing
from bargein.session.realtime_session import RealtimeSession
from bargein.tools.registry import default_registry

log = logging.getLogger(__name__)


class SessionRegistry:
    """The live sessions of this server (bounded by ``max_sessions``)."""

    def __init__(self, max_sessions: int) -> None:
        self.max_sessions = max_sessions
        self.live: set[RealtimeSession] = set()


async def serve_realtime(websocket: WebSocket, settings: Settings, engines: Engines | None,
                         registry: SessionRegistry, metrics: ServerMetrics | None = None) -> None:
    """Run one Realtime session over ``websocket`` until the client leaves."""
    decision = authorize(websocket, settings.api_keys)
    if not decision.allowed:
        log.warning("refused a realtime connection: %s", decision.reason)
        await websocket.close(code=1008, reason=decision.reason[:120])
        return
    await websocket.accept(subprotocol=decision.subprotocol)
    if engines is None or len(registry.live) >= registry.max_sessions:
        message = "the server is still loading its models" if engines is None else "too many sessions"
        await websocket.send_text(json.dumps(error_event(ProtocolError(message, code="server_unavailable",
                                                                       type="server_error"))))
        await websocket.close(code=1013, reason=message)
        return
    model = websocket.query_params.get("model") or "bargein"
    session = RealtimeSession(engines, config=SessionConfig(model=model[:200]), metrics=metrics,
                              listen=settings.listen,
                              builtin_tools=default_registry() if settings.builtin_tools else None)
    registry.live.add(session)
    session.start()
    own_events = websocket.query_params.get("bargein_events", "").lower() in ("1", "true", "yes")
    writer = asyncio.create_task(_write_loop(websocket, session, metrics, own_events=own_events),
                                 name="realtime-writer")
    try:
        await _read_loop(websocket, session, settings.max_message_bytes)
    finally:
        registry.live.discard(session)
        writer.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await writer
        await session.close()


async def _read_loop(websocket: WebSocket, session: RealtimeSession, max_bytes: int) -> None:
    while True:
        try:
            message = await websocket.receive()
        except (WebSocketDisconnect, RuntimeError):
            return
        if message["type"] == "websocket.disconnect":
            return
        data: str | bytes | None = message.get("text")
        if data is None:
            data = message.get("bytes")
        if data is None:
            continue
        if len(data) > max_bytes:
            session.outbound.put(Outgoing(error_event(ProtocolError(
                f"message of {len(data)} bytes exceeds the limit of {max_bytes} bytes; split the audio into "
                "smaller appends", code="message_too_large"))))
            continue
        await session.handle_message(data)


async def _write_loop(websocket: WebSocket, session: RealtimeSession, metrics: ServerMetrics | None, *,
                      own_events: bool) -> None:
    while True:
        item = await session.outbound.get()
        if session.outbound.closed or websocket.application_state != WebSocketState.CONNECTED:
            return
        if not own_events and item.event["type"].startswith("bargein."):
            session.on_sent(item)  # the session's bookkeeping of what left is the same either way
            continue
        try:
            await websocket.send_text(json.dumps(item.event, separators=(",", ":")))
        except (WebSocketDisconnect, RuntimeError, OSError):
            return
        session.on_sent(item)
        if metrics is not None and item.event["type"] == "error":
            metrics.errors.labels(str(item.event["error"].get("code"))).inc()
