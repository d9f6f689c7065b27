"""``GET /v1/ledger/export``: the cost ledger of this server process (:mod:`bargein.metrics.ledger_export`), for
``bargein capacity --ledger``. The operator's only: the API key or the metrics key, as ``/metrics``."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from bargein.config import Settings
from bargein.metrics.ledger_export import ledger_export
from bargein.server.operator_pages import operator_allowed


def add_ledger_route(app: FastAPI, settings: Settings) -> None:
    """Serve the export to the operator."""

    @app.get("/v1/ledger/export")
    async def export(request: Request) -> JSONResponse:
        if not operator_allowed(request, settings):
            return JSONResponse({"error": {"message": "/v1/ledger/export needs an API key or the metrics key "
                                           "(Authorization: Bearer)", "type": "invalid_request_error",
                                           "code": "invalid_api_key"}},
                                status_code=401, headers={"WWW-Authenticate": "Bearer"})
        return JSONResponse(ledger_export())
