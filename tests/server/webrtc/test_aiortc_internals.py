"""aiortc's private receive path that :mod:`bargein.server.webrtc.receive` replaces, checked on the installed aiortc.

receive.py puts its own buffer in ``RTCRtpReceiver.__jitter_buffer`` and falls back to aiortc's own jitter buffer
(four packets late, no concealment) with only a logged error when that attribute is gone, so a renamed attribute
would not fail a call, only make it slow again. pyproject.toml pins aiortc; this test fails when a newer aiortc
changes what receive.py relies on: the attribute, and each depayloaded packet reaching its ``add``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiortc.jitterbuffer import JitterBuffer
from aiortc.mediastreams import MediaStreamError
from aiortc.rtcrtpparameters import RTCRtpCodecParameters, RTCRtpReceiveParameters
from aiortc.rtcrtpreceiver import RemoteStreamTrack, RTCRtpReceiver
from aiortc.rtp import RtpPacket

from bargein.server.webrtc.receive import RECEIVER_BUFFER, ReceivedAudio, receive_audio
from tests.server.webrtc.opus_packets import FRAME, opus_packets, tone

OPUS = RTCRtpCodecParameters(mimeType="audio/opus", clockRate=48_000, channels=2, payloadType=111)


class _Transport:
    """The little of an ``RTCDtlsTransport`` a receiver touches before any RTCP goes out."""

    state = "connected"

    def _register_rtp_receiver(self, receiver: Any, parameters: Any) -> None:
        pass

    def _unregister_rtp_receiver(self, receiver: Any) -> None:
        pass


async def test_the_audio_receiver_has_the_jitter_buffer_receive_replaces() -> None:
    receiver = RTCRtpReceiver("audio", _Transport())  # type: ignore[arg-type]
    assert isinstance(getattr(receiver, RECEIVER_BUFFER, None), JitterBuffer), \
        f"aiortc's RTCRtpReceiver has no {RECEIVER_BUFFER} any more: bargein.server.webrtc.receive replaces it"


async def test_each_rtp_packet_reaches_the_buffer_put_in_its_place() -> None:
    receiver = RTCRtpReceiver("audio", _Transport())  # type: ignore[arg-type]
    receiver._track = RemoteStreamTrack(kind="audio")  # as RTCPeerConnection gives it one
    track = receive_audio(receiver, receiver._track)
    assert isinstance(track, ReceivedAudio)
    await receiver.receive(RTCRtpReceiveParameters(codecs=[OPUS]))  # type: ignore[arg-type]
    try:
        for index, payload in enumerate(opus_packets(tone(3))[:3]):
            packet = RtpPacket(payload_type=111, sequence_number=9 + index, timestamp=index * FRAME, ssrc=1234)
            packet.payload = payload
            await receiver._handle_rtp_packet(packet, arrival_time_ms=0)
        frames = [await asyncio.wait_for(track.recv(), 1.0) for _ in range(3)]
        assert [frame.pts for frame in frames] == [0, FRAME, 2 * FRAME], \
            "aiortc's receiver no longer hands each depayloaded packet to its jitter buffer's add()"
    finally:
        await receiver.stop()
    assert track.watcher is not None
    await asyncio.wait_for(track.watcher, 2.0)  # aiortc's track ended (its decoder stopped), and with it ours
    with pytest.raises(MediaStreamError):
        await track.recv()
