"""The operator's routes: ``/healthz`` (ready or draining for anyone, details for an operator) and ``/metrics``."""

from __future__ import annotations

import os

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from bargein.engines.process.shared import SHARED_DIR_ENV, shared_socket
from bargein.metrics.aggregate import merged_exposition
from bargein.server.operator_pages import (
    LOAD_FAILED,
    WITHHELD,
    operator_allowed,
    redacted_description,
    redacted_stages,
)
from bargein.server.state import ServerState, merged_by_maximum


def add_operator_routes(app: FastAPI, state: ServerState) -> None:
    """Add ``GET /healthz`` and ``GET /metrics`` to ``app``."""
    settings = state.settings

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
        live = state.board.gather(state.figures(), merged_by_maximum())
        body = merged_exposition(live, shared_engines=bool(os.environ.get(SHARED_DIR_ENV)),
                                 shared_llm=shared_socket("llm") is not None, retired=state.board.retired())
        return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")


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
