"""The English spoken-command model: over a reply it lets the reply go on where only the recall-first model cut.

``testdata/keyword_vectors_en.json`` holds voiced encodings that ``training/command_encodings.py`` recorded from
held-out families of the listening set (Flite's slt, Festival's ked and HTS slt voices, in a room): each
case's loud stretch as Whisper tiny.en encoded it, with what the plain and the primed recognitions wrote.
The decisions on them are pinned here.
"""

from __future__ import annotations

import json
import shutil
from typing import Any

import numpy as np
import pytest

from bargein.session.core.listening.classifier import classify
from bargein.session.core.listening.keyword import MODELS, load, spoken_command
from bargein.session.core.listening.segment_stats import SegmentStats
from bargein.values import Transcript
from testdata import DATA_DIR
from testdata.make_family_set import SPLIT_FILE

RECORDED: dict[str, dict[str, Any]] = json.loads(
    (DATA_DIR / "keyword_vectors_en.json").read_text())
NOT_COMMANDS = sorted(key for key, row in RECORDED.items() if row["category"] != "command")
COMMANDS = sorted(key for key, row in RECORDED.items() if row["category"] == "command")


def _stats(speech_ms: float, level_db: float = -20.0) -> SegmentStats:
    stats = SegmentStats()
    for _ in range(int(speech_ms / 32)):
        stats.add(0.95, level_db, 32.0)
    return stats


def _heard(row: dict[str, Any], *, encoded: bool = True) -> tuple[Transcript, Transcript]:
    """The plain recognition and the primed one of the loud stretch (with its encoding, or without)."""
    plain = Transcript(row["plain"], avg_logprob=-0.6, no_speech_prob=0.1)
    primed = Transcript(row["primed"], avg_logprob=row["primed_avg_logprob"], no_speech_prob=0.1,
                        voiced_encoding=tuple(row["encoding"]) if encoded else ())
    return plain, primed


def _over_reply(row: dict[str, Any], *, encoded: bool = True) -> Any:
    plain, primed = _heard(row, encoded=encoded)
    return classify(_stats(row["speech_ms"]), plain, during_reply=True, noise_floor_db=-60, primed=primed)


def test_the_packaged_model_reads_tiny_en_encodings_fitted_on_training_families_only() -> None:
    model = load("en")
    assert model is not None and model.coef.shape == (384,)
    about = json.loads(MODELS["en"].path.read_text())
    split = json.loads(SPLIT_FILE.read_text())
    assert about["fitted_on"] == split["train"] and about["held_out"] == split["held_out"]
    assert all(any(key.startswith(family) for family in split["held_out"]) for key in RECORDED)


@pytest.mark.parametrize("key", NOT_COMMANDS)
def test_a_sound_the_recogniser_turned_into_words_lets_the_reply_go_on(key: str) -> None:
    row = RECORDED[key]
    without = _over_reply(row, encoded=False)
    assert without.decision == "query", "the recall-first model alone cuts it: the case this model is for"
    verdict = _over_reply(row)
    assert verdict.decision == "noise", (row["text"], row["primed"], verdict.reasons)
    assert "spoken-command model hears no command" in verdict.reasons[0]
    assert verdict.features["command_probability"] < load("en").threshold  # type: ignore[union-attr]


@pytest.mark.parametrize("key", COMMANDS)
def test_a_command_the_recogniser_misheard_still_cuts(key: str) -> None:
    row = RECORDED[key]
    verdict = _over_reply(row)
    assert verdict.decision == "query", (row["text"], row["primed"], verdict.reasons)
    assert verdict.features["command_probability"] >= load("en").threshold  # type: ignore[union-attr]


@pytest.mark.parametrize("plain_text", ["Stop.", "It's tough."])
def test_a_command_word_cuts_whatever_the_encoding_says(plain_text: str) -> None:
    """In either recognition: "Stop." at -0.8 (issue 10's case), or only in the primed one."""
    not_command = RECORDED[NOT_COMMANDS[0]]  # an encoding the model scores "no command"
    plain = Transcript(plain_text, avg_logprob=-0.8, no_speech_prob=0.2)
    primed = Transcript("Stop.", avg_logprob=-0.8, no_speech_prob=0.2,
                        voiced_encoding=tuple(not_command["encoding"]))
    verdict = classify(_stats(384), plain, during_reply=True, noise_floor_db=-60, primed=primed)
    assert verdict.decision == "query" and "'stop'" in verdict.reasons[0], verdict.reasons
    assert verdict.features["command_probability"] < load("en").threshold  # type: ignore[union-attr]


def test_only_the_primed_recognition_s_encoding_counts() -> None:
    """The plain recognition's clip holds the room as well as the user: its encoding is never read."""
    row = RECORDED[NOT_COMMANDS[0]]
    plain = Transcript(row["plain"], avg_logprob=-0.6, no_speech_prob=0.1, voiced_encoding=tuple(row["encoding"]))
    verdict = classify(_stats(row["speech_ms"]), plain, during_reply=True, noise_floor_db=-60)
    assert verdict.decision == "query" and "command_probability" not in verdict.features


def test_the_model_judges_only_short_loud_english_sounds_and_only_to_keep_the_reply() -> None:
    row = RECORDED[NOT_COMMANDS[0]]
    _, primed = _heard(row)
    loud = {"speech_ms": 480.0, "level_above_floor_db": 40.0}
    assert spoken_command(primed, loud, "keeps_reply") is not None
    assert spoken_command(primed, loud) is None  # English never adds a cut
    assert spoken_command(primed, {**loud, "speech_ms": MODELS["en"].max_speech_ms + 100}, "keeps_reply") is None
    assert spoken_command(primed, {**loud, "level_above_floor_db": 5.0}, "keeps_reply") is None
    wider = Transcript("Okay.", voiced_encoding=(0.0,) * 512)  # Whisper base's width: not this model's
    assert spoken_command(wider, loud, "keeps_reply") is None
    long_segment = classify(_stats(MODELS["en"].max_speech_ms + 200), *_heard(row)[:1], during_reply=True,
                            noise_floor_db=-60, primed=primed)
    assert "command_probability" not in long_segment.features
    alone = classify(_stats(row["speech_ms"]), _heard(row)[0], during_reply=False, noise_floor_db=-60)
    assert "command_probability" not in alone.features


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("flite") is None, reason="needs flite (scripts/setup.sh test)")
def test_tiny_en_hands_over_the_encoding_that_tells_a_held_out_stop_from_a_sneeze() -> None:
    import soxr

    from bargein.engines.transcribe.whisper_asr import load_whisper
    from bargein.engines.transcribe.whisper_decode import PARTIAL
    from bargein.session.core.listening.over_reply import vocabulary_prompt
    from testdata.make_family_set import RATE
    from testdata.voices import FAMILIES

    core = load_whisper("tiny.en", warm_up=False).core
    model = load("en")
    assert model is not None
    heard = {}
    for text in ("Stop.", "Achoo!"):  # Flite's slt voice: a speaker the model was never fitted on
        sound = soxr.resample(FAMILIES["flite-slt"].say(text, np.random.default_rng(7)), RATE, 16_000)
        clip = np.concatenate([np.zeros(4_800, np.float32), sound, np.zeros(4_800, np.float32)]).astype(np.float32)
        final = core.transcribe(clip, language="en", prompt=vocabulary_prompt("en"))
        assert len(final.voiced_encoding) == 384
        assert core.transcribe(clip, language="en", options=PARTIAL).voiced_encoding == ()
        heard[text] = (final.text, model.probability(final.voiced_encoding))
    assert heard["Stop."][1] >= model.threshold > heard["Achoo!"][1], heard  # type: ignore[operator]
