"""Is a short sound over the reply a spoken command ("stop", 停, 等一下) or not (a backchannel, a sigh, 嗯)?

The recogniser's transcript cannot always tell: Whisper base writes a lone 停 as 本, 冬 or 等 and a lone 嗯
as 冬 or 谢谢; Whisper tiny.en writes a sigh as "It hurts." and "Enough." as "I don't know.". Its encoder,
which has already run for the transcript, tells them apart better. The recogniser hands over its encoder
output averaged over the voiced stretch (:mod:`bargein.engines.transcribe.voiced_encoding`), and a
logistic regression fitted offline (``training/fit_keyword.py`` for Mandarin, ``training/fit_keyword_en.py``
for English) weighs it: standardise, dot product, squash. Each weights file (``keyword_<language>.json``
beside this module) says which voices it was fitted on and which were held out.

The two languages use it the opposite way round (:data:`MODELS`):

* **Mandarin adds a cut**: a segment the rules keep is cut when the model's probability reaches its
  threshold (a bare 停 the transcript lost);
* **English keeps the reply**: over a reply, a segment that only the recall-first interruption model
  (:mod:`bargein.session.core.listening.model`) would cut is let go on when the model, reading the encoding of
  the segment's loud stretch (the primed recognition's clip), scores it under its threshold: a groan or
  an "uh-huh" that the transcript turned into near words. The transcript rules still cut any command
  they spell.

Either way it judges only a segment that is short (the language's ``max_speech_ms``), clearly louder
than the room and not much quieter than the user's own turns (the thresholds of
:mod:`~bargein.session.core.listening.thresholds`). Pure, numpy only.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from bargein.session.core.listening.thresholds import (
    ENGLISH_COMMAND_MAX_SPEECH_MS,
    MANDARIN_COMMAND_MAX_SPEECH_MS,
    SPOKEN_COMMAND_MIN_LEVEL_DB,
    SPOKEN_COMMAND_MIN_SPEECH_MS,
    SPOKEN_COMMAND_QUIETER_THAN_USER_DB,
)
from bargein.values import Transcript

Role = Literal["adds_cuts", "keeps_reply"]


@dataclass(frozen=True)
class Packaged:
    """One language's spoken-command model: its weights file, what it decides, and how long a segment it judges."""

    path: Path
    role: Role
    max_speech_ms: float
    """Longer segments are sentences: the transcript decides those (a command there is a whole phrase)."""


MODELS = {
    "zh": Packaged(Path(__file__).with_name("keyword_zh.json"), "adds_cuts", MANDARIN_COMMAND_MAX_SPEECH_MS),
    "en": Packaged(Path(__file__).with_name("keyword_en.json"), "keeps_reply", ENGLISH_COMMAND_MAX_SPEECH_MS),
}
"""The languages that have a spoken-command model, and the longest segment each judges."""


class KeywordFileError(RuntimeError):
    """The weights file is malformed (refit with ``python -m training.fit_keyword`` or ``training.fit_keyword_en``)."""


@dataclass(frozen=True)
class KeywordModel:
    """Standardise, weigh, squash: P(the sound is a command) from a voiced encoding."""

    mean: npt.NDArray[np.float64]
    scale: npt.NDArray[np.float64]
    coef: npt.NDArray[np.float64]
    intercept: float
    threshold: float

    def probability(self, encoding: npt.ArrayLike) -> float | None:
        """How likely the sound is a command (0..1); ``None`` when the encoding is not this model's width or
        holds a value that is not a finite number (its probability would be NaN, and NaN keeps nothing)."""
        x = np.asarray(encoding, dtype=np.float64)
        if x.shape != self.coef.shape or not np.isfinite(x).all():
            return None
        z = float(((x - self.mean) / self.scale) @ self.coef + self.intercept)
        return 1.0 / (1.0 + math.exp(-max(min(z, 40.0), -40.0)))

    def to_json(self, **about: Any) -> str:
        """The weights file's text (``about``: what it was fitted on, what was held out)."""
        return json.dumps({"mean": self.mean.round(6).tolist(), "scale": self.scale.round(6).tolist(),
                           "coef": self.coef.round(6).tolist(), "intercept": round(self.intercept, 6),
                           "threshold": round(self.threshold, 4), **about}, indent=None) + "\n"


def from_json(text: str) -> KeywordModel:
    """Parse a weights file."""
    raw = json.loads(text)
    try:
        model = KeywordModel(np.array(raw["mean"], float), np.array(raw["scale"], float),
                             np.array(raw["coef"], float), float(raw["intercept"]), float(raw["threshold"]))
    except (KeyError, TypeError, ValueError) as error:
        raise KeywordFileError(f"a malformed spoken-command weights file: {error}") from error
    if not model.mean.shape == model.scale.shape == model.coef.shape or model.coef.ndim != 1:
        raise KeywordFileError("the spoken-command weights disagree in width")
    return model


@functools.cache
def load(code: str) -> KeywordModel | None:
    """The packaged model of language ``code`` (read once), ``None`` if it has none."""
    packaged = MODELS.get(code)
    return from_json(packaged.path.read_text()) if packaged is not None and packaged.path.is_file() else None


def spoken_command(transcript: Transcript | None, features: Mapping[str, Any],
                   role: Role = "adds_cuts") -> tuple[float, float] | None:
    """The model's probability that a segment heard over a reply is a command, and its threshold; ``None``
    when the model does not judge it (no model of this ``role`` for the transcript's language, no encoding,
    too long, too faint or too far under the user's own level). ``features``: the classifier's
    (``speech_ms``, levels)."""
    if transcript is None or not transcript.voiced_encoding:
        return None
    packaged = MODELS.get(transcript.language)
    if packaged is None or packaged.role != role:
        return None
    model = load(transcript.language)
    if model is None:
        return None
    speech_ms = float(features.get("speech_ms") or 0.0)
    level = features.get("user_level_above_floor_db", features.get("level_above_floor_db"))
    below_user = features.get("below_user_db")
    if (not SPOKEN_COMMAND_MIN_SPEECH_MS <= speech_ms <= packaged.max_speech_ms or level is None
            or float(level) < SPOKEN_COMMAND_MIN_LEVEL_DB
            or (below_user is not None and float(below_user) > SPOKEN_COMMAND_QUIETER_THAN_USER_DB)):
        return None
    probability = model.probability(transcript.voiced_encoding)
    return None if probability is None else (probability, model.threshold)
