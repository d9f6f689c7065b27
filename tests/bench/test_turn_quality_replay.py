"""The replay re-judges a dump the way the live classifier judged it: the spoken-command probability of one
language's model is never read as the other's."""

from __future__ import annotations

from typing import Any

from bargein.session.core.listening import keyword
from bench.quality.turn_quality_replay import judge

OVER_REPLY: dict[str, Any] = {"speech_ms": 700.0, "mean_probability": 0.9, "peak_probability": 0.99,
                              "level_above_floor_db": 25.0, "no_speech_prob": 0.05, "avg_logprob": -0.3,
                              "during_reply": True}


def _segment(transcript: str, command_probability: float | None) -> dict[str, Any]:
    """A dumped ``bargein.listen.segment`` heard over a reply, as the event carries it (no language)."""
    segment = dict(OVER_REPLY, transcript=transcript, words=len(transcript.split()))
    if command_probability is not None:
        segment["command_probability"] = command_probability
    return segment


def test_a_mandarin_command_is_not_kept_by_the_english_models_threshold() -> None:
    """等一下 over a reply cuts it (a Mandarin command); the Mandarin model's low probability under the event's
    shared key must not pass for the English model's "no command here"."""
    zh = keyword.load("zh")
    assert zh is not None
    assert judge(_segment("等一下", None)) == "query"
    assert judge(_segment("等一下", 0.01)) == "query"


def test_a_mandarin_backchannel_is_judged_by_the_mandarin_rules_and_model() -> None:
    """嗯嗯 over a reply is a backchannel (the reply goes on) unless the Mandarin model hears a command in it."""
    zh = keyword.load("zh")
    assert zh is not None
    assert judge(_segment("嗯嗯", None)) == "noise"
    assert judge(_segment("嗯嗯", zh.threshold / 2)) == "noise"
    assert judge(_segment("嗯嗯", min(1.0, zh.threshold + 0.1))) == "query"


def test_the_english_model_still_keeps_a_near_word_groan() -> None:
    """The English keep is untouched: "It hurts." under its threshold lets the reply go on, over it cuts."""
    en = keyword.load("en")
    assert en is not None
    assert judge(_segment("It hurts.", en.threshold / 5)) == "noise"
    assert judge(_segment("It hurts.", 0.99)) == "query"


def test_the_primed_recognition_is_replayed_at_its_loud_stretch_s_level() -> None:
    """A dump that carries the loud stretch's level (``loud_level_db``, ``loud_below_user_db``) re-judges the primed
    "Why?" there, as the live classifier did: 7 dB under the user's loud stretches is the room's; an older dump
    without them is judged at the user's words' level."""
    segment = dict(_segment("the council met on Tuesday", None), primed_transcript="Why?", primed_avg_logprob=-0.3,
                   primed_no_speech_prob=0.05, user_level_db=-20.0, below_user_db=1.0)
    assert judge(segment) == "query"  # the older dump: "why" at the words' level, 1 dB under the user
    assert judge(dict(segment, loud_level_db=-27.0, loud_below_user_db=7.0)) == "noise"
    assert judge(dict(segment, loud_level_db=-21.0, loud_below_user_db=1.0)) == "query"
