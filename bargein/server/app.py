"""The ASGI application: ``/v1/realtime``, ``/healthz`` and the browser page at ``/``."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request, WebSocket
from fastapi.responses import JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.engines.process.shared import SHARED_DIR_ENV, shared_socket
from bargein.memory.store import MemoryStore
from bargein.memory_upkeep import keep_memory_flat
from bargein.metrics.aggregate import WorkerBoard, WorkerFigures, maxima, merged_exposition
from bargein.metrics.gc_pauses import GcPauseWatch
from bargein.metrics.prometheus import ServerMetrics, StageSource, watch_event_loop
from bargein.metrics.tracing import configure_tracing, flush_tracing
from bargein.server.auth import RealPeer
from bargein.server.client_counts import session_counts
from bargein.server.client_secrets import ClientSecrets, secrets_path
from bargein.server.drain import Drain, shared_drain_flag
from bargein.server.history_budget import HistoryLedger
from bargein.server.load import LoadLimits, LoadMonitor
from bargein.server.memory_api import add_memory_routes, open_memory_store, warm_tools
from bargein.server.operator_pages import (
    LOAD_FAILED,
    WITHHELD,
    operator_allowed,
    redacted_description,
    redacted_stages,
)
from bargein.server.phone_tokens import install_log_redaction
from bargein.server.realtime_ws import SessionRegistry, refuse_session, serve_realtime
from bargein.server.secrets_api import add_client_secret_route
from bargein.server.twilio_ws import serve_twilio
from bargein.server.warm_up import warm_first_turn

log = logging.getLogger(__name__)
STATIC_DIR = Path(__file__).resolve().parent.parent / "web" / "static"
EngineLoader = Callable[[Settings], Engines]
WORKER_DIR_ENV = "BARGEIN_WORKER_DIR"
"""Set by ``bargein serve --workers N``: where the workers publish their figures for ``/metrics``."""
PUBLISH_EVERY_S = 1.0


class ServerState:
    """What the routes share: settings, engines once loaded, live sessions."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.engines: Engines | None = None
        self.load_error: str | None = None
        self.load_seconds: float | None = None
        runtime_directory = os.environ.get(WORKER_DIR_ENV)  # shared by the workers of ``--workers N``
        self.registry = SessionRegistry(settings.max_sessions, settings.max_connections_per_client,
                                        HistoryLedger(settings.max_history_bytes_per_client,
                                                      settings.max_history_bytes_per_worker),
                                        session_counts(runtime_directory, settings.max_connections_per_client))
        self.client_secrets = ClientSecrets(secrets_path(runtime_directory))
        self.drain = Drain(self.registry, settings.drain_s, shared_flag=shared_drain_flag(runtime_directory))
        self.metrics = ServerMetrics(self.queue_sources)
        self.metrics.sessions.set_function(lambda: float(len(self.registry.live)))
        self.load = LoadMonitor(LoadLimits(settings.max_sessions, settings.max_loop_lag_ms, settings.max_queue_depth),
                                lambda: len(self.registry.live), self.queue_sources)
        self.board = WorkerBoard(runtime_directory)
        self.memory: MemoryStore | None = None
        """The long-term memory store, opened with the server (None: ``--no-memory``, or not open yet)."""

    def figures(self) -> WorkerFigures:
        """This worker's exposition and load, as published to the other workers."""
        return WorkerFigures(os.getpid(), self.metrics.exposition().decode(), self.load.snapshot().as_dict())

    def queue_sources(self) -> dict[str, StageSource]:
        """Each stage's queue, for the ``bargein_queue_depth`` gauge."""
        sources: dict[str, StageSource] = {"outbound": _OutboundDepth(self.registry)}
        if self.engines is not None:
            sources.update(vad=self.engines.vad, asr=self.engines.asr, llm=self.engines.llm, tts=self.engines.tts)
        return sources


async def _publish(state: ServerState) -> None:
    """Publish this worker's figures for the others' ``/metrics`` (only when there are others)."""
    if state.board.directory is None:
        return
    while True:
        try:
            state.board.publish(state.figures())
        except OSError as error:  # a full or vanished directory must not stop the worker
            log.warning("could not publish this worker's figures: %s", error)
        await asyncio.sleep(PUBLISH_EVERY_S)


def _maxima() -> frozenset[str]:
    """The families ``/metrics`` merges by their maximum here (engines shared by the session workers or not)."""
    return maxima(shared_engines=bool(os.environ.get(SHARED_DIR_ENV)), shared_llm=shared_socket("llm") is not None)


def _health_details(state: ServerState) -> dict[str, object]:
    """What ``/healthz`` tells an operator beyond ready and draining: URLs without secrets, errors by kind."""
    engines = state.engines
    details: dict[str, object] = {
        "sessions": len(state.registry.live), "local_only": state.settings.local_only,
        "engines": redacted_description(engines.description) if engines else {},
        "error": None if state.load_error is None else f"{state.load_error} ({LOAD_FAILED}; {WITHHELD})",
        "load": state.load.snapshot().as_dict()}
    if engines is not None and engines.health is not None:
        details["status"] = engines.health.overall
        details["stages"] = redacted_stages(engines.health.snapshot())
    return details


class _OutboundDepth:
    worker = None  # the sessions' outbound queues run in this process

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
                state.load_error = type(error).__name__  # the message may quote a URL or an upstream reply
                raise
            state.load_seconds = time.perf_counter() - started
        if state.engines is not None:
            state.metrics.watch_llm(state.engines.llm)
            if state.engines.turn is not None:
                state.metrics.watch_turn_model(state.engines.turn)
            state.metrics.describe_engines(redacted_description(state.engines.description))
            if state.engines.health is not None:
                state.metrics.watch_health(state.engines.health)
            state.memory = await open_memory_store(settings)
            warm_s = await warm_first_turn(state.engines, warm_tools(settings, state.memory))
            log.info("first turn warmed up in %.1f s (the default prompt evaluated, the end-of-turn model run)", warm_s)
        # the models' objects live as long as the server: keep them out of every later collection,
        # whose full passes otherwise stall the event loop for 100 ms at a time
        gc.collect()
        gc.freeze()
        state.drain.loop = asyncio.get_running_loop()
        gc_watch = GcPauseWatch(state.metrics.gc_pause)
        gc_watch.install()
        lag_watch = asyncio.create_task(watch_event_loop(state.metrics, on_sample=state.load.observe_lag),
                                        name="loop-lag")
        publisher = asyncio.create_task(_publish(state), name="worker-figures")
        upkeep = asyncio.create_task(keep_memory_flat(after_pass=state.metrics.note_settled_memory),
                                     name="memory-upkeep")
        if on_ready is not None:
            on_ready(state)
        yield
        lag_watch.cancel()
        publisher.cancel()
        upkeep.cancel()
        gc_watch.remove()
        with contextlib.suppress(OSError):  # its last counts, then into the retired ones (kept in /metrics)
            state.board.publish(state.figures())
        state.board.withdraw(os.getpid(), _maxima())
        await asyncio.to_thread(flush_tracing)
        if state.memory is not None:
            await state.memory.close()
        # engines handed in by the caller are the caller's to close; the ones loaded here are ours
        if loaded_here and state.engines is not None:
            await state.engines.aclose()

    docs = settings.api_docs
    app = FastAPI(title="bargein", lifespan=lifespan, docs_url="/docs" if docs else None, redoc_url=None,
                  openapi_url="/openapi.json" if docs else None)
    app.state.bargein = state
    if settings.forwarded_allow_ips:
        app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=settings.forwarded_allow_ips)
    app.add_middleware(RealPeer)  # added last, so it runs first: the socket's address before any rewrite

    @app.get("/healthz")
    async def healthz(request: Request) -> JSONResponse:
        ready = state.engines is not None and not state.drain.draining
        body: dict[str, object] = {"ready": ready, "draining": state.drain.draining}
        if operator_allowed(request, settings):  # the rest is the operator's, never a stranger's
            body.update(_health_details(state))
        return JSONResponse(body, status_code=200 if ready else 503)

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        if not operator_allowed(request, settings):
            return JSONResponse({"error": {"message": "/metrics needs an API key or the metrics key "
                                           "(Authorization: Bearer)", "type": "invalid_request_error",
                                           "code": "invalid_api_key"}},
                                status_code=401, headers={"WWW-Authenticate": "Bearer"})
        live = state.board.gather(state.figures(), _maxima())
        body = merged_exposition(live, shared_engines=bool(os.environ.get(SHARED_DIR_ENV)),
                                 shared_llm=shared_socket("llm") is not None, retired=state.board.retired())
        return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")

    def refusal() -> str | None:
        # asked again once the connection is accepted: a drain may have begun while the upgrade was answered,
        # and has then already listed the sessions it will tell
        return "the server is shutting down" if state.drain.draining else state.load.refusal()

    @app.websocket("/v1/realtime")
    async def realtime(websocket: WebSocket) -> None:
        if state.drain.draining:
            await refuse_session(websocket, "the server is shutting down; connect to another instance")
            return
        await serve_realtime(websocket, settings, state.engines, state.registry, state.metrics, refusal,
                             client_secrets=state.client_secrets, memory_store=state.memory)

    add_client_secret_route(app, settings, state.client_secrets)
    add_memory_routes(app, settings, lambda: state.memory)

    # phone lines (issue 45): Twilio Media Streams over the same session; a signed token may be the last segment
    install_log_redaction()

    @app.websocket("/v1/telephony/twilio")
    @app.websocket("/v1/telephony/twilio/{token}")
    async def twilio(websocket: WebSocket, token: str | None = None) -> None:
        await serve_twilio(websocket, settings, state.engines, state.registry, state.metrics,
                           refusal=refusal(), path_token=token)

    if STATIC_DIR.is_dir():
        app.mount("/", StaticFiles(directory=STATIC_DIR, html=True), name="web")
    return app
