"""How uvicorn serves the app: forwarded headers off unless configured, and a guard on handshakes.

uvicorn by default believes ``X-Forwarded-For`` from the addresses in ``FORWARDED_ALLOW_IPS`` and puts
no limit on how long a connection may take to send its request. Here proxy headers are applied by the
app itself (:func:`bargein.server.app.create_app`, only with ``--forwarded-allow-ips``), and every
connection must finish its HTTP request (or WebSocket upgrade request) within
``handshake_timeout_s``, with at most ``max_connections_per_client`` such young connections per
client address, so a thousand half-open sockets cannot use up the server's file descriptors.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

import uvicorn
from uvicorn.protocols.http.auto import AutoHTTPProtocol

from bargein.config import Settings

log = logging.getLogger(__name__)


class HandshakeGuard:
    """Counts each client address's connections younger than the handshake timeout."""

    def __init__(self, timeout_s: float, per_client: int) -> None:
        self.timeout_s = timeout_s
        self.per_client = per_client
        self.young: Counter[str] = Counter()
        self.refused = 0
        self.timed_out = 0

    def admit(self, host: str) -> bool:
        """Count a new connection from ``host``; False if that address already has too many young ones."""
        if self.young[host] >= self.per_client:
            self.refused += 1
            return False
        self.young[host] += 1
        return True

    def release(self, host: str) -> None:
        """The connection is no longer young (it was served, closed or timed out)."""
        self.young[host] -= 1
        if self.young[host] <= 0:
            del self.young[host]


def guarded_protocol(guard: HandshakeGuard, base: type[asyncio.Protocol] = AutoHTTPProtocol) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol, closing connections that do not send a whole request in time."""

    class Guarded(base):  # type: ignore[valid-type,misc]
        _guard_host: str | None = None
        _guard_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            peer = transport.get_extra_info("peername")
            host = str(peer[0]) if isinstance(peer, tuple) and peer else "unknown"
            if not guard.admit(host):
                transport.abort()
                return
            self._guard_host = host
            self._guard_timer = asyncio.get_running_loop().call_later(guard.timeout_s, self._guard_expired, transport)

        def _guard_release(self) -> None:
            if self._guard_host is not None:
                guard.release(self._guard_host)
                self._guard_host = None
            if self._guard_timer is not None:
                self._guard_timer.cancel()
                self._guard_timer = None

        def _guard_expired(self, transport: asyncio.Transport) -> None:
            self._guard_timer = None
            handshaking = transport.get_protocol() is self and getattr(self, "cycle", None) is None
            self._guard_release()
            if handshaking and not transport.is_closing():
                guard.timed_out += 1
                transport.abort()

        def connection_lost(self, exc: Exception | None) -> None:
            self._guard_release()
            super().connection_lost(exc)

    return Guarded


def server_config(app: Any, settings: Settings, **overrides: Any) -> uvicorn.Config:
    """The uvicorn configuration for ``settings`` (``overrides`` win, e.g. ``log_level``)."""
    guard = HandshakeGuard(settings.handshake_timeout_s, settings.max_connections_per_client)
    options: dict[str, Any] = dict(
        host=settings.host, port=settings.port, http=guarded_protocol(guard),
        proxy_headers=False, forwarded_allow_ips="",  # applied inside the app, only when configured
        ws_max_size=8 * settings.max_message_bytes, ws_ping_interval=20, ws_ping_timeout=60,
        timeout_keep_alive=5, server_header=False,
    )
    options.update(overrides)
    return uvicorn.Config(app, **options)
