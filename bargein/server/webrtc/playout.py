"""What the caller heard of a reply: the audio the server put on the wire, less the time it takes to play out there.

Over WebRTC the client sends no playback cursor (an OpenAI WebRTC client never truncates: the server does). The
server knows the newest sample it sent of each item (:class:`~bargein.server.webrtc.tracks.OnWire`); that sample
plays at the caller one network trip and one jitter buffer later. So at a barge-in, what was heard reaches the
sent position less that delay, never before where this stretch of the item began going out.

The delay comes from RTCP receiver reports where the caller sends them (aiortc turns them into a round-trip time
and the interarrival jitter): half the round trip, plus the jitter buffer a receiver keeps for that jitter
(``JITTER_MULTIPLE`` times it, at least ``JITTER_BUFFER_FLOOR_MS``). Before the first report (the first seconds of
a call) it is :data:`DEFAULT_PLAYOUT_DELAY_MS`: a loopback or LAN trip and a browser's smallest jitter buffer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aiortc import RTCRtpSender
from aiortc.stats import RTCRemoteInboundRtpStreamStats

from bargein.server.webrtc.opus import OPUS_RATE
from bargein.server.webrtc.tracks import OnWire

log = logging.getLogger(__name__)
DEFAULT_PLAYOUT_DELAY_MS = 60.0
"""Sent to played before any receiver report: a one-way trip of a few ms and a browser's smallest jitter buffer
(about 40 ms of Opus), plus one 20 ms frame in the receiver's decoder."""
JITTER_BUFFER_FLOOR_MS = 40.0
JITTER_MULTIPLE = 3.0
"""A receiver's jitter buffer holds a few times the interarrival jitter (NetEq's target grows with it)."""
MAX_PLAYOUT_DELAY_MS = 1000.0
"""A report saying more than this is taken as this (a clock glitch must not erase a whole reply from history)."""
READ_EVERY_S = 1.0


class PlayoutDelay:
    """The caller's sent-to-played delay, refreshed from the sender's RTCP statistics."""

    def __init__(self) -> None:
        self.delay_ms = DEFAULT_PLAYOUT_DELAY_MS
        self.reported = False
        """True once a receiver report has set the delay."""

    def update(self, round_trip_s: float | None, jitter_units: float | None) -> None:
        """A receiver report's round trip (s, None before aiortc could measure one) and jitter (RTP units)."""
        if round_trip_s is None and jitter_units is None:
            return
        one_way_ms = 500.0 * round_trip_s if round_trip_s is not None else 0.0
        jitter_ms = 1000.0 * (jitter_units or 0.0) / OPUS_RATE  # RTP timestamp units: Opus's 48 kHz clock
        buffer_ms = max(JITTER_BUFFER_FLOOR_MS, JITTER_MULTIPLE * jitter_ms)
        self.delay_ms = min(MAX_PLAYOUT_DELAY_MS, one_way_ms + buffer_ms + 20.0)
        self.reported = True

    async def follow(self, sender: RTCRtpSender) -> None:
        """Read the sender's statistics every second for the call's life (cancel to stop)."""
        while True:
            await asyncio.sleep(READ_EVERY_S)
            with contextlib.suppress(Exception):  # statistics are best effort: the default stands
                report = await sender.getStats()
                for stats in report.values():
                    if isinstance(stats, RTCRemoteInboundRtpStreamStats):
                        self.update(stats.roundTripTime, float(stats.jitter))


def heard_ms(on_wire: OnWire, delay_ms: float, now: float) -> float:
    """How far into its item the caller has heard at loop time ``now``, the newest sample sent being ``on_wire``."""
    in_flight_ms = max(0.0, delay_ms - 1000.0 * (now - on_wire.sent_at))
    return max(on_wire.start_ms, on_wire.item_ms - in_flight_ms, 0.0)


def still_playing(on_wire: OnWire | None, delay_ms: float, now: float) -> bool:
    """The caller may still be playing audio sent as ``on_wire`` (its last sample has not had time to play)."""
    return on_wire is not None and 1000.0 * (now - on_wire.sent_at) < delay_ms
