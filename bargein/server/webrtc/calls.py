"""The live WebRTC calls of this server, and one call's life: connect (or be reaped), host the session, end.

A call is admitted when its offer is answered: it holds its client address's place from then on, and counts
against ``max_sessions`` while it connects. If ICE and DTLS do not complete within ``webrtc_connect_timeout_s``
the call is reaped and its place released; once connected the session is hosted as a WebSocket's is
(:mod:`bargein.server.session_host`) and served by :class:`~bargein.server.webrtc.connection.WebRtcConnection`
until the caller hangs up, the peer connection fails, or the server ends it (idle, too long, over a budget).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.memory.store import MemoryStore
from bargein.metrics.prometheus import ServerMetrics
from bargein.protocol.server_events import new_id
from bargein.protocol.session_config import SessionConfig
from bargein.server.session_host import SessionPlace, SessionRegistry, hosted, new_session
from bargein.server.webrtc.connection import WebRtcConnection
from bargein.server.webrtc.media import CallMedia

log = logging.getLogger(__name__)


def caller_digest(key: str | None) -> str | None:
    """What a call remembers of the key that opened it (to let the same caller hang up): a digest, not the key."""
    return hashlib.sha256(key.encode("utf-8", "replace")).hexdigest() if key else None


@dataclass(frozen=True)
class CallRequest:
    """What an answered offer asked for: the session's config and its patch, events, and where it counts."""

    config: SessionConfig
    patch: dict[str, Any] | None
    own_events: bool
    place: SessionPlace


@dataclass
class Call:
    """One answered call."""

    call_id: str
    media: CallMedia
    caller: str | None
    """The digest of the key (or client secret) that opened it; None in local-only mode."""
    connection: WebRtcConnection | None = None
    task: asyncio.Task[None] | None = None

    def hang_up(self) -> None:
        """End the call: its media end, and with them its session."""
        self.media.ended.set()

    def opened_by(self, key: str | None) -> bool:
        """True when ``key`` is the one that opened the call (compared in constant time)."""
        offered = caller_digest(key)
        return self.caller is not None and offered is not None and hmac.compare_digest(offered, self.caller)


@dataclass(frozen=True)
class CallCloser:
    """How the drain closes a call's session, as it closes a WebSocket's: it hangs the call up (after the drain's
    ``error`` event has gone out on the data channel)."""

    call: Call
    scope: dict[str, Any] = field(default_factory=dict)
    """No socket of uvicorn's to abort: a call's media end with the call."""

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """End the call (``code`` and ``reason`` have no place on a peer connection; the error event said why)."""
        self.call.hang_up()


class CallBook:
    """The calls of this server by id (each also holds a place in the session registry's counts)."""

    def __init__(self) -> None:
        self.calls: dict[str, Call] = {}

    def open(self, media: CallMedia, key: str | None) -> Call:
        """A new call over ``media``, with a fresh ``rtc_`` id."""
        call = Call(new_id("rtc"), media, caller_digest(key))
        self.calls[call.call_id] = call
        return call

    def get(self, call_id: str) -> Call | None:
        """The live call ``call_id``, if any."""
        return self.calls.get(call_id)

    @property
    def connecting(self) -> int:
        """Calls answered whose session has not started yet (they count against ``max_sessions``)."""
        return sum(1 for call in self.calls.values() if call.connection is None)

    async def close_all(self) -> None:
        """End every call (the server is stopping)."""
        for call in list(self.calls.values()):
            call.hang_up()
        tasks = [call.task for call in self.calls.values() if call.task is not None]
        await asyncio.gather(*tasks, return_exceptions=True)


@dataclass(frozen=True)
class CallServices:
    """What a call's life needs of the server."""

    settings: Settings
    engines: Engines
    registry: SessionRegistry
    metrics: ServerMetrics | None
    memory_store: MemoryStore | None
    book: CallBook


async def run_call(call: Call, request: CallRequest, services: CallServices) -> None:
    """Wait for the call to connect (else reap it), serve its session, then release everything it held."""
    settings, registry = services.settings, services.registry
    try:
        if not await call.media.wait_connected(settings.webrtc_connect_timeout_s):
            log.info("reaped call %s: ICE and DTLS did not complete within %g s", call.call_id,
                     settings.webrtc_connect_timeout_s)
            if services.metrics is not None:
                services.metrics.errors.labels("webrtc_not_connected").inc()
            return
        session = new_session(settings, services.engines, services.metrics, request.config)
        async with hosted(session, settings, registry, request.place, services.memory_store,
                          socket=CallCloser(call)):
            connection = WebRtcConnection(call.media, session, settings, services.metrics,
                                          own_events=request.own_events, locks=request.place.locks)
            call.connection = connection
            if request.patch is not None:  # the offer's session config, as a session.update (same checks, locks)
                await session.handle_message(json.dumps({"type": "session.update", "session": request.patch}))
            await connection.run()  # until the caller leaves, hangs up (the media end) or the server ends it
    finally:
        services.book.calls.pop(call.call_id, None)
        await call.media.close()
        await registry.addresses.release(request.place.address)
