"""The reply track encodes each frame itself as it is due; a cut resets its encoder: silence from the next packet."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from bargein.server.webrtc import tracks
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



@pytest.fixture
def slow_ticks(monkeypatch: pytest.MonkeyPatch) -> float:
    """The track's clock ticking once a second, so that what is early or on time is plain on a loaded machine."""
    monkeypatch.setattr(tracks, "FRAME_S", 1.0)
    return 1.0


async def test_the_packet_after_a_cut_leaves_at_once_and_the_ticks_after_it_keep_their_times(slow_ticks: float) -> None:
    track = ReplyAudioTrack(lambda _response: None, lambda _response: None)
    track.play("resp_1", "item_1", 0.0, np.full(SEND_RATE, 8000, np.int16))
    await track.recv()  # the first tick: at once
    waiting = asyncio.ensure_future(track.recv())  # the second: a second later
    await asyncio.sleep(0.1)
    assert not waiting.done()
    track.clear()
    await asyncio.wait_for(waiting, 0.5)  # the packet after the cut leaves now
    third = asyncio.ensure_future(track.recv())
    await asyncio.sleep(0.5)
    assert not third.done(), "the tick after the early packet moved"
    await asyncio.wait_for(third, 2 * slow_ticks)


async def test_a_clear_with_nothing_playing_moves_no_tick(slow_ticks: float) -> None:
    track = ReplyAudioTrack(lambda _response: None, lambda _response: None)
    await track.recv()
    waiting = asyncio.ensure_future(track.recv())
    await asyncio.sleep(0.1)
    track.clear()
    await asyncio.sleep(0.3)
    assert not waiting.done()
    await asyncio.wait_for(waiting, 2 * slow_ticks)


async def test_a_cut_lets_the_waiting_sender_take_the_packet_after_it_before_the_caller_goes_on(
        slow_ticks: float) -> None:
    track = ReplyAudioTrack(lambda _response: None, lambda _response: None)
    track.play("resp_1", "item_1", 0.0, np.full(SEND_RATE, 8000, np.int16))
    await track.recv()
    waiting = asyncio.ensure_future(track.recv())  # the sender, waiting for its tick a second away
    await asyncio.sleep(0.1)
    last = await track.cut()
    assert waiting.done(), "the packet after the cut was taken before the barge-in's own work"
    assert last is not None and last.response_id == "resp_1"
    assert not track.holds_audio
    idle = asyncio.ensure_future(track.recv())  # no audio queued: a cut with nothing playing waits for nothing
    await asyncio.sleep(0.1)
    assert await track.cut() is None
    assert not idle.done(), "nothing was playing: the tick stays"
    idle.cancel()


def _tone() -> np.ndarray:
    return (8000 * np.sin(2 * np.pi * 220 * np.arange(SEND_RATE // 2) / SEND_RATE)).astype(np.int16)  # 500 ms


async def test_a_hold_sends_nothing_of_the_reply_and_a_release_plays_on_from_the_sample_it_held_at(
        decoder: FecDecoder) -> None:
    track = ReplyAudioTrack(lambda _response: None, lambda _response: None)
    track.play("resp_1", "item_1", 0.0, _tone())
    peaks, reached = [], []
    for index in range(14):
        if index == 4:
            track.hold("resp_1")
        if index == 8:
            track.release("resp_1")
        samples = decoder.decode(bytes(await track.recv()))
        assert samples is not None
        peaks.append(int(np.abs(samples.astype(np.int32)).max()))
        assert track.on_wire is not None
        reached.append(track.on_wire.item_ms)
    assert min(peaks[1:4]) > 4000
    # packet 4 (the first after the hold) rings with the codec's look-ahead only; then nothing while it is held
    assert all(peak <= AUDIBLE for peak in peaks[5:8]), peaks
    assert reached[3:8] == [80.0] * 5, "nothing of the reply went on the wire while held"
    # it plays on from the held sample, the 7.5 ms the reset codec never coded first: none lost
    assert reached[8:] == [92.5, 112.5, 132.5, 152.5, 172.5, 192.5]
    assert track.on_wire is not None and track.on_wire.start_ms == 0.0, "no resume's jump"
    assert min(peaks[9:]) > 4000, peaks
    assert track.held_s > 0.0


async def test_the_packet_after_a_hold_leaves_at_once(slow_ticks: float) -> None:
    track = ReplyAudioTrack(lambda _response: None, lambda _response: None)
    track.play("resp_1", "item_1", 0.0, np.full(SEND_RATE, 8000, np.int16))
    await track.recv()
    waiting = asyncio.ensure_future(track.recv())  # the sender, waiting for its tick a second away
    await asyncio.sleep(0.1)
    track.hold("resp_1")
    await asyncio.wait_for(waiting, 0.5)
    assert track.holds("resp_1"), "the held audio stays queued"


async def test_a_cut_after_a_hold_reports_where_the_hold_stopped_and_ends_it() -> None:
    """The pause that confirms a hold cuts the track: what the caller heard is what went out before the hold."""
    track = ReplyAudioTrack(lambda _response: None, lambda _response: None)
    track.play("resp_1", "item_1", 0.0, _tone())
    for _ in range(3):
        await track.recv()
    track.hold("resp_1")
    for _ in range(3):
        await track.recv()
    last = await track.cut()
    assert last is not None and (last.response_id, last.item_ms) == ("resp_1", 60.0)
    track.play("resp_2", "item_2", 0.0, _tone())  # the next reply is not held
    await track.recv()
    assert track.on_wire is not None and (track.on_wire.response_id, track.on_wire.item_ms) == ("resp_2", 20.0)


async def test_a_hold_of_a_reply_not_yet_on_the_wire_lets_the_tail_of_another_play_on(slow_ticks: float) -> None:
    track = ReplyAudioTrack(lambda _response: None, lambda _response: None)
    track.play("resp_1", "item_1", 0.0, _tone())
    await track.recv()
    waiting = asyncio.ensure_future(track.recv())
    await asyncio.sleep(0.1)
    track.hold("resp_2")  # a new reply, none of its audio sent yet
    track.play("resp_2", "item_2", 0.0, _tone())
    await asyncio.sleep(0.2)
    assert not waiting.done(), "nothing of the held reply was playing: no early packet, no reset"
    await asyncio.wait_for(waiting, 2 * slow_ticks)
    assert track.on_wire is not None and track.on_wire.response_id == "resp_1"
    track.release("resp_2")
