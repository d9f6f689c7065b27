"""Ephemeral client secrets (OpenAI GA ``POST /v1/realtime/client_secrets``).

A backend holding a real API key mints a short-lived secret bound to a session configuration and hands
it to a browser; the browser connects with it through the ``openai-insecure-api-key.`` subprotocol, as it
would with a key. A secret expires after ``expires_after.seconds`` (10 s to 2 h, default 10 min) and opens
one session only; that session starts with the bound configuration.

Secrets are kept as SHA-256 digests in a small SQLite table that every worker process shares (see
:class:`ClientSecrets`), looked up by digest and compared in constant time; their values are never stored
or logged. A connection the server turns away (still loading, full, draining) does not spend its secret.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import HTTPConnection

from bargein.config import Settings
from bargein.memory.store import bound_scope
from bargein.protocol.server_events import new_id
from bargein.protocol.session_config import SessionConfig
from bargein.server.auth import AuthResult, host_allowed, offered_key, origin_allowed
from bargein.server.session_locks import LockRequest, SessionLocks

SECRET_PREFIX = "ek_"
DEFAULT_TTL_S = 600
MIN_TTL_S = 10
MAX_TTL_S = 7200
MAX_SECRETS = 10_000
"""Unredeemed secrets kept at once; the oldest go first (they expire within two hours anyway)."""
SECRETS_FILE = "client-secrets.sqlite3"
BUSY_TIMEOUT_S = 0.5
"""How long a worker waits for another worker's write to the shared table (each takes microseconds): the wait
is in a thread, never on the event loop, and a table held longer answers "busy, retry" instead."""
_T = TypeVar("_T")
INVALID_SECRET = "invalid, expired or already used client secret"
BUSY_SECRETS = "the client secrets store is busy; retry shortly"


class ClientSecretsBusy(Exception):
    """The shared table stayed locked past :data:`BUSY_TIMEOUT_S` (another worker's write)."""


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
    bargein: LockRequest | None = None
    """bargein's own: fields the session may not change (:mod:`bargein.server.session_locks`)."""


@dataclass(frozen=True)
class BoundSession:
    """What a secret opens: the session's configuration and what its backend locked."""

    config: SessionConfig
    locks: SessionLocks = field(default_factory=SessionLocks)


class ClientSecretError(ValueError):
    """The request cannot be honoured; ``param`` names the offending field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def parse_request(body: Any) -> tuple[int, SessionConfig]:
    """The lifetime in seconds and the session configuration a request asks for."""
    ttl_s, bound = parse_mint(body)
    return ttl_s, bound.config


def parse_mint(body: Any) -> tuple[int, BoundSession]:
    """The lifetime in seconds, the session configuration and the locks a request asks for."""
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
    return request.expires_after.seconds, BoundSession(config, SessionLocks.of(request.bargein))


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).digest()


class ClientSecrets:
    """The secrets minted by this server and not yet spent or expired, in a SQLite table.

    ``path`` is a database file in the server's runtime directory: with ``--workers N`` every worker opens
    the same file, so a secret minted by one worker opens a session on any of them, and spending it is one
    ``DELETE ... RETURNING`` statement, atomic across processes (exactly once). ``None`` keeps a private
    in-memory table (one process). Only each secret's SHA-256 digest is stored, never the secret.
    """

    def __init__(self, path: str | None = None, *, clock: Any = time.time, max_secrets: int = MAX_SECRETS) -> None:
        self._clock = clock
        self._max = max_secrets
        self._lock = threading.Lock()  # one connection, used from the serving loop and test threads alike
        self._db = sqlite3.connect(path or ":memory:", timeout=BUSY_TIMEOUT_S, isolation_level=None,
                                   check_same_thread=False)
        with self._lock:
            if path:
                self._db.execute("PRAGMA journal_mode=WAL")  # readers never wait for the writer
            # secrets live minutes and die with the server's runtime directory: no need to survive a power cut
            self._db.execute("PRAGMA synchronous=OFF")
            self._db.execute("CREATE TABLE IF NOT EXISTS client_secrets (digest BLOB PRIMARY KEY, "
                             "config TEXT NOT NULL, expires_at REAL NOT NULL, locks TEXT NOT NULL DEFAULT '{}')")

    def __len__(self) -> int:
        with self._lock:
            (count,) = self._db.execute("SELECT count(*) FROM client_secrets").fetchone()
        return int(count)

    def mint(self, config: SessionConfig, ttl_s: int = DEFAULT_TTL_S,
             locks: SessionLocks | None = None) -> tuple[str, int]:
        """A new secret for ``config`` (with what its backend ``locks``) and its expiry (epoch seconds)."""
        value = SECRET_PREFIX + secrets.token_urlsafe(32)
        now = self._clock()
        expires_at = now + ttl_s
        with self._lock:
            self._db.execute("DELETE FROM client_secrets WHERE expires_at <= ?", (now,))
            self._db.execute("INSERT INTO client_secrets (digest, config, expires_at, locks) VALUES (?, ?, ?, ?)",
                             (_digest(value), config.model_dump_json(), expires_at,
                              json.dumps((locks or SessionLocks()).as_json())))
            # the oldest go first past the bound (they expire within two hours anyway)
            self._db.execute("DELETE FROM client_secrets WHERE rowid IN (SELECT rowid FROM client_secrets "
                             "ORDER BY rowid DESC LIMIT -1 OFFSET ?)", (self._max,))
        return value, int(expires_at)

    def peek(self, offered: str) -> SessionConfig | None:
        """The bound configuration if ``offered`` is a live secret; it is not spent (see :meth:`redeem`)."""
        bound = self.peek_bound(offered)
        return None if bound is None else bound.config

    def redeem(self, offered: str) -> SessionConfig | None:
        """Spend ``offered``: its bound configuration if it was live (on any worker, once), else None."""
        bound = self.redeem_bound(offered)
        return None if bound is None else bound.config

    def peek_bound(self, offered: str) -> BoundSession | None:
        """:meth:`peek`, with the locks."""
        digest = self._offered_digest(offered)
        if digest is None:
            return None
        with self._lock:
            row = self._db.execute("SELECT digest, config, expires_at, locks FROM client_secrets WHERE digest = ?",
                                   (digest,)).fetchone()
        return self._live(row, digest)

    def redeem_bound(self, offered: str) -> BoundSession | None:
        """:meth:`redeem`, with the locks."""
        digest = self._offered_digest(offered)
        if digest is None:
            return None
        with self._lock:
            rows = self._db.execute("DELETE FROM client_secrets WHERE digest = ? "
                                    "RETURNING digest, config, expires_at, locks", (digest,)).fetchall()
        return self._live(rows[0] if rows else None, digest)

    async def mint_async(self, bound: BoundSession, ttl_s: int = DEFAULT_TTL_S) -> tuple[str, int]:
        """:meth:`mint` off the event loop; :class:`ClientSecretsBusy` if the table stayed locked."""
        return await _off_loop(self.mint, bound.config, ttl_s, bound.locks)

    async def peek_async(self, offered: str) -> BoundSession | None:
        """:meth:`peek_bound` off the event loop; :class:`ClientSecretsBusy` if the table stayed locked."""
        return await _off_loop(self.peek_bound, offered)

    async def redeem_async(self, offered: str) -> BoundSession | None:
        """:meth:`redeem_bound` off the event loop; :class:`ClientSecretsBusy` if the table stayed locked."""
        return await _off_loop(self.redeem_bound, offered)

    def close(self) -> None:
        """Close the database connection."""
        with self._lock:
            self._db.close()

    @staticmethod
    def _offered_digest(offered: str) -> bytes | None:
        return _digest(offered) if offered.startswith(SECRET_PREFIX) else None

    def _live(self, row: tuple[bytes, str, float, str] | None, digest: bytes) -> BoundSession | None:
        if row is None or not hmac.compare_digest(row[0], digest) or row[2] <= self._clock():
            return None
        locks = SessionLocks.of(LockRequest.model_validate_json(row[3]))
        return BoundSession(SessionConfig.model_validate_json(row[1]), locks)


async def _off_loop(call: Callable[..., _T], *args: Any) -> _T:
    """Run one table operation in a thread: another worker's lock must never stall this worker's sessions."""
    try:
        return await asyncio.to_thread(call, *args)
    except sqlite3.OperationalError as error:
        raise ClientSecretsBusy(str(error)) from None


def secrets_path(runtime_directory: str | None) -> str | None:
    """The shared secrets database in the workers' runtime directory (None: one process, in memory)."""
    return os.path.join(runtime_directory, SECRETS_FILE) if runtime_directory else None


def response_body(value: str, expires_at: int, config: SessionConfig) -> dict[str, Any]:
    """The JSON of a ``ClientSecretCreateResponse``."""
    session = {"id": new_id("sess"), "object": "realtime.session", "expires_at": expires_at, **config.wire()}
    return {"value": value, "expires_at": expires_at, "session": session}


@dataclass(frozen=True)
class SecretOffer:
    """A connection that offers a client secret: the decision, the bound session, the secret to spend."""

    decision: AuthResult
    config: SessionConfig | None = None
    locks: SessionLocks = field(default_factory=SessionLocks)
    secret: str | None = field(default=None, repr=False)
    """Spent (:meth:`ClientSecrets.redeem`) only once the server admits the session."""


async def check_offered_secret(websocket: HTTPConnection, store: ClientSecrets | None,
                               settings: Settings) -> SecretOffer | None:
    """The decision for a connection offering a client secret, and the session it is bound to.

    None when no secret is offered, or the Host or Origin is refused (the usual checks then apply and
    refuse it). Nothing is spent here: a connection the server then turns away (still loading, full,
    draining) leaves the secret usable; the caller redeems it when the session starts.
    """
    key = offered_key(websocket)
    if store is None or key is None or not key.startswith(SECRET_PREFIX):
        return None
    if not (host_allowed(websocket.scope, settings) and origin_allowed(websocket.scope, settings)):
        return None
    try:
        bound = await store.peek_async(key)
    except ClientSecretsBusy:
        return SecretOffer(AuthResult(False, BUSY_SECRETS))
    if bound is None:
        # every key is compared, so the time taken does not tell which one (or whether any) matched
        if any([hmac.compare_digest(key.encode("utf-8", "replace"), k.encode()) for k in settings.api_keys]):
            return None  # a server key that happens to look like a secret
        return SecretOffer(AuthResult(False, INVALID_SECRET))
    subprotocol = "realtime" if "realtime" in websocket.scope.get("subprotocols", []) else None
    scope = bound_scope(bound.locks.memory_scope) if bound.locks.memory_scope else None
    return SecretOffer(AuthResult(True, subprotocol=subprotocol, memory_scope=scope), bound.config,
                       locks=bound.locks, secret=key)
