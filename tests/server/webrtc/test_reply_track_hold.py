"""A hold after a short last frame: the reply's samples that frame coded are not played twice after the release."""

from __future__ import annotations

import numpy as np
import pytest

from bargein.server.webrtc.tracks import FRAME_SAMPLES, REPLAYED_S, SEND_RATE, ReplyAudioTrack

REPLAYED = int(REPLAYED_S * SEND_RATE)


@pytest.mark.parametrize(("last_ms", "put_back"), [
    (10.0, 0),  # 10 ms of silence after the reply's samples in its last frame: the codec coded all of them
    (15.0, REPLAYED - FRAME_SAMPLES // 4),  # 5 ms of silence: only the rest of the look-ahead held reply samples
    (20.0, REPLAYED),  # a whole frame of the reply: the whole look-ahead
])
async def test_a_hold_puts_back_only_the_reply_samples_the_codec_never_coded(last_ms: float, put_back: int) -> None:
    track = ReplyAudioTrack(lambda _response: None, lambda _response: None)
    samples = int((20.0 + last_ms) * SEND_RATE / 1000)
    track.play("resp_1", "item_1", 0.0, np.full(samples, 8000, np.int16))  # a reply whose speech runs short
    await track.recv()
    await track.recv()  # its last frame: ``last_ms`` of the reply, then silence
    track.hold("resp_1")
    assert track.queued_samples == put_back
    track.play("resp_1", "item_1", 20.0 + last_ms, np.full(SEND_RATE // 10, 8000, np.int16))  # its next words
    track.release("resp_1")
    await track.recv()
    assert track.on_wire is not None
    assert track.on_wire.item_ms == pytest.approx(20.0 + last_ms + 20.0 - 1000.0 * put_back / SEND_RATE), \
        "the frame after the release: what was put back, then the next words, no sample twice"
