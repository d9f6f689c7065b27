"""One live session's connection to its client, whatever carries it: the tasks that serve it and how it ends.

Every connection runs four tasks: the reader (client events, held back above the event rate), the writer (the
session's outbound queue), a watchdog (idle time, session length) and one waiting for the outbound queue to
overflow. Whichever ends first ends the session: a client that leaves, a writer that can no longer write, a client
over a budget. A transport (the WebSocket, a phone line, WebRTC) subclasses :class:`SessionConnection` and supplies
only how to receive (``_read``), how to send (``_write``) and how to say goodbye (``farewell``); the budgets that
every client message passes (:meth:`SessionConnection.take`) and the outbound filters are shared here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

from bargein.config import Settings
from bargein.metrics.prometheus import ServerMetrics
from bargein.protocol.errors import ProtocolError
from bargein.protocol.server_events import error_event
from bargein.server.limits import EventRateLimiter
from bargein.server.session_host import GOING_AWAY_CLOSE, POLICY_CLOSE, Ending
from bargein.server.session_locks import SessionLocks
from bargein.session.outbound import OutboundClosed, Outgoing
from bargein.session.realtime_session import RealtimeSession

log = logging.getLogger(__name__)


class SessionConnection:
    """A session served to one client until either side ends it (subclasses carry the messages)."""

    def __init__(self, session: RealtimeSession, settings: Settings, metrics: ServerMetrics | None, *,
                 own_events: bool, locks: SessionLocks | None = None) -> None:
        self.locks = locks or SessionLocks()
        self.session = session
        self.settings = settings
        self.metrics = metrics
        self.own_events = own_events
        self.limiter = EventRateLimiter(settings.events_per_s, settings.event_burst,
                                        sustain_s=settings.rate_limit_sustain_s)
        self.started = self.last_heard = time.monotonic()

    async def run(self) -> None:
        """Serve until the client leaves or the server ends the session (then it says why, and closes)."""
        tasks = {asyncio.create_task(self._read(), name="realtime-reader"),
                 asyncio.create_task(self._write(), name="realtime-writer"),
                 asyncio.create_task(self._watch(), name="realtime-watchdog"),
                 asyncio.create_task(self._overflow(), name="realtime-overflow")}
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        ending: Ending | None = None
        for task in sorted(done, key=lambda task: task.get_name() == "realtime-overflow"):  # an overflow says why
            if task.cancelled():
                continue
            if (error := task.exception()) is not None:
                log.error("a realtime connection task failed", exc_info=error)
                ending = Ending("server_error", "the session failed on the server", 1011)
            elif isinstance(result := task.result(), Ending):
                ending = result
        self.session.outbound.close()  # nothing more goes out; queued events are released with the session
        if ending is not None:
            log.info("ending a session: %s (%s)", ending.code, ending.message)
            if self.metrics is not None:
                self.metrics.errors.labels(ending.code).inc()
            await self.farewell(ending)

    async def farewell(self, ending: Ending) -> None:
        """Tell the client why the server ends the session, and close."""
        raise NotImplementedError

    async def _read(self) -> Ending | None:
        """Read client messages until the client leaves (None) or is over a budget (why)."""
        raise NotImplementedError

    async def _write(self) -> None:
        """Carry the session's outbound events to the client until the queue closes or the client is gone."""
        raise NotImplementedError

    async def outgoing(self) -> AsyncIterator[Outgoing]:
        """The session's outbound events as they are queued, until the queue closes (the session is ending; the
        overflow watch says why, if it was an overflow)."""
        while True:
            try:
                yield await self.session.outbound.get()
            except OutboundClosed:
                return

    async def take(self, data: str | bytes, size: int) -> Ending | None:
        """One client message of ``size`` bytes on the wire: held back above the event rate, refused over the size
        bound, else handled by the session; an ending when the client has been over the rate for too long."""
        self.last_heard = time.monotonic()
        throttle = self.limiter.admit(size)
        if throttle.close:
            return Ending("rate_limit_exceeded", f"over {self.settings.events_per_s:g} events per second for "
                          f"{self.limiter.sustain_s:g} s", POLICY_CLOSE)
        if throttle.tell:
            self.session.outbound.put(Outgoing(error_event(ProtocolError(
                f"over {self.settings.events_per_s:g} events per second: events are being delayed",
                code="rate_limit_exceeded"))))
        if throttle.wait_s > 0:
            await asyncio.sleep(throttle.wait_s)  # meanwhile nothing is read: the transport slows the client
        max_bytes = self.settings.max_message_bytes
        if size > max_bytes:
            self.session.outbound.put(Outgoing(error_event(ProtocolError(
                f"message of {size} bytes exceeds the limit of {max_bytes} bytes; split the audio into "
                "smaller appends", code="message_too_large"))))
            return None
        await self.handle(data)
        return None

    async def handle(self, data: str | bytes) -> None:
        """Hand one admitted client message to the session (a transport may take its own events first)."""
        await self.session.handle_message(data)

    def visible(self, item: Outgoing) -> str | None:
        """The text ``item`` goes out as, or None when this client does not get it (bargein's own events to a client
        that did not ask for them: the session's bookkeeping of what left is the same either way)."""
        if not self.own_events and item.event["type"].startswith("bargein."):
            return None
        return self.locks.visible(item.wire, item.event["type"], item.event)

    def sent(self, item: Outgoing) -> None:
        """``item`` left (or was dropped for this client): the session's playback estimate and the error counts."""
        self.session.on_sent(item)
        if self.metrics is not None and item.event["type"] == "error":
            self.metrics.errors.labels(str(item.event["error"].get("code"))).inc()

    async def _overflow(self) -> Ending:
        outbound = self.session.outbound
        await outbound.overflowed.wait()
        return Ending("outbound_overflow", f"over {outbound.max_bytes // (1024 * 1024)} MiB of events waited for "
                      "the client to read them", POLICY_CLOSE)

    async def _watch(self) -> Ending:
        idle_s, longest_s = self.settings.idle_timeout_s, self.settings.max_session_s
        while True:
            now = time.monotonic()
            if longest_s and now - self.started >= longest_s:
                return Ending("session_expired", f"the session reached its maximum length of {longest_s:g} s",
                              GOING_AWAY_CLOSE)
            if idle_s and now - self.last_heard >= idle_s:
                return Ending("session_idle", f"the client sent nothing for {idle_s:g} s", GOING_AWAY_CLOSE)
            deadlines = [self.started + longest_s] if longest_s else []
            if idle_s:
                deadlines.append(self.last_heard + idle_s)
            await asyncio.sleep(max(0.05, min(deadlines) - now) if deadlines else 3600.0)


def message_bytes(data: str | bytes) -> int:
    """The size of a client message on the wire: a text frame's UTF-8 bytes, not its characters."""
    if isinstance(data, bytes) or data.isascii():  # isascii is constant time: JSON text is mostly ASCII
        return len(data)
    return len(data.encode("utf-8", "surrogatepass"))
