"""Opus in-band FEC with the real libopus: a caller's lost packet is recovered from the next one, far closer to what
was said than packet-loss concealment gets, and the reorderer hands the decoder that next packet."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import numpy as np
import numpy.typing as npt
import pytest

from bargein.server.webrtc.opus import FecDecoder, OpusEncoder, load_libopus, with_inband_fec
from bargein.server.webrtc.receive import DECODE_RATE, ConcealingDecoder, ReceiveBuffer, ReceivedAudio
from bargein.server.webrtc.reorder import MIN_WAIT_S, Release, Reorderer
from tests.server.webrtc.opus_packets import FRAME, RATE

LOST = 15
LOOKAHEAD = 312
"""libopus's delay at 48 kHz in its VoIP mode: a frame's sound leaves this much later in the decoded stream."""

pytestmark = pytest.mark.skipif(load_libopus() is None, reason="no libopus to load")


def voice(frames: int) -> npt.NDArray[np.int16]:
    """A voice-like sound: a gliding pitch with harmonics, its loudness rising and falling as syllables do (a plain
    tone would be too easy for concealment, which continues it)."""
    t = np.arange(frames * FRAME) / RATE
    phase = 2 * np.pi * np.cumsum(120 + 60 * np.sin(2 * np.pi * 1.3 * t)) / RATE
    sound = sum(np.sin(k * phase) / k for k in range(1, 8)) * (0.5 + 0.5 * np.sin(2 * np.pi * 4 * t))
    return (sound / np.abs(sound).max() * 12000).astype(np.int16)


def packets_of(samples: npt.NDArray[np.int16], encoder: OpusEncoder) -> list[bytes]:
    return [bytes(encoder.encode(samples[i * FRAME:(i + 1) * FRAME].copy(), i * FRAME))
            for i in range(len(samples) // FRAME)]


def likeness(original: npt.NDArray[np.int16], decoded: npt.NDArray[np.int16]) -> float:
    """Correlation of the lost frame's decoded audio with what was said there."""
    said = original[LOST * FRAME - LOOKAHEAD:(LOST + 1) * FRAME - LOOKAHEAD].astype(np.float64)
    return float(np.corrcoef(said, decoded[LOST * FRAME:(LOST + 1) * FRAME].astype(np.float64))[0, 1])


def decode_losing(packets: list[bytes], *, recover: bool) -> npt.NDArray[np.int16]:
    decoder = ConcealingDecoder()
    frames = []
    for index, packet in enumerate(packets):
        lost = index == LOST
        release = Release(index * FRAME, None if lost else packet, packets[index + 1] if lost and recover else None)
        frames += [frame.to_ndarray().reshape(-1) for frame in decoder.decode(release)]
    return np.concatenate(frames)


def test_a_lost_packet_is_recovered_from_the_next_far_better_than_concealed() -> None:
    said = voice(30)
    packets = packets_of(said, OpusEncoder())
    recovered = likeness(said, decode_losing(packets, recover=True))
    concealed = likeness(said, decode_losing(packets, recover=False))
    assert recovered > 0.8 and recovered > concealed + 0.15, (recovered, concealed)


def test_without_fec_in_the_stream_the_next_packet_gives_only_concealment() -> None:
    said = voice(30)
    packets = packets_of(said, OpusEncoder(expected_loss_percent=0))  # no LBRR coded: nothing to recover
    recovered = likeness(said, decode_losing(packets, recover=True))
    concealed = likeness(said, decode_losing(packets, recover=False))
    assert abs(recovered - concealed) < 0.05


def test_the_decoder_decodes_conceals_and_recovers_a_frame_each() -> None:
    lib = load_libopus()
    assert lib is not None
    decoder = FecDecoder(lib)
    packets = packets_of(voice(4), OpusEncoder())
    first = decoder.decode(packets[0])
    assert first is not None and len(first) == FRAME
    for output in (decoder.conceal(FRAME), decoder.recover(packets[2], FRAME), decoder.decode(packets[2])):
        assert output is not None and len(output) == FRAME
    assert decoder.decode(b"\xff\xff\xff") is None  # a corrupt packet is refused, not a crash


def test_the_reorderer_hands_a_lost_packet_the_one_after_it() -> None:
    reorderer = Reorderer()
    reorderer.take(1, 0, b"a", 0.0)
    reorderer.take(3, 2 * FRAME, b"c", 0.0)  # 2 is lost
    reorderer.take(5, 4 * FRAME, b"e", 0.0)  # 4 too
    released = reorderer.due(MIN_WAIT_S)
    assert [(r.payload, r.recovery) for r in released] == [(None, b"c"), (b"c", None), (None, b"e"), (b"e", None)]
    reorderer.take(8, 7 * FRAME, b"h", 1.0)  # 6 and 7 lost: 6 has no next packet to recover from, 7 has
    assert [(r.payload, r.recovery) for r in reorderer.due(1.0 + MIN_WAIT_S)] == [
        (None, None), (None, b"h"), (b"h", None)]


async def test_the_buffer_recovers_a_lost_packet_of_a_call() -> None:
    said = voice(30)
    packets = packets_of(said, OpusEncoder())
    out = ReceivedAudio()
    buffer = ReceiveBuffer(out)
    for index, packet in enumerate(packets):
        if index != LOST:
            buffer.add(SimpleNamespace(sequence_number=900 + index, timestamp=3_000 + index * FRAME, _data=packet))
    frames = [await asyncio.wait_for(out.recv(), 1.0) for _ in range(len(packets))]
    decoded = np.concatenate([frame.to_ndarray().reshape(-1) for frame in frames])
    assert buffer.decoder.recovered == 1 and likeness(said, decoded) > 0.8


def test_the_description_says_opus_takes_inband_fec() -> None:
    bare = "v=0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 96 0\r\na=rtpmap:96 opus/48000/2\r\na=rtpmap:0 PCMU/8000\r\n"
    assert with_inband_fec(bare).split("\r\n")[3] == "a=fmtp:96 useinbandfec=1"
    with_fmtp = "m=audio 9 RTP 111\r\na=rtpmap:111 opus/48000/2\r\na=fmtp:111 minptime=10\r\n"
    assert "a=fmtp:111 minptime=10;useinbandfec=1\r\n" in with_inband_fec(with_fmtp)
    assert with_inband_fec(with_inband_fec(with_fmtp)) == with_inband_fec(with_fmtp)


def test_at_the_listening_rate_a_lost_packet_is_recovered_as_well() -> None:
    """The server decodes a call at 16 kHz (``DECODE_RATE``): the FEC copy is recovered there as at 48 kHz."""
    said = voice(30)
    packets = packets_of(said, OpusEncoder())
    step = RATE // DECODE_RATE
    frame, lookahead = FRAME // step, LOOKAHEAD // step
    at_listening_rate = said[::step]  # the voice's harmonics stay far under 8 kHz

    def likeness_when(recover: bool) -> float:
        decoder = ConcealingDecoder(DECODE_RATE)
        out = np.concatenate([f.to_ndarray().reshape(-1) for index, packet in enumerate(packets)
                              for f in decoder.decode(Release(index * FRAME, None if index == LOST else packet,
                                                              packets[index + 1] if index == LOST and recover
                                                              else None))])
        original = at_listening_rate[LOST * frame - lookahead:(LOST + 1) * frame - lookahead].astype(np.float64)
        return float(np.corrcoef(original, out[LOST * frame:(LOST + 1) * frame].astype(np.float64))[0, 1])

    recovered, concealed = likeness_when(True), likeness_when(False)
    assert recovered > 0.8 and recovered > concealed + 0.15, (recovered, concealed)
