"""The ASGI application: ``/v1/realtime``, ``/healthz`` and the browser page at ``/``."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, WebSocket
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles

from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.server.realtime_ws import SessionRegistry, serve_realtime

log = logging.getLogger(__name__)
STATIC_DIR = Path(__file__).resolve().parent.parent / "web" / "static"
EngineLoader = Callable[[Settings], Engines]


class ServerState:
    """What the routes share: settings, engines once loaded, live sessions."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.engines: Engines | None = None
        self.load_error: str | None = None
        self.load_seconds: float | None = None
        self.registry = SessionRegistry(settings.max_sessions)


def create_app(settings: Settings | None = None, engines: Engines | None = None, *,
               loader: EngineLoader | None = None,
               on_ready: Callable[[ServerState], None] | None = None) -> FastAPI:
    """Build the app. Pass ready ``engines``, or a ``loader`` run at start-up off the event loop."""
    settings = settings or Settings()
    state = ServerState(settings)
    state.engines = engines

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if settings.local_only:
            log.warning("no API key configured: local-only mode, only loopback clients may connect")
        if state.engines is None and loader is not None:
            started = time.perf_counter()
            try:
                state.engines = await asyncio.to_thread(loader, settings)
            except Exception as error:
                state.load_error = f"{type(error).__name__}: {error}"
                raise
            state.load_seconds = time.perf_counter() - started
        if on_ready is not None:
            on_ready(state)
        yield
        if state.engines is not None:
            await state.engines.aclose()

    app = FastAPI(title="bargein", lifespan=lifespan)
    app.state.bargein = state

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        ready = state.engines is not None
        body = {"ready": ready, "sessions": len(state.registry.live), "local_only": settings.local_only,
                "engines": state.engines.description if state.engines else {}, "error": state.load_error}
        return JSONResponse(body, status_code=200 if ready else 503)

    @app.websocket("/v1/realtime")
    async def realtime(websocket: WebSocket) -> None:
        await serve_realtime(websocket, settings, state.engines, state.registry)

    if STATIC_DIR.is_dir():
        app.mount("/", StaticFiles(directory=STATIC_DIR, html=True), name="web")
    return app
