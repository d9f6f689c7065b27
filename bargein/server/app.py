"""The ASGI application: ``/v1/realtime``, ``/healthz`` and the browser page at ``/``."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, WebSocket
from fastapi.responses import JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.metrics.prometheus import ServerMetrics, watch_event_loop
from bargein.metrics.tracing import configure_tracing
from bargein.server.realtime_ws import SessionRegistry, serve_realtime
from bargein.session.tool_use import prime_default_prompt
from bargein.tools.registry import default_registry

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
        self.metrics = ServerMetrics(self.queue_sources)
        self.metrics.sessions.set_function(lambda: float(len(self.registry.live)))

    def queue_sources(self) -> dict[str, object]:
        """Each stage's queue, for the ``bargein_queue_depth`` gauge."""
        sources: dict[str, object] = {"outbound": _OutboundDepth(self.registry)}
        if self.engines is not None:
            sources.update(vad=self.engines.vad, asr=self.engines.asr, llm=self.engines.llm, tts=self.engines.tts)
        return sources


class _OutboundDepth:
    def __init__(self, registry: SessionRegistry) -> None:
        self.registry = registry

    @property
    def queue_depth(self) -> int:
        return sum(len(session.outbound) for session in self.registry.live)


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
        configure_tracing()
        loaded_here = state.engines is None and loader is not None
        if state.engines is None and loader is not None:
            started = time.perf_counter()
            try:
                state.engines = await asyncio.to_thread(loader, settings)
            except Exception as error:
                state.load_error = f"{type(error).__name__}: {error}"
                raise
            state.load_seconds = time.perf_counter() - started
        if state.engines is not None:
            state.metrics.watch_llm(state.engines.llm)
            state.metrics.describe_engines(state.engines.description)
            prime_default_prompt(state.engines.llm, default_registry() if settings.builtin_tools else None)
        # the models' objects live as long as the server: keep them out of every later collection,
        # whose full passes otherwise stall the event loop for 100 ms at a time
        gc.collect()
        gc.freeze()
        lag_watch = asyncio.create_task(watch_event_loop(state.metrics), name="loop-lag")
        if on_ready is not None:
            on_ready(state)
        yield
        lag_watch.cancel()
        # engines handed in by the caller are the caller's to close; the ones loaded here are ours
        if loaded_here and state.engines is not None:
            await state.engines.aclose()

    app = FastAPI(title="bargein", lifespan=lifespan)
    app.state.bargein = state

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        ready = state.engines is not None
        body = {"ready": ready, "sessions": len(state.registry.live), "local_only": settings.local_only,
                "engines": state.engines.description if state.engines else {}, "error": state.load_error}
        return JSONResponse(body, status_code=200 if ready else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(state.metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.websocket("/v1/realtime")
    async def realtime(websocket: WebSocket) -> None:
        await serve_realtime(websocket, settings, state.engines, state.registry, state.metrics)

    if STATIC_DIR.is_dir():
        app.mount("/", StaticFiles(directory=STATIC_DIR, html=True), name="web")
    return app
