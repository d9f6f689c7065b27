"""The reply track encodes each frame itself as it is due; a cut resets its encoder: silence from the next packet."""

from __future__ import annotations

import numpy as np
import pytest

from bargein.server.webrtc.opus import FecDecoder, load_libopus
from bargein.server.webrtc.tracks import OPUS_FRAME_SAMPLES, SEND_RATE, ReplyAudioTrack

AUDIBLE = 33
"""-60 dBFS, as the benchmark counts a reply packet audible."""


@pytest.fixture
def decoder() -> FecDecoder:
    lib = load_libopus()
    if lib is None:
        pytest.skip("no libopus to load")
    return FecDecoder(lib)


async def test_each_frame_is_encoded_as_it_is_sent_and_a_cut_leaves_the_encoder_at_once(decoder: FecDecoder) -> None:
    track = ReplyAudioTrack(lambda _response: None, lambda _response: None)
    tone = (8000 * np.sin(2 * np.pi * 220 * np.arange(SEND_RATE // 5) / SEND_RATE)).astype(np.int16)
    track.play("resp_1", "item_1", 0.0, tone)  # 200 ms: ten frames
    peaks = []
    for index in range(10):
        packet = await track.recv()
        assert packet.pts == index * OPUS_FRAME_SAMPLES  # the RTP clock runs on through the cut
        if index == 4:
            track.clear()
        samples = decoder.decode(bytes(packet))
        assert samples is not None and len(samples) == OPUS_FRAME_SAMPLES  # one packet a frame, none held back
        peaks.append(int(np.abs(samples.astype(np.int32)).max()))
    assert min(peaks[1:5]) > 4000  # the tone
    # after the cut (packet 5 on) only the codec's look-ahead (6.5 ms of the last frame sent) rings in the first
    # packet; from the next one on, silence (without the reset, the next still decodes above -60 dBFS)
    assert all(peak <= AUDIBLE for peak in peaks[6:]), peaks


async def test_without_a_cut_the_reply_plays_through(decoder: FecDecoder) -> None:
    track = ReplyAudioTrack(lambda _response: None, lambda _response: None)
    tone = (8000 * np.sin(2 * np.pi * 220 * np.arange(SEND_RATE // 5) / SEND_RATE)).astype(np.int16)
    track.play("resp_1", "item_1", 0.0, tone)
    peaks = []
    for _ in range(8):
        samples = decoder.decode(bytes(await track.recv()))
        assert samples is not None
        peaks.append(int(np.abs(samples.astype(np.int32)).max()))
    assert min(peaks[1:8]) > 4000
