"""The family set: a fixed split of voices, mixes with a background talker, a telephone channel, Wilson intervals."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from bench.harness.turn_quality_families import wilson
from testdata.make_family_set import (
    PHONE_RATE,
    SPLIT_FILE,
    TALKER_BELOW_DB,
    TALKER_QUIET_S,
    place,
    split_families,
    telephone,
    texts_for,
)
from testdata.noise_sources import RATE, active_level_db
from testdata.voices import FAMILIES


def test_the_split_is_fixed_disjoint_and_names_real_families() -> None:
    table = json.loads(SPLIT_FILE.read_text())
    train, held_out = set(table["train"]), set(table["held_out"])
    assert train and held_out and not train & held_out
    assert train | held_out <= set(FAMILIES)
    assert "kokoro-heart" in train, "the project's own voice is what the old set was tuned on"
    assert {"asterisk-allison", "librivox"} <= held_out, "recorded speech is never fitted on"
    for split in ("train", "held_out"):
        _, talkers = split_families(split)
        assert set(talkers) <= train, "a held-out voice is never heard in training, not even in the background"


def test_recorded_families_speak_only_what_they_have() -> None:
    texts = texts_for(FAMILIES["asterisk-allison"])
    assert "Pause." in texts["command"] and "No." in texts["command"]
    assert all(len(t.split()) >= 4 for t in texts["query"])


def test_a_talker_sits_ten_db_under_the_user_and_falls_silent_before_the_end() -> None:
    t = np.arange(RATE) / RATE
    user = (0.1 * np.sin(2 * np.pi * 300 * t)).astype(np.float32)
    talker = (0.1 * np.sin(2 * np.pi * 1100 * np.arange(8 * RATE) / RATE)).astype(np.float32)
    audio, start, end, _ = place(user, np.random.default_rng(3), condition="talker", talker=talker, snr_db=None,
                              bed="pink")
    lead = round(2.0 * RATE)
    assert abs(start - 2.0) < 0.011 and abs(end - 3.0) < 0.011
    user_db = active_level_db(audio[lead:lead + RATE])
    talker_db = active_level_db(audio[RATE // 2:lead])
    assert abs((user_db - talker_db) - TALKER_BELOW_DB) < 4.5  # the user's level is drawn within ±4 dB
    assert active_level_db(audio[-round(TALKER_QUIET_S * RATE) + 10:]) < -70


def test_the_telephone_channel_is_8_khz_g711_and_band_limited() -> None:
    rng = np.random.default_rng(1)
    audio = (0.1 * rng.standard_normal(RATE)).astype(np.float32)
    for codec in ("audio/pcmu", "audio/pcma"):
        phone = telephone(audio, codec)
        assert len(phone) == PHONE_RATE
        spectrum = np.abs(np.fft.rfft(phone)) ** 2
        freqs = np.fft.rfftfreq(len(phone), 1 / PHONE_RATE)
        assert spectrum[freqs < 150].sum() < 0.05 * spectrum[(freqs > 500) & (freqs < 3000)].sum()


def test_wilson_intervals() -> None:
    low, high = wilson(198, 200)
    assert 0.96 < low < 0.975 and 0.995 < high <= 1.0
    low, high = wilson(0, 10)
    assert low == 0.0 and 0.27 < high < 0.29
    assert wilson(0, 0) == (0.0, 1.0)


@pytest.mark.skipif(shutil.which("espeak-ng") is None or shutil.which("flite") is None,
                    reason="needs espeak-ng and flite (scripts/setup.sh test)")
def test_synthetic_families_are_deterministic_by_seed() -> None:
    for name in ("espeak-us", "flite-slt"):
        family = FAMILIES[name]
        first = family.say("Stop it.", np.random.default_rng(4))
        again = family.say("Stop it.", np.random.default_rng(4))
        assert np.array_equal(first, again), name
        assert 0.3 < len(first) / RATE < 3.0 and active_level_db(first) > -40, name
