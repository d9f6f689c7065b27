"""Ephemeral client secrets (OpenAI GA ``POST /v1/realtime/client_secrets``).

A backend holding a real API key mints a short-lived secret bound to a session configuration and hands
it to a browser; the browser connects with it through the ``openai-insecure-api-key.`` subprotocol, as it
would with a key. A secret expires after ``expires_after.seconds`` (10 s to 2 h, default 10 min) and opens
one session only; that session starts with the bound configuration.

Secrets live in this process's memory only, looked up by their SHA-256 digest and then compared in
constant time, and are never logged.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.websockets import WebSocket

from bargein.config import Settings
from bargein.protocol.server_events import new_id
from bargein.protocol.session_config import SessionConfig
from bargein.server.auth import AuthResult, host_allowed, offered_key, origin_allowed

SECRET_PREFIX = "ek_"
DEFAULT_TTL_S = 600
MIN_TTL_S = 10
MAX_TTL_S = 7200
MAX_SECRETS = 10_000
"""Unredeemed secrets kept at once; the oldest go first (they expire within two hours anyway)."""


class ExpiresAfter(BaseModel):
    """When the secret stops opening sessions, counted from its creation."""

    model_config = ConfigDict(extra="forbid")
    anchor: str = "created_at"
    seconds: int = Field(DEFAULT_TTL_S, ge=MIN_TTL_S, le=MAX_TTL_S)


class ClientSecretRequest(BaseModel):
    """The body of ``POST /v1/realtime/client_secrets``."""

    model_config = ConfigDict(extra="forbid")
    expires_after: ExpiresAfter = Field(default_factory=ExpiresAfter)
    session: dict[str, Any] = Field(default_factory=dict)


class ClientSecretError(ValueError):
    """The request cannot be honoured; ``param`` names the offending field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class _Minted:
    value: str
    config: SessionConfig
    expires_at: float


def parse_request(body: Any) -> tuple[int, SessionConfig]:
    """The lifetime in seconds and the session configuration a request asks for."""
    try:
        request = ClientSecretRequest.model_validate(body if body is not None else {})
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ClientSecretError(f"invalid request: {where}: {first['msg']}", where) from None
    if request.expires_after.anchor != "created_at":
        raise ClientSecretError("expires_after.anchor must be 'created_at'", "expires_after.anchor")
    session = dict(request.session)
    kind = session.pop("type", "realtime")
    if kind != "realtime":
        raise ClientSecretError("only realtime sessions are served (session.type must be 'realtime')",
                                "session.type")
    try:
        config = SessionConfig().updated(session)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ClientSecretError(f"invalid session: session.{where}: {first['msg']}", f"session.{where}") from None
    return request.expires_after.seconds, config


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).digest()


class ClientSecrets:
    """The secrets minted by this server and not yet redeemed or expired."""

    def __init__(self, *, clock: Any = time.time, max_secrets: int = MAX_SECRETS) -> None:
        self._clock = clock
        self._max = max_secrets
        self._by_digest: OrderedDict[bytes, _Minted] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_digest)

    def mint(self, config: SessionConfig, ttl_s: int = DEFAULT_TTL_S) -> tuple[str, int]:
        """A new secret for ``config`` and its expiry (epoch seconds)."""
        self._purge()
        value = SECRET_PREFIX + secrets.token_urlsafe(32)
        expires_at = self._clock() + ttl_s
        self._by_digest[_digest(value)] = _Minted(value, config, expires_at)
        while len(self._by_digest) > self._max:
            self._by_digest.popitem(last=False)
        return value, int(expires_at)

    def redeem(self, offered: str) -> SessionConfig | None:
        """The bound configuration if ``offered`` is a live secret, which is then spent; else None."""
        if not offered.startswith(SECRET_PREFIX):
            return None
        digest = _digest(offered)
        minted = self._by_digest.get(digest)
        if minted is None or not hmac.compare_digest(minted.value.encode(), offered.encode("utf-8", "replace")):
            return None
        del self._by_digest[digest]  # one session per secret
        if minted.expires_at <= self._clock():
            return None
        return minted.config

    def _purge(self) -> None:
        now = self._clock()
        for digest in [d for d, m in self._by_digest.items() if m.expires_at <= now]:
            del self._by_digest[digest]


def response_body(value: str, expires_at: int, config: SessionConfig) -> dict[str, Any]:
    """The JSON of a ``ClientSecretCreateResponse``."""
    session = {"id": new_id("sess"), "object": "realtime.session", "expires_at": expires_at, **config.wire()}
    return {"value": value, "expires_at": expires_at, "session": session}


def redeem_offered_secret(websocket: WebSocket, store: ClientSecrets | None,
                          settings: Settings) -> tuple[AuthResult, SessionConfig | None] | None:
    """The decision for a connection offering a client secret, and the session it is bound to.

    None when no secret is offered, or the Host or Origin is refused (the usual checks then apply and
    refuse it, without spending the secret). A live secret is spent here.
    """
    key = offered_key(websocket)
    if store is None or key is None or not key.startswith(SECRET_PREFIX):
        return None
    if not (host_allowed(websocket.scope, settings) and origin_allowed(websocket.scope, settings)):
        return None
    api_keys = settings.api_keys
    config = store.redeem(key)
    if config is None:
        if any([hmac.compare_digest(key.encode("utf-8", "replace"), k.encode()) for k in api_keys]):
            return None  # a server key that happens to look like a secret
        return AuthResult(False, "invalid, expired or already used client secret"), None
    subprotocol = "realtime" if "realtime" in websocket.scope.get("subprotocols", []) else None
    return AuthResult(True, subprotocol=subprotocol), config
