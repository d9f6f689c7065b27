"""The frame sampler on real decoded frames: newest at each turn, the speaking rate, duplicates, bounds."""

from __future__ import annotations

from bargein.see.frames import Frame, decode_frame
from bargein.see.sampler import FrameSampler, SamplerLimits
from tests.support.pictures import encode, scene, sign


def frame(seed: int, at_ms: float) -> Frame:
    return decode_frame(encode(scene(seed), "JPEG"), at_ms)


def test_the_newest_frame_is_the_turns_when_the_user_did_not_speak_over_the_camera() -> None:
    sampler = FrameSampler()
    for k in range(5):
        sampler.offer(frame(k, k * 100.0))
    taken = sampler.take_turn()
    assert [f.at_ms for f in taken] == [400.0]


def test_a_repeated_scene_is_dropped_as_a_duplicate() -> None:
    sampler = FrameSampler()
    first = decode_frame(encode(sign("EXIT"), "JPEG"), 0.0)
    again = decode_frame(encode(sign("EXIT"), "JPEG", quality=60), 900.0)
    assert sampler.offer(first) == "kept"
    assert sampler.offer(again) == "duplicate"
    assert sampler.newest is first


def test_while_the_user_speaks_at_most_the_speaking_rate_is_kept() -> None:
    sampler = FrameSampler(SamplerLimits(speaking_fps=1.5, max_frames=100))
    sampler.speech_started()
    outcomes = [sampler.offer(frame(k, k * 100.0)) for k in range(30)]  # 10 fps for 3 s
    sampler.speech_stopped()
    kept = sampler.take_turn()
    assert outcomes.count("kept") == 5  # at 0, 700, 1400, 2100, 2800 ms: one each 667 ms or more
    assert [f.at_ms for f in kept] == [0.0, 700.0, 1400.0, 2100.0, 2800.0, 2900.0]  # and the newest at the turn


def test_a_long_turn_is_thinned_to_a_fixed_number_spread_over_it() -> None:
    sampler = FrameSampler(SamplerLimits(speaking_fps=1.0, max_frames=8))
    sampler.speech_started()
    for k in range(120):  # two minutes at 1 fps, each a new scene
        sampler.offer(frame(k % 40, k * 1000.0))
    kept = sampler.take_turn()
    assert 2 <= len(kept) <= 8
    times = [f.at_ms for f in kept]
    assert times == sorted(times) and times[-1] == 119_000.0
    assert times[0] <= 60_000.0  # the clip still reaches back over the first half of the turn
    assert sampler.counts["thinned"] > 0


def test_the_bytes_bound_holds_whatever_is_sent() -> None:
    one = frame(1, 0.0).nbytes
    sampler = FrameSampler(SamplerLimits(speaking_fps=100.0, max_frames=50, max_bytes=3 * one))
    sampler.speech_started()
    for k in range(40):
        sampler.offer(frame(k, k * 20.0))
        assert sampler.nbytes <= 3 * one
