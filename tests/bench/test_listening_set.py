"""The listening set's generator: seeded sounds, mixes at the SNR their labels claim, true sound bounds."""

from __future__ import annotations

import numpy as np
import pytest

from testdata.make_listening_set import Voice, case_seed, mix
from testdata.noise_sources import BACKGROUNDS, NOISES, RATE, active_bounds, active_level_db


def test_every_sound_is_seeded_audible_and_as_long_as_asked() -> None:
    for name, make in {**NOISES, **BACKGROUNDS}.items():
        first = make(np.random.default_rng(5), 1.2)
        again = make(np.random.default_rng(5), 1.2)
        other = make(np.random.default_rng(6), 1.2)
        assert len(first) == round(1.2 * RATE), name
        assert np.array_equal(first, again), f"{name} is not deterministic"
        assert not np.array_equal(first, other), f"{name} ignores its seed"
        assert active_level_db(first) > -60, f"{name} is silent"


def test_case_seeds_are_stable_and_distinct() -> None:
    assert case_seed(7, "seg-tts00-clean") == case_seed(7, "seg-tts00-clean")
    assert case_seed(7, "seg-tts00-clean") != case_seed(7, "seg-tts00-5db") != case_seed(8, "seg-tts00-clean")


def test_a_mix_has_the_snr_its_label_claims_and_knows_where_the_sound_is() -> None:
    t = np.arange(RATE) / RATE
    beep = (0.1 * np.sin(2 * np.pi * 700 * t)).astype(np.float32)
    for snr in (20.0, 10.0, 5.0):
        audio, start, end = mix(beep, "white", snr, np.random.default_rng(1), lead_s=2.0, tail_s=1.0)
        assert len(audio) == 4 * RATE
        assert abs(start - 2.0) <= 0.011 and abs(end - 3.0) <= 0.011
        bed_db = 20 * np.log10(np.std(np.concatenate([audio[: 2 * RATE], audio[3 * RATE:]])))
        beep_db = 10 * np.log10(np.mean(np.square(audio[2 * RATE: 3 * RATE], dtype=np.float64)))
        # the sound's window holds sound plus bed: its power is 10*log10(10**(snr/10) + 1) above the bed
        assert abs((beep_db - bed_db) - 10 * np.log10(10 ** (snr / 10) + 1)) < 0.3, snr
    clean, _, _ = mix(beep, "pink", None, np.random.default_rng(1), lead_s=1.0, tail_s=0.0)
    assert 20 * np.log10(np.std(clean[: RATE // 2])) < -70  # "clean" is a faint hiss, not a bed


def test_active_bounds_ignore_quiet_lead_in_and_tail() -> None:
    audio = np.zeros(3 * RATE, np.float32)
    audio[RATE // 2: RATE] = 0.2
    audio[: RATE // 2] = 1e-4
    start, end = active_bounds(audio)
    assert abs(start - 0.5) < 0.011 and abs(end - 1.0) < 0.011


@pytest.mark.slow
def test_the_tts_voice_says_the_same_thing_the_same_way_every_time() -> None:
    voice = Voice(seed=7)
    first = voice.say("Set a timer for ten minutes.", 1.12)
    again = voice.say("Set a timer for ten minutes.", 1.12)
    assert np.array_equal(first, again), "the set would change from run to run"
    start, end = active_bounds(first)
    assert 1.0 < end - start < 3.0 and active_level_db(first) > -40
