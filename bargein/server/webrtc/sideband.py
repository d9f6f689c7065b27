"""Sideband control of a WebRTC call: ``/v1/realtime?call_id=rtc_...`` with the server key attaches to the call.

As OpenAI offers it for server-side tool handling: the application's server opens a WebSocket to the call its
browser client started, receives the same server events the call's data channel carries, and may send client
events to the call's session (``session.update``, ``conversation.item.create`` with a function call's output,
``response.create``), held to the call's event rate and message bound. A sideband that does not read its events is
dropped (its queue is bounded), never the call; it ends with the call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from starlette.websockets import WebSocket, WebSocketDisconnect

from bargein.server.auth import authorize, peer_address
from bargein.server.realtime_ws import FAREWELL_TIMEOUT_S
from bargein.server.session_connection import message_bytes
from bargein.server.session_host import POLICY_CLOSE
from bargein.server.state import ServerState
from bargein.server.webrtc.connection import WebRtcConnection

log = logging.getLogger(__name__)
SIDEBAND_EVENTS = 1024
"""Server events a sideband may leave unread before it is dropped."""


async def serve_sideband(websocket: WebSocket, state: ServerState, call_id: str) -> None:
    """Attach ``websocket`` to the live call ``call_id`` until either ends (server keys only: never a client secret,
    which is the browser's)."""
    decision = authorize(websocket, state.settings)
    call = state.calls.get(call_id)
    if not decision.allowed or call is None or call.connection is None:
        reason = decision.reason if not decision.allowed else f"no live call {call_id[:64]!r}"
        log.warning("refused a sideband connection from %s: %s", peer_address(websocket.scope), reason)
        await websocket.close(code=POLICY_CLOSE, reason=reason[:120])
        return
    await websocket.accept(subprotocol=decision.subprotocol)
    connection = call.connection
    queue: asyncio.Queue[str] = asyncio.Queue(SIDEBAND_EVENTS)
    connection.sidebands.add(queue)
    tasks = {asyncio.create_task(_relay(websocket, queue)), asyncio.create_task(_control(websocket, connection)),
             asyncio.create_task(call.media.ended.wait())}
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        connection.sidebands.discard(queue)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(websocket.close(code=1000), FAREWELL_TIMEOUT_S)


async def _relay(websocket: WebSocket, queue: asyncio.Queue[str]) -> None:
    """The call's server events to the sideband (ends when the call drops a sideband that lags)."""
    while True:
        text = await queue.get()
        try:
            await websocket.send_text(text)
        except (WebSocketDisconnect, RuntimeError, OSError):
            return


async def _control(websocket: WebSocket, connection: WebRtcConnection) -> None:
    """The sideband's client events to the call's session, through the call's own budgets."""
    while True:
        try:
            message = await websocket.receive()
        except (WebSocketDisconnect, RuntimeError):
            return
        if message["type"] == "websocket.disconnect":
            return
        data = message.get("text") if message.get("text") is not None else message.get("bytes")
        if data is None:
            continue
        if await connection.take(data, message_bytes(data)) is not None:
            return  # over the call's event rate for too long: the sideband goes, the call's own reader decides

