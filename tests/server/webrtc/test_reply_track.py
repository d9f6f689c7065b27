"""The reply track's frames as aiortc's Opus encoder takes them: at its own rate, so nothing waits in its resampler."""

from __future__ import annotations

import numpy as np
from aiortc.codecs.opus import OpusEncoder

from bargein.server.webrtc.tracks import OPUS_FRAME_SAMPLES, OPUS_RATE, SEND_RATE, ReplyAudioTrack


async def test_each_frame_is_encoded_as_it_is_sent_and_a_cut_leaves_the_encoder_at_once() -> None:
    track = ReplyAudioTrack(lambda _response: None, lambda _response: None)
    tone = (8000 * np.sin(2 * np.pi * 220 * np.arange(SEND_RATE // 10) / SEND_RATE)).astype(np.int16)
    track.play("resp_1", "item_1", 0.0, tone)  # 100 ms: five frames
    encoder = OpusEncoder()
    sizes = []
    for index in range(8):
        frame = await track.recv()
        assert frame.sample_rate == OPUS_RATE and frame.samples == OPUS_FRAME_SAMPLES
        if index == 2:
            assert np.abs(frame.to_ndarray()).max() > 6000  # the tone, upsampled
            track.clear()
        payloads, _ = encoder.encode(frame)
        sizes.append([len(payload) for payload in payloads])
    assert all(len(packets) == 1 for packets in sizes), "a frame was held back in the encoder's resampler"
    # after the cut (frame 3 on), only the codec's own overlap rings on for one packet, then silence
    assert sizes[3][0] > 24 and all(packets[0] <= 24 for packets in sizes[5:]), sizes
