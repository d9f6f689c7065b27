"""Who may open a session: API keys, browser origins, and loopback clients in local-only mode.

The peer address that decides "loopback" is the socket's own, recorded by :class:`RealPeer` before
any forwarded-header rewriting: a proxy may tell us who its client is, but never that it is us.
In local-only mode the ``Host`` header must name this machine too, so a page whose DNS name was
rebound to 127.0.0.1 cannot drive the server; browsers always send ``Origin``, which must be the
server's own, a loopback page (local-only mode) or one of ``--allow-origin``.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Receive, Scope, Send

from bargein.config import Settings
from bargein.memory.store import LOCAL_SCOPE, key_scope

KEY_SUBPROTOCOL_PREFIX = "openai-insecure-api-key."
PEER_SCOPE_KEY = "bargein.peer"
SOCKET_SCOPE_KEY = "bargein.socket_peer"
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


@dataclass(frozen=True)
class AuthResult:
    """The decision and the subprotocol to echo back to the browser."""

    allowed: bool
    reason: str = ""
    subprotocol: str | None = None
    memory_scope: str | None = None
    """Whose long-term memories the session reads and writes (None: none), decided here, never by the client."""


class RealPeer:
    """ASGI middleware that keeps the socket's peer address before a proxy-header rewrite."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            client = scope.get("client")
            scope[PEER_SCOPE_KEY] = client[0] if client else None
            scope[SOCKET_SCOPE_KEY] = tuple(client) if client else None
        await self.app(scope, receive, send)


def peer_address(scope: Mapping[str, Any]) -> str | None:
    """The socket's peer address (never a forwarded one)."""
    if PEER_SCOPE_KEY in scope:
        return scope[PEER_SCOPE_KEY]  # type: ignore[no-any-return]
    client = scope.get("client")
    return str(client[0]) if client else None


def client_address(scope: Mapping[str, Any]) -> str | None:
    """The client a per-client limit counts: the forwarded address behind a trusted proxy, else the socket's.

    Only ``--forwarded-allow-ips`` proxies get ``scope["client"]`` rewritten (``X-Forwarded-For`` from anyone
    else is ignored), so a client cannot pick its own address; behind a proxy, counting the socket's peer would
    count every user of the server as one client. One host's addresses count as one client (an IPv6 /64).
    """
    client = scope.get("client")
    address = str(client[0]) if client else peer_address(scope)
    return None if address is None else _one_client(address)


IPV6_CLIENT_PREFIX = 64
"""An IPv6 host is given a whole /64 and may use any address of it: one client per /64, not per address."""


def _one_client(address: str) -> str:
    """The key one client's addresses share: an IPv4 address (mapped into IPv6 or not), an IPv6 /64."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    if isinstance(ip, ipaddress.IPv4Address) or ip.is_loopback:
        return str(ip)
    return str(ipaddress.ip_network(f"{ip}/{IPV6_CLIENT_PREFIX}", strict=False))


def offered_key(websocket: HTTPConnection) -> str | None:
    """The key from ``Authorization: Bearer`` or the browser subprotocol, if any."""
    header = websocket.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip()
    for protocol in websocket.scope.get("subprotocols", []):
        if protocol.startswith(KEY_SUBPROTOCOL_PREFIX):
            return str(protocol[len(KEY_SUBPROTOCOL_PREFIX):])
    return None


def is_loopback(host: str | None) -> bool:
    """True for an IP address in 127.0.0.0/8 or ::1; names (even ``localhost``) and no address are not."""
    if not host:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _is_loopback_name(hostname: str) -> bool:
    return hostname == "localhost" or hostname.endswith(".localhost") or is_loopback(hostname)


def _split_host(value: str, scheme: str) -> tuple[str, int] | None:
    """``(hostname, port)`` of a ``Host`` header or an origin's authority; None if malformed."""
    try:
        parts = urlsplit(f"{scheme}://{value}")
        hostname, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not hostname or parts.path or parts.query or parts.username:
        return None
    return hostname.lower(), port if port is not None else _DEFAULT_PORTS.get(scheme, 80)


def _origin(value: str) -> tuple[str, str, int] | None:
    """``(scheme, hostname, port)`` of an ``Origin`` header; None for ``null`` or anything malformed."""
    try:
        parts = urlsplit(value.strip())
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or parts.path not in ("", "/"):
        return None
    host = _split_host(parts.netloc, parts.scheme)
    return (parts.scheme, *host) if host else None


def host_allowed(scope: Mapping[str, Any], settings: Settings) -> bool:
    """In local-only mode the ``Host`` header must name this machine (DNS rebinding guard)."""
    if not settings.local_only:
        return True
    host_header = _header(scope, b"host")
    if host_header is None:
        return True  # HTTP/1.0-style clients; no browser sends a request without Host
    parsed = _split_host(host_header, "http")
    if parsed is None:
        return False
    hostname = parsed[0].strip("[]")
    return _is_loopback_name(hostname) or hostname == settings.host.lower()


def origin_allowed(scope: Mapping[str, Any], settings: Settings) -> bool:
    """A request without ``Origin`` is not from a browser page; with one, it must be allowed."""
    value = _header(scope, b"origin")
    if value is None:
        return True
    if "*" in settings.allow_origins:
        return True
    origin = _origin(value)
    if origin is None:
        return False
    scheme, hostname, port = origin
    if any(_origin(allowed) == origin for allowed in settings.allow_origins):
        return True
    secure = scope.get("scheme") in ("https", "wss")
    own = _split_host(_header(scope, b"host") or "", "https" if secure else "http")
    if own is not None and (scheme, hostname, port) == ("https" if secure else "http", *own):
        return True
    return settings.local_only and _is_loopback_name(hostname.strip("[]"))


def _header(scope: Mapping[str, Any], name: bytes) -> str | None:
    headers: Iterable[tuple[bytes, bytes]] = scope.get("headers", [])
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def authorize(websocket: HTTPConnection, settings: Settings) -> AuthResult:
    """Check the client's origin, then its key (or, with no keys configured, that it is on this machine)."""
    scope = websocket.scope
    subprotocol = "realtime" if "realtime" in scope.get("subprotocols", []) else None
    if not host_allowed(scope, settings):
        return AuthResult(False, "local-only mode: the Host header must name this machine")
    if not origin_allowed(scope, settings):
        return AuthResult(False, "this Origin is not allowed (see --allow-origin)")
    if settings.local_only:
        if is_loopback(peer_address(scope)):
            return AuthResult(True, subprotocol=subprotocol, memory_scope=LOCAL_SCOPE)
        return AuthResult(False, "local-only mode: no API key is configured, so only loopback clients may connect")
    key = offered_key(websocket)
    if not key:
        return AuthResult(False, "missing API key (Authorization: Bearer or openai-insecure-api-key subprotocol)")
    # every key is compared (a list, not a short-circuiting generator), so the time taken does not tell which
    # one (its position) matched
    matches = [hmac.compare_digest(key.encode(), allowed.encode()) for allowed in settings.api_keys]
    if any(matches):
        return AuthResult(True, subprotocol=subprotocol, memory_scope=key_scope(key))
    return AuthResult(False, "invalid API key")
