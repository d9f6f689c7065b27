"""The memory latency bench's figures: the p50s (issue 46's target) and the paired per-turn differences."""

from __future__ import annotations

import math

from bench.harness.session_observer import TurnResult
from bench.quality.memory_latency import Session, Turn, figures, turns_of


def _session(round_index: int, memory: bool, first_audio: list[float], endpoints: list[float]) -> Session:
    pairs = enumerate(zip(first_audio, endpoints, strict=True))
    return Session(round_index, memory, tuple(Turn(f"clip{i}", ms, end, ms - end) for i, (ms, end) in pairs))


def test_paired_differences_compare_the_same_clip_where_the_p50s_fall_between_two_groups() -> None:
    # the same clips, each condition's turns in two groups a second apart (the endpoint's 0.5 s and 1.5 s);
    # memory on took the long endpoint once more, so its p50 lands in the slow group
    sessions = [
        _session(0, True, [600, 1500, 700, 1510], [500, 1500, 500, 1500]),
        _session(0, False, [620, 1490, 690, 1530], [500, 1500, 500, 1500]),
        _session(1, False, [610, 1520, 680, 700], [500, 1500, 500, 500]),
        _session(1, True, [630, 1500, 700, 1520], [500, 1500, 500, 1500]),
    ]
    result = figures(sessions)
    assert result.p50_on == (1500 + 700) / 2 and result.p50_off == (690 + 700) / 2
    assert result.change > 50 and math.isclose(result.ratio, result.p50_on / result.p50_off)
    # pairs: round 0 on-off, round 1 on-off, position by position
    assert result.paired_ms == (-20, 10, 10, -20, 20, -20, 20, 820)
    assert result.paired_median_ms == 10
    assert (result.long_on, result.long_off) == (4, 3)
    assert result.paired_after_commit_ms == (-20, 10, 10, -20, 20, -20, 20, -180)


def test_turns_of_different_clips_or_without_first_audio_are_not_paired() -> None:
    on = Session(0, True, (Turn("a", 600.0), Turn("b", None), Turn("c", 900.0)))
    off = Session(0, False, (Turn("a", 500.0), Turn("b", 700.0), Turn("x", 800.0)))
    assert figures([on, off]).paired_ms == (100.0,)


def test_each_turn_takes_its_own_replys_ledger() -> None:
    found = [TurnResult(0, "a", response_id="r1", first_audio_ms=650.0), TurnResult(1, "b", first_audio_ms=None)]
    metrics = [{"response_id": "r1", "endpoint_ms": 510.0, "first_audio_ms": 640.0}, {"speech_start_ms": 1.0}]
    assert turns_of(found, metrics) == (Turn("a", 650.0, 510.0, 130.0), Turn("b", None, None, None))
