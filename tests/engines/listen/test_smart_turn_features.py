"""Smart Turn features: the shortcut over padding-only frames gives what the full-window recipe gives."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from bargein.engines.listen.smart_turn import MEL_FRAMES, WINDOW_SAMPLES, SmartTurnModel
from tests.engines.listen.test_smart_turn import _flite

RATE = 16_000


def _reference(audio: np.ndarray) -> np.ndarray:
    """The straightforward recipe: pad, normalise the whole window, faster-whisper's log-mel on all of it."""
    from faster_whisper.feature_extractor import FeatureExtractor

    window = np.zeros(WINDOW_SAMPLES, dtype=np.float32)
    tail = np.asarray(audio, dtype=np.float32)[-WINDOW_SAMPLES:]
    if len(tail):
        window[WINDOW_SAMPLES - len(tail):] = tail
    window = (window - window.mean()) / np.sqrt(window.var() + 1e-7)
    mel = FeatureExtractor(feature_size=80, chunk_length=8)(window, padding=0)
    return np.asarray(mel, dtype=np.float32)[:, :MEL_FRAMES]


def _tone(seconds: float, hertz: float, offset: float = 0.0) -> np.ndarray:
    time = np.arange(round(seconds * RATE)) / RATE
    return (0.3 * np.sin(2 * np.pi * hertz * time) + offset).astype(np.float32)


def _clips() -> Iterator[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(7)
    yield "empty", np.zeros(0, np.float32)
    for seconds in (0.1, 1, 3, 7.99, 8, 12):
        samples = round(seconds * RATE)
        yield f"silence {seconds} s", np.zeros(samples, np.float32)
        yield f"noise {seconds} s", (0.1 * rng.standard_normal(samples)).astype(np.float32)
        yield f"tone {seconds} s", _tone(seconds, 220)
        yield f"tone with offset {seconds} s", _tone(seconds, 1000, offset=0.2)
    # lengths around the frames' edges: audio starting under the first frames, the mirror, one hop apart
    for samples in (1, 160, 199, 200, 201, 360, 361, 520, 521, 4000):
        yield f"noise filling all but {samples} samples", (0.1 * rng.standard_normal(WINDOW_SAMPLES - samples)).astype(
            np.float32)
        yield f"noise of {samples} samples", (0.1 * rng.standard_normal(samples)).astype(np.float32)


CLIPS = list(_clips())


@pytest.fixture(scope="module")
def model() -> SmartTurnModel:
    return SmartTurnModel()


@pytest.mark.slow
@pytest.mark.parametrize(("name", "audio"), CLIPS, ids=[name for name, _ in CLIPS])
def test_features_equal_the_full_window_recipe(model: SmartTurnModel, name: str, audio: np.ndarray) -> None:
    features = model.features(audio)
    assert features.shape == (80, MEL_FRAMES)
    assert features.dtype == np.float32
    assert np.abs(features - _reference(audio)).max() <= 1e-5, name


@pytest.mark.slow
def test_speech_features_and_probabilities_equal_the_full_window_recipe(model: SmartTurnModel) -> None:
    whole = _flite("I want to book a table for four people.")
    cut = whole[: int(len(whole) * 0.62)]
    long = np.concatenate([np.full(WINDOW_SAMPLES, 0.3, np.float32), whole])  # fills the window
    tail = np.zeros(3200, np.float32)
    clips = [np.concatenate([whole, tail]), np.concatenate([cut, tail]), long, whole[:RATE]]
    for clip in clips:
        assert np.abs(model.features(clip) - _reference(clip)).max() <= 1e-5
    expected = model.predict(np.stack([_reference(clip) for clip in clips]))
    assert np.abs(model.probabilities(clips) - expected).max() <= 1e-5
