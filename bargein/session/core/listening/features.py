"""The feature vector of one segment, from what the listening classifier already measures.

The words are the user's (the loud words of the segment, ``user_transcript``, when the recogniser gave
word timings; see :mod:`bargein.session.core.listening.user_words`), and so is the level.

The input is the ``features`` mapping of a listening decision (the body of a ``bargein.listen.segment``
event): the VAD's view (speech duration, mean and peak speech probability), the level above the
session's noise floor, and the recogniser's (transcript, no-speech probability, average
log-probability). The same function turns a benchmark dump into training rows and a live segment into
the model's input, so what is fitted is what runs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from bargein.languages import fold
from bargein.session.core.listening.lexicon import (
    BACKCHANNELS,
    COMMAND_WORDS,
    QUESTION_WORDS,
    sounds_like_command,
    spells_a_sound,
)

_WORDS = re.compile(r"[^\W_]+(?:['’-][^\W_]+)*")

NAMES: tuple[str, ...] = (
    "log_speech_ms", "mean_probability", "level_above_floor_db", "log_words",
    "words_per_s", "no_speech_prob", "avg_logprob", "command_word", "question_word", "command_like",
    "only_backchannel", "starts_with_backchannel", "spells_a_sound", "question_mark", "no_words", "log_room_words",
    "whole_level_above_floor_db",
)
"""Feature names, in vector order (the weights file lists them too, and must match). The VAD's peak
probability is left out: real speech pins it at 0.99-1.0, so the model learnt a cliff from it."""


def words_of(text: str) -> list[str]:
    """Lower-case words in any script, punctuation dropped (after :func:`fold`)."""
    return _WORDS.findall(fold(text).lower())


def finite(value: Any) -> float | None:
    """A decision field as a number, ``None`` when it is missing or not finite. A NaN passes no comparison, so
    read as it stands it would slip past every rule and make the model's probability NaN (a cut)."""
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _clipped(value: Any, low: float, high: float) -> float | None:
    """A field clipped to ``[low, high]`` (an infinite one at its end), ``None`` when missing or NaN."""
    if value is None or math.isnan(float(value)):
        return None
    return min(max(float(value), low), high)


def vector(fields: Mapping[str, Any]) -> npt.NDArray[np.float64]:
    """The feature vector of one segment's decision fields (see the module docstring). Its words are the loud
    words wherever they were placed, the user alone included, as the committed weights were fitted; the rules
    read the whole transcript of a user alone (:func:`bargein.session.core.listening.decide.user_text`)."""
    placed = fields.get("user_transcript")
    text = fold(str(placed if placed is not None else fields.get("transcript") or ""))
    words = words_of(text)
    # a missing or NaN field reads as before: level 0 dB, no speech, log-probability -2, no-speech 1
    whole_level = _clipped(fields.get("level_above_floor_db"), -10.0, 50.0) or 0.0
    level = _clipped(fields.get("user_level_above_floor_db"), -10.0, 50.0)
    joined = " ".join(words)
    speech_ms = finite(fields.get("speech_ms")) or 0.0
    seconds = max(speech_ms, 100.0) / 1000
    logprob = _clipped(fields.get("avg_logprob"), -2.0, math.inf)
    no_speech = finite(fields.get("no_speech_prob"))
    values = {
        "log_speech_ms": math.log(max(speech_ms, 10.0)),
        "mean_probability": finite(fields.get("mean_probability")) or 0.0,
        "level_above_floor_db": whole_level if level is None else level,
        "log_words": math.log1p(len(words)),
        "words_per_s": min(len(words) / seconds, 15.0),
        "no_speech_prob": 1.0 if no_speech is None else no_speech,
        "avg_logprob": -2.0 if logprob is None else logprob,
        "command_word": float(any(w in COMMAND_WORDS for w in words)),
        "question_word": float(any(w in QUESTION_WORDS for w in words)),
        "command_like": float(sounds_like_command(words)),
        "only_backchannel": float(bool(words) and joined in BACKCHANNELS),
        "starts_with_backchannel": float(bool(words) and (words[0] in BACKCHANNELS
                                                          or " ".join(words[:2]) in BACKCHANNELS)),
        "spells_a_sound": float(spells_a_sound(words)),
        "question_mark": float(text.strip().endswith("?")),
        "no_words": float(not words),
        "log_room_words": math.log1p(max(finite(fields.get("room_words")) or 0.0, 0.0)),
        "whole_level_above_floor_db": whole_level,
    }
    return np.array([values[name] for name in NAMES], dtype=np.float64)
