"""One call's peer connection and what it carries: the answer, the data channel's inbox, the caller's audio track.

:func:`open_peer` answers an offer with aiortc: the server's reply track joins the offer's audio transceiver
(sendrecv), ICE candidates are gathered before the answer goes back (no trickle), so the answer holds the host
candidates (and relayed ones when the deployment names TURN servers, ``ice_servers``), and says that the server
takes Opus in-band FEC (``useinbandfec=1``: a browser then sends it). The data channel the client
creates (``oai-events``) feeds a bounded inbox: a flood is dropped at the door, never queued without bound, and the
reader then holds it to the session's event rate. What arrives is also counted at the door, before any parsing,
against the same rate: a caller whose arrivals stay over it for ``rate_limit_sustain_s`` worth of events is
flooding, and the call is ended (every message costs aiortc's SCTP handling on the event loop, dropped or not).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from aiortc import (
    MediaStreamTrack,
    RTCConfiguration,
    RTCDataChannel,
    RTCIceServer,
    RTCPeerConnection,
    RTCSessionDescription,
)

from bargein.config import Settings
from bargein.server.limits import EventRateLimiter
from bargein.server.webrtc.opus import with_inband_fec
from bargein.server.webrtc.receive import DECODE_RATE, receive_audio
from bargein.server.webrtc.tracks import ReplyAudioTrack

log = logging.getLogger(__name__)
EVENTS_LABEL = "oai-events"
INBOX_MESSAGES = 256
"""Data channel messages waiting for the reader; more are dropped (and counted) until it catches up."""
ENDED_STATES = ("failed", "closed")
PlaybackListener = Callable[[str, str], None]


def ice_configuration(settings: Settings) -> RTCConfiguration:
    """The peer's ICE servers: the deployment's STUN/TURN URLs with their credentials, or none (host candidates)."""
    if not settings.ice_servers:
        return RTCConfiguration(iceServers=[])
    return RTCConfiguration(iceServers=[RTCIceServer(urls=list(settings.ice_servers), username=settings.ice_username,
                                                     credential=settings.ice_credential)])


@dataclass
class Inbox:
    """Data channel messages for the reader, bounded in count and bytes."""

    max_bytes: int
    arrivals: EventRateLimiter | None = None
    """Charged for every message as it arrives (never waited on): its ``close`` marks the caller as flooding."""
    messages: deque[str | bytes] = field(default_factory=deque)
    queued_bytes: int = 0
    dropped: int = 0
    flooded: bool = False
    """The caller kept the channel over the event rate for too long: the reader ends the call."""
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    def put(self, message: str | bytes) -> None:
        """Queue ``message``, or drop it when the inbox is full or the caller is flooding."""
        size = len(message)
        if self.flooded or (self.arrivals is not None and self.arrivals.admit(size).close):
            self.flooded = True
            self.ready.set()
            return
        if len(self.messages) >= INBOX_MESSAGES or self.queued_bytes + size > self.max_bytes:
            self.dropped += 1
            return
        self.messages.append(message)
        self.queued_bytes += size
        self.ready.set()

    async def get(self) -> str | bytes | None:
        """The oldest message, waiting for one; None once the caller is flooding."""
        while not self.messages and not self.flooded:
            self.ready.clear()
            await self.ready.wait()
        if self.flooded:
            return None
        message = self.messages.popleft()
        self.queued_bytes -= len(message)
        return message


class CallMedia:
    """The peer connection of one call and the state of its transports."""

    def __init__(self, settings: Settings) -> None:
        self.pc = RTCPeerConnection(ice_configuration(settings))
        self.track = ReplyAudioTrack(self._started, self._drained)
        self.inbox = Inbox(max(2 * settings.max_message_bytes, 1024 * 1024),
                           EventRateLimiter(settings.events_per_s, settings.event_burst,
                                            sustain_s=settings.rate_limit_sustain_s))
        self.channel: RTCDataChannel | None = None
        self.channel_open = asyncio.Event()
        self.remote_audio: asyncio.Future[MediaStreamTrack] = asyncio.get_running_loop().create_future()
        self.connected = asyncio.Event()
        self.ended = asyncio.Event()
        self.listener: PlaybackListener | None = None
        """Told ``("started" | "drained", response_id)`` as the reply track sends (set by the connection)."""
        self.pc.on("datachannel", self._datachannel)
        self.pc.on("track", self._track)
        self.pc.on("connectionstatechange", self._state_changed)

    def _started(self, response_id: str) -> None:
        if self.listener is not None:
            self.listener("started", response_id)

    def _drained(self, response_id: str) -> None:
        if self.listener is not None:
            self.listener("drained", response_id)

    async def answer(self, sdp: str) -> str:
        """Take the client's offer and return the answer, its candidates gathered (raises on a bad offer)."""
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=sdp, type="offer"))
        self.pc.addTrack(self.track)
        await self.pc.setLocalDescription(await self.pc.createAnswer())
        return with_inband_fec(str(self.pc.localDescription.sdp))

    def _datachannel(self, channel: RTCDataChannel) -> None:
        if channel.label != EVENTS_LABEL or self.channel is not None:
            log.info("ignored a data channel %r (events travel on %r)", channel.label[:40], EVENTS_LABEL)
            return
        self.channel = channel
        channel.on("message", self.inbox.put)
        if channel.readyState == "open":
            self.channel_open.set()
        channel.on("open", self.channel_open.set)
        channel.on("close", self.ended.set)

    def _track(self, track: MediaStreamTrack) -> None:
        if track.kind == "audio" and not self.remote_audio.done():
            receiver = next((r for r in self.pc.getReceivers() if r.track is track), None)
            self.remote_audio.set_result(track if receiver is None else receive_audio(receiver, track, DECODE_RATE))

    def _state_changed(self) -> None:
        state = self.pc.connectionState
        if state == "connected":
            self.connected.set()
        elif state in ENDED_STATES:
            self.ended.set()

    async def wait_connected(self, timeout_s: float) -> bool:
        """True once ICE and DTLS have completed; False when the call ended or the time ran out first."""
        waits = {asyncio.ensure_future(self.connected.wait()), asyncio.ensure_future(self.ended.wait())}
        try:
            await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        return self.connected.is_set() and not self.ended.is_set()

    def send(self, text: str) -> bool:
        """Send ``text`` on the events channel; False when it is not open."""
        channel = self.channel
        if channel is None or channel.readyState != "open":
            return False
        channel.send(text)
        return True

    @property
    def buffered_bytes(self) -> int:
        """Bytes the events channel holds that the client has not taken yet."""
        return self.channel.bufferedAmount if self.channel is not None else 0

    async def drained(self, timeout_s: float) -> None:
        """Wait until the events channel has sent everything it buffered (at most ``timeout_s``)."""
        channel = self.channel
        if channel is None or channel.readyState != "open" or channel.bufferedAmount <= 0:
            return
        low = asyncio.Event()
        channel.once("bufferedamountlow", low.set)  # emitted as the buffer falls to its threshold, 0
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(low.wait(), timeout_s)

    async def close(self) -> None:
        """Stop the media and close the peer connection (ICE, DTLS, the tracks)."""
        self.track.stop()
        self.ended.set()
        with contextlib.suppress(Exception):
            await self.pc.close()
