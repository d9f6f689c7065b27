"""``POST /v1/realtime/client_secrets``: a backend with a server key mints a browser's one-session secret."""

from __future__ import annotations

import hmac
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from bargein.config import Settings
from bargein.protocol.client_events import read_json_object
from bargein.protocol.errors import ProtocolError
from bargein.server.auth import host_allowed, is_loopback, origin_allowed, peer_address
from bargein.server.client_secrets import (
    BUSY_SECRETS,
    ClientSecretError,
    ClientSecrets,
    ClientSecretsBusy,
    parse_mint,
    response_body,
)

log = logging.getLogger(__name__)
MAX_BODY_BYTES = 256 * 1024


def _error(status: int, message: str, *, type_: str = "invalid_request_error", code: str | None = None,
           param: str | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": type_, "param": param, "code": code}},
                        status_code=status)


def server_key_allowed(request: Request, settings: Settings) -> bool:
    """True for a request carrying one of the server's keys (or from loopback in local-only mode).

    Client secrets themselves never authorise minting more of them.
    """
    api_keys = settings.api_keys
    if not api_keys:
        # the socket's own peer (never one a proxy forwarded: a remote peer must not pass for us), and the
        # WebSocket's Host and Origin checks: a page rebound to 127.0.0.1 could otherwise mint and read a secret
        return is_loopback(peer_address(request.scope)) and host_allowed(request.scope, settings) \
            and origin_allowed(request.scope, settings)
    header = request.headers.get("authorization", "")
    if not header.lower().startswith("bearer "):
        return False
    offered = header[7:].strip().encode("utf-8", "replace")
    # every key is compared, so the time taken does not tell which one (or whether any) matched
    matches = [hmac.compare_digest(offered, key.encode()) for key in api_keys]
    return any(matches)


def add_client_secret_route(app: FastAPI, settings: Settings, store: ClientSecrets) -> None:
    """Mount the OpenAI GA ``client_secrets`` endpoint on ``app``."""

    @app.post("/v1/realtime/client_secrets")
    async def create_client_secret(request: Request) -> JSONResponse:
        if not server_key_allowed(request, settings):
            log.warning("refused a client secret request: missing or invalid server key")
            return _error(401, "a server API key is required (Authorization: Bearer)", code="invalid_api_key")
        raw = await request.body()
        if len(raw) > MAX_BODY_BYTES:
            return _error(413, f"request body over {MAX_BODY_BYTES} bytes")
        try:
            body: Any = read_json_object(raw, "the body") if raw.strip() not in (b"", b"null") else {}
            ttl_s, bound = parse_mint(body)
        except ProtocolError as error:  # not JSON, or JSON no session could hold (NaN, a lone surrogate, ...)
            return _error(400, error.message, code=error.code)
        except ClientSecretError as error:
            return _error(400, str(error), param=error.param, code="invalid_value")
        try:
            value, expires_at = await store.mint_async(bound, ttl_s)
        except ClientSecretsBusy:
            response = _error(503, BUSY_SECRETS, type_="server_error", code="server_busy")
            response.headers["Retry-After"] = "1"
            return response
        log.info("minted a client secret valid for %d s", ttl_s)
        return JSONResponse(response_body(value, expires_at, bound.config))
