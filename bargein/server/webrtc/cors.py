"""Cross-origin calls: a page on an allowed origin (``--allow-origin``, or a loopback page in local-only mode) may
post its offer from the browser.

A browser's ``fetch`` with an ``Authorization`` header asks first (an ``OPTIONS`` preflight), and reads the answer's
``Location`` (the call id) only when it is exposed. Only origins the WebSocket would accept get either; the call
itself is still authorised by its key or client secret, never by its origin.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from bargein.config import Settings
from bargein.server.auth import origin_allowed

PREFLIGHT_MAX_AGE_S = 600
MAX_REQUESTED_HEADERS = 512
"""Characters of ``Access-Control-Request-Headers`` echoed back."""


def _allowed_origin(request: Request, settings: Settings) -> str | None:
    origin = request.headers.get("origin")
    return origin if origin is not None and origin_allowed(request.scope, settings) else None


def preflight(request: Request, settings: Settings) -> Response:
    """The answer to a browser's ``OPTIONS`` before a cross-origin ``POST``: allowed origins only."""
    origin = _allowed_origin(request, settings)
    if origin is None:
        return Response(status_code=403)
    requested = request.headers.get("access-control-request-headers", "authorization, content-type")
    return Response(status_code=204, headers={
        "Access-Control-Allow-Origin": origin, "Access-Control-Allow-Methods": "POST",
        "Access-Control-Allow-Headers": requested[:MAX_REQUESTED_HEADERS],
        "Access-Control-Max-Age": str(PREFLIGHT_MAX_AGE_S), "Vary": "Origin"})


def with_cors(response: Response, request: Request, settings: Settings) -> Response:
    """``response`` readable by the page that asked, when its origin is allowed (the ``Location`` header too)."""
    origin = _allowed_origin(request, settings)
    if origin is not None:
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Access-Control-Expose-Headers"] = "Location"
        response.headers["Vary"] = "Origin"
    return response
