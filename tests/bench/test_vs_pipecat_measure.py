"""The client-side arithmetic of bench/latency/vs_pipecat.py on scripted arrivals (no servers, no clock)."""

from __future__ import annotations

import numpy as np

from bench.harness.realtime_harness import WIRE_RATE
from bench.latency.vs_pipecat import _paired
from bench.latency.vs_pipecat_episode import Episode, Link, _barge


def pcm(ms: float, *, loud_from_ms: float | None = None) -> bytes:
    """``ms`` of 24 kHz pcm16, silent, or loud from ``loud_from_ms`` on."""
    samples = np.zeros(int(ms * WIRE_RATE / 1000), np.int16)
    if loud_from_ms is not None:
        samples[int(loud_from_ms * WIRE_RATE / 1000):] = 3000
    return samples.tobytes()


def test_heard_time_follows_a_playback_queue_and_a_flush() -> None:
    link = Link()
    link.take_audio(pcm(1000, loud_from_ms=100), at=10.0)  # a big delta: plays 10.0 .. 11.0
    link.take_audio(pcm(40, loud_from_ms=0), at=10.2)  # arrives early: queued behind it
    assert link.audio[0][2] is not None and abs(link.audio[0][2] - 10.1) < 1e-6
    assert link.audio[1][2] is not None and abs(link.audio[1][2] - 11.0) < 1e-6
    link.take_signal(10.5)  # the client flushes: the next chunk plays on arrival
    link.take_audio(pcm(40, loud_from_ms=20), at=12.0)
    assert link.audio[2][2] is not None and abs(link.audio[2][2] - 12.02) < 1e-6
    assert link.audible_after(10.2) == (12.0, link.audio[2][2])
    link.take_audio(pcm(40), at=13.0)
    assert link.audio[3][2] is None  # silence never counts as first audio


def test_barge_in_stop_is_the_later_of_signal_and_the_last_old_audio() -> None:
    link = Link()
    link.take_signal(0.5)  # the first turn's speech_started: before clip B, ignored
    link.take_audio(pcm(40, loud_from_ms=0), at=1.00)  # before the onset: not counted
    link.take_audio(pcm(40, loud_from_ms=0), at=1.05)
    link.take_signal(1.08)
    link.take_audio(pcm(40, loud_from_ms=0), at=1.12)  # still coming after the signal
    link.take_audio(pcm(40, loud_from_ms=0), at=9.0)  # after clip B ended: the next reply
    episode = Episode("x", "a+b")
    _barge(link, episode, clip_at=0.9, onset_at=1.0, end_at=4.0)
    assert episode.signal_ms is not None and abs(episode.signal_ms - 80) < 1e-6
    assert episode.stop_ms is not None and abs(episode.stop_ms - 120) < 1e-6
    assert abs(episode.audio_after_signal_ms - 40) < 1e-6


def test_barge_in_without_a_signal_before_the_end_is_missing() -> None:
    link = Link()
    link.take_signal(5.0)
    episode = Episode("x", "a+b")
    _barge(link, episode, clip_at=0.9, onset_at=1.0, end_at=4.0)
    assert episode.signal_ms is None and episode.stop_ms is None


def test_paired_differences_match_round_clip_and_turn() -> None:
    bargein = Episode("bargein", "a+b", 0, [1000.0, 1200.0])
    pipecat = Episode("pipecat", "a+b", 0, [1500.0, None])
    lonely = Episode("bargein", "c+d", 1, [900.0, 900.0])
    assert _paired([pipecat, bargein, lonely]) == [500.0]
