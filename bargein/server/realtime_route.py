"""The ``/v1/realtime`` route: refused while draining or loaded, else one session (:mod:`.realtime_ws`)."""

from __future__ import annotations

from fastapi import FastAPI, WebSocket

from bargein.server.realtime_ws import refuse_session, serve_realtime
from bargein.server.state import ServerState
from bargein.server.webrtc.sideband import serve_sideband


def add_realtime_route(app: FastAPI, state: ServerState) -> None:
    """Add the ``/v1/realtime`` WebSocket to ``app``."""

    @app.websocket("/v1/realtime")
    async def realtime(websocket: WebSocket) -> None:
        if call_id := websocket.query_params.get("call_id"):  # sideband control of a WebRTC call
            await serve_sideband(websocket, state, call_id)
            return
        if state.drain.draining:
            await refuse_session(websocket, "the server is shutting down; connect to another instance")
            return
        await serve_realtime(websocket, state.settings, state.engines, state.registry, state.metrics, state.refusal,
                             client_secrets=state.client_secrets, memory_store=state.memory)
