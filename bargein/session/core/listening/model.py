"""The fitted interruption model: logistic regression over :mod:`bargein.session.core.listening.features`.

The weights live in ``weights.json`` beside this module, written by ``training/fit_listening.py`` from the
*training* voice families of the listening benchmark (``testdata/listening_split.json``); loading
needs numpy only. The file also says what it was fitted on and the threshold that was chosen there.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bargein.session.core.listening.features import NAMES, vector

WEIGHTS = Path(__file__).with_name("weights.json")


class ModelFileError(RuntimeError):
    """The weights file does not match the feature code (refit with ``training/fit_listening.py``)."""


@dataclass(frozen=True)
class InterruptionModel:
    """Standardise, weigh, squash: P(the segment is meant to interrupt)."""

    names: tuple[str, ...]
    mean: npt.NDArray[np.float64]
    scale: npt.NDArray[np.float64]
    coef: npt.NDArray[np.float64]
    intercept: float
    threshold: float

    def probability(self, fields: Mapping[str, Any]) -> float:
        """How likely the segment described by ``fields`` is an interruption (0..1)."""
        return self.probability_of(vector(fields))

    def probability_of(self, x: npt.NDArray[np.float64]) -> float:
        """The same, from a feature vector."""
        z = float(((x - self.mean) / self.scale) @ self.coef + self.intercept)
        return 1.0 / (1.0 + math.exp(-max(min(z, 40.0), -40.0)))

    def to_json(self, **about: Any) -> str:
        """The weights file's text (``about``: how and on what it was fitted)."""
        return json.dumps({"features": list(self.names), "mean": self.mean.round(6).tolist(),
                           "scale": self.scale.round(6).tolist(), "coef": self.coef.round(6).tolist(),
                           "intercept": round(self.intercept, 6), "threshold": round(self.threshold, 4),
                           **about}, indent=1) + "\n"


def from_json(text: str) -> InterruptionModel:
    """Parse a weights file; its feature list must be the code's."""
    raw = json.loads(text)
    names = tuple(raw["features"])
    if names != NAMES:
        raise ModelFileError(f"weights are for features {names}, the code computes {NAMES}: "
                             f"refit with python -m training.fit_listening")
    return InterruptionModel(names, np.array(raw["mean"], float), np.array(raw["scale"], float),
                             np.array(raw["coef"], float), float(raw["intercept"]), float(raw["threshold"]))


@functools.cache
def load() -> InterruptionModel:
    """The packaged model (read once)."""
    return from_json(WEIGHTS.read_text())
