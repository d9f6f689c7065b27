"""How uvicorn serves the app: forwarded headers off unless configured, and a guard on handshakes.

uvicorn by default believes ``X-Forwarded-For`` from the addresses in ``FORWARDED_ALLOW_IPS`` and puts
no limit on how long a connection may take to send its request. Here proxy headers are applied by the
app itself (:func:`bargein.server.app.create_app`, only with ``--forwarded-allow-ips``), and every
connection must finish its HTTP request (or WebSocket upgrade request) within
``handshake_timeout_s``, with at most ``max_connections_per_client`` such young connections per
client address (a trusted proxy, which carries every user's handshakes, is held only to the timeout), so a
thousand half-open sockets cannot use up the server's file descriptors.
WebSocket connections are tracked by peer so the app can :func:`abort_connection` a client that does
not read (uvicorn would otherwise keep reading it for 10 s after the close frame, and keep its
unsent output until the peer reads it).

uvicorn offers no public hook for these, so the subclasses read three private attributes of its protocols
(``cycle``, ``conn.data_to_send``, ``read_paused``): pyproject.toml holds uvicorn below its next minor release,
and ``tests/server/test_uvicorn_internals.py`` names whichever a newer uvicorn lacks.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Callable
from typing import Any

import uvicorn
from uvicorn.protocols.http.auto import AutoHTTPProtocol
from uvicorn.protocols.websockets.auto import AutoWebSocketsProtocol

from bargein.config import Settings
from bargein.metrics.loop_cpu import connection_meter, metered_callback
from bargein.server.limits import AddressCounter

log = logging.getLogger(__name__)
_OPEN_WEBSOCKETS: dict[tuple[str, int], asyncio.BaseTransport] = {}


def trusted_proxies(forwarded_allow_ips: str | None) -> Callable[[str], bool]:
    """Whether an address is one of the proxies named in ``--forwarded-allow-ips`` (addresses or networks).

    ``*`` names no proxy in particular: trusting everyone's forwarded headers must not exempt everyone from
    the per-address cap below."""
    networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    literals: set[str] = set()
    for item in (part.strip() for part in (forwarded_allow_ips or "").split(",")):
        if not item or item == "*":
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            literals.add(item)  # a unix socket path, as uvicorn allows

    def trusted(host: str) -> bool:
        if host in literals:
            return True
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        return any(address in network for network in networks)

    return trusted


class HandshakeGuard:
    """Counts each client address's connections younger than the handshake timeout."""

    def __init__(self, timeout_s: float, per_client: int, *, uncapped: Callable[[str], bool] | None = None) -> None:
        self.timeout_s = timeout_s
        self.young = AddressCounter(per_client)
        self.uncapped = uncapped
        """Addresses not held to the cap (trusted proxies: every user's handshake comes from one of them),
        though still to the timeout."""
        self.refused = 0
        self.timed_out = 0

    def admit(self, host: str) -> bool:
        """Count a new connection from ``host``; False if that address already has too many young ones."""
        if self.uncapped is not None and self.uncapped(host):
            self.young.open[host] += 1
            return True
        admitted = self.young.acquire(host)
        self.refused += not admitted
        return admitted

    def release(self, host: str) -> None:
        """The connection is no longer young (it was served, closed or timed out)."""
        self.young.release(host)


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


PARSE_SLICE_BYTES = 4096
"""Bytes of one connection's input parsed per event-loop turn (a read brings up to 256 KiB: thousands
of tiny frames, which uvicorn would otherwise parse and queue in one go while every other session waits)."""
MAX_BACKLOG_BYTES = 1 << 20
"""Input read but not yet parsed, per connection, before reading from its socket is paused."""
PONG_OPCODE = 0xA
MAX_PONG_BACKLOG_BYTES = 1 << 20
"""Output a client has left unread, above which its pings get no pong (uvicorn writes each pong at once,
however much output already waits: a client that sends pings and never reads would grow it without end)."""


_WebSocketProtocol: Any = object
"""The mixin's declared base: uvicorn's WebSocket protocols share no typed base class, so the mixin's
``super()`` calls (into whichever protocol :func:`tracked_ws_protocol` composes it with) are typed loosely."""


class TrackedWebSocket(_WebSocketProtocol):  # type: ignore[misc]
    """What the server adds to uvicorn's WebSocket protocol: each connection's transport recorded by peer
    address and port (for :func:`abort_connection`), what a connection sends parsed a slice per event-loop
    turn, and pongs skipped for a client that leaves too much output unread. Composed with the protocol
    class by :func:`tracked_ws_protocol`, which puts it first in the method order."""

    _peer: tuple[str, int] | None = None
    _backlog: bytearray | None = None
    _paused_here = False

    def _parse(self, data: bytes) -> None:
        with metered_callback(connection_meter(getattr(self, "scope", None))):  # the session's own work
            super().data_received(data)

    def data_received(self, data: bytes) -> None:
        """Parse a small read at once; queue a large one (or any while a backlog waits) for sliced parsing."""
        if self._backlog is None and len(data) <= PARSE_SLICE_BYTES:
            self._parse(data)
            return
        if self._backlog is None:
            self._backlog = bytearray()
            asyncio.get_running_loop().call_soon(self._parse_slice)
        self._backlog += data
        if len(self._backlog) > MAX_BACKLOG_BYTES:  # again each time: uvicorn may have resumed reading
            self._paused_here = True
            self.transport.pause_reading()

    def handle_ping(self, *args: Any) -> None:
        """Answer a ping, unless the client has left more than ``MAX_PONG_BACKLOG_BYTES`` of output unread."""
        if self.transport.get_write_buffer_size() <= MAX_PONG_BACKLOG_BYTES:
            super().handle_ping(*args)
            return
        _write_all_but_pongs(self)  # RFC 6455 5.5.3: an endpoint may skip pongs

    def _parse_slice(self) -> None:
        backlog = self._backlog
        if backlog is None or self.transport.is_closing():
            self._backlog = None
            return
        piece = bytes(backlog[:PARSE_SLICE_BYTES])
        del backlog[:PARSE_SLICE_BYTES]
        if backlog:
            asyncio.get_running_loop().call_soon(self._parse_slice)
        else:
            self._backlog = None
            if self._paused_here:
                self._paused_here = False
                if not getattr(self, "read_paused", False):  # unless uvicorn wants it paused itself
                    self.transport.resume_reading()
        self._parse(piece)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Let the handshake guard go of the upgraded connection, and record its transport by peer."""
        _release_handshake_guard(transport)
        super().connection_made(transport)
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self._peer = (str(peer[0]), int(peer[1]))
            _OPEN_WEBSOCKETS[self._peer] = transport

    def connection_lost(self, exc: Exception | None) -> None:
        """Forget the connection's transport."""
        if self._peer is not None:
            _OPEN_WEBSOCKETS.pop(self._peer, None)
        super().connection_lost(exc)


def tracked_ws_protocol(base: Any = AutoWebSocketsProtocol) -> type[asyncio.Protocol]:
    """uvicorn's WebSocket protocol ``base`` with :class:`TrackedWebSocket`'s behaviour in front of it."""

    class Tracked(TrackedWebSocket, base):  # type: ignore[valid-type,misc]
        pass

    return Tracked


def _write_all_but_pongs(protocol: Any) -> None:
    """Write what uvicorn's sans-I/O parser has queued, less its pongs: the parser queues a pong with whatever
    else the same read produced (a close frame answering the client's), and only the pongs are to be dropped."""
    pending = getattr(getattr(protocol, "conn", None), "data_to_send", None)
    if pending is not None:
        kept = [frame for frame in pending() if not (frame and frame[0] & 0x0F == PONG_OPCODE)]
        if any(kept):
            protocol.transport.write(b"".join(kept))


def _release_handshake_guard(transport: asyncio.BaseTransport) -> None:
    """An upgraded connection is no longer a young connection of its address: the guard lets it go."""
    handshake = transport.get_protocol()  # still the HTTP protocol that is handing over
    release = getattr(handshake, "_guard_release", None)
    if release is not None:
        release()


def abort_connection(client: tuple[str, int] | list[Any] | None) -> bool:
    """Drop the TCP connection of the WebSocket client at ``client`` (scope["client"]) at once."""
    if not client or len(client) < 2:
        return False
    transport = _OPEN_WEBSOCKETS.pop((str(client[0]), int(client[1])), None)
    if transport is None:
        return False
    transport.abort()  # type: ignore[attr-defined]
    return True


def _ws_protocol(name: str) -> Any:
    """uvicorn's WebSocket protocol class for ``--ws`` (``auto``: what uvicorn picks)."""
    from uvicorn.config import WS_PROTOCOLS
    from uvicorn.importer import import_from_string

    target = WS_PROTOCOLS.get(name)
    return import_from_string(target) if target else AutoWebSocketsProtocol


def safe_uvicorn_options(settings: Settings) -> dict[str, Any]:
    """The options every way of serving sets, besides the protocol classes (:func:`protocol_classes`)."""
    return dict(proxy_headers=False, forwarded_allow_ips="",  # applied inside the app, only when configured
                # twice the message limit: a message over the limit still gets its error event, and one
                # connection never buffers more than this (uvicorn stops reading until the app takes a message)
                ws_max_size=2 * settings.max_message_bytes, ws_ping_interval=20, ws_ping_timeout=60,
                # no permessage-deflate: a few compressed bytes could make the server inflate and parse
                # megabytes per read, on the event loop, before any per-connection limit sees the messages
                ws_per_message_deflate=False, timeout_keep_alive=5, server_header=False)


def protocol_classes(settings: Settings) -> tuple[type[asyncio.Protocol], type[asyncio.Protocol]]:
    """The HTTP and WebSocket protocol classes every way of serving installs: the handshake guard, and the
    tracked WebSocket protocol (sliced parsing, pongs skipped past a backlog). Build them once per process:
    the guard counts that process's young connections."""
    guard = HandshakeGuard(settings.handshake_timeout_s, settings.max_connections_per_client,
                           uncapped=trusted_proxies(settings.forwarded_allow_ips))
    return guarded_protocol(guard), tracked_ws_protocol(_ws_protocol(settings.ws_impl))


def server_config(app: Any, settings: Settings, **overrides: Any) -> uvicorn.Config:
    """The uvicorn configuration for ``settings`` (``overrides`` win, e.g. ``log_level``)."""
    http, ws = protocol_classes(settings)
    options: dict[str, Any] = dict(
        host=settings.host, port=settings.port, http=http, ws=ws, **safe_uvicorn_options(settings),
    )
    options.update(overrides)
    return uvicorn.Config(app, **options)
