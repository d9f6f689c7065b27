"""The ASGI application: ``/v1/realtime``, ``/healthz``, ``/metrics``, client secrets and the browser page at ``/``.

Each group of routes lives in its own module and is added here; :mod:`.lifespan` loads and closes the engines.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from fastapi import FastAPI, WebSocket
from fastapi.staticfiles import StaticFiles
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.server.auth import RealPeer
from bargein.server.ledger_api import add_ledger_route
from bargein.server.lifespan import EngineLoader, server_lifespan
from bargein.server.memory_api import add_memory_routes
from bargein.server.operator_routes import add_operator_routes
from bargein.server.phone_tokens import install_log_redaction
from bargein.server.realtime_route import add_realtime_route
from bargein.server.secrets_api import add_client_secret_route
from bargein.server.state import WORKER_DIR_ENV, ServerState
from bargein.server.twilio_ws import serve_twilio
from bargein.server.webrtc.routes import add_webrtc_routes

__all__ = ["STATIC_DIR", "WORKER_DIR_ENV", "EngineLoader", "ServerState", "create_app"]
STATIC_DIR = Path(__file__).resolve().parent.parent / "web" / "static"


def create_app(settings: Settings | None = None, engines: Engines | None = None, *,
               loader: EngineLoader | None = None,
               on_ready: Callable[[ServerState], None] | None = None) -> FastAPI:
    """Build the app. Pass ready ``engines``, or a ``loader`` run at start-up off the event loop."""
    settings = settings or Settings()
    state = ServerState(settings)
    state.engines = engines
    docs = settings.api_docs
    app = FastAPI(title="bargein", lifespan=server_lifespan(state, loader, on_ready),
                  docs_url="/docs" if docs else None, redoc_url=None,
                  openapi_url="/openapi.json" if docs else None)
    app.state.bargein = state
    if settings.forwarded_allow_ips:
        app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=settings.forwarded_allow_ips)
    app.add_middleware(RealPeer)  # added last, so it runs first: the socket's address before any rewrite

    add_operator_routes(app, state)
    add_realtime_route(app, state)
    add_client_secret_route(app, settings, state.client_secrets)
    add_memory_routes(app, settings, lambda: state.memory)
    add_ledger_route(app, settings)  # the cost ledger export (issue 46), for bargein capacity --ledger
    add_webrtc_routes(app, state)  # WebRTC calls (issue 45): POST /v1/realtime/calls, docs/webrtc.md

    # phone lines (issue 45): Twilio Media Streams over the same session; a signed token may be the last segment
    install_log_redaction()

    @app.websocket("/v1/telephony/twilio")
    @app.websocket("/v1/telephony/twilio/{token}")
    async def twilio(websocket: WebSocket, token: str | None = None) -> None:
        await serve_twilio(websocket, settings, state.engines, state.registry, state.metrics,
                           refusal=state.refusal(), path_token=token)

    if STATIC_DIR.is_dir():
        app.mount("/", StaticFiles(directory=STATIC_DIR, html=True), name="web")
    return app
