"""The finished-question clips of ``bench.latency.first_audio --clips questions``: held out of the endpoint's fit."""

from __future__ import annotations

import shutil

import pytest

from bench.harness.question_clips import ASTERISK_PROMPTS, LEAD_S, ORDER, SYNTHESISED_QUESTIONS, question_clips
from bench.harness.realtime_harness import WIRE_RATE
from testdata.endpoint_clips import HELD_OUT_VOICES
from testdata.endpoint_set import SENTENCES, VOICES
from testdata.voices import ASTERISK, FAMILIES


def test_no_question_is_spoken_by_a_voice_or_in_words_the_endpoint_was_fitted_on() -> None:
    fitted_texts = {sentence.replace("| ", "").lower() for sentence in SENTENCES}
    assert "festival" not in VOICES  # the endpoint set has no Festival voice at all
    for family, text in SYNTHESISED_QUESTIONS:
        engine = FAMILIES[family].engine
        voice = family.split("-", 1)[1]
        assert engine in ("flite", "festival"), family
        if engine == "flite":  # the endpoint set speaks Flite's voices; only slt is held out of the tiers' fit
            assert voice in VOICES["flite"] and voice in HELD_OUT_VOICES, family
        assert text.lower() not in fitted_texts
    assert not {text.lower() for text in ASTERISK_PROMPTS} & fitted_texts


def test_the_order_streams_every_turn_once() -> None:
    keys = [f"s{index}" for index in range(len(SYNTHESISED_QUESTIONS))] + \
        [f"r{index}" for index in range(len(ASTERISK_PROMPTS))]
    assert sorted(ORDER) == sorted(keys)


@pytest.mark.skipif(not (shutil.which("flite") and shutil.which("text2wave") and ASTERISK.is_dir()),
                    reason="needs flite, festival and asterisk-core-sounds-en-wav (scripts/setup.sh test)")
def test_every_clip_is_one_turn_after_the_lead_and_the_same_every_run() -> None:
    clips = question_clips()
    assert len({clip.name for clip in clips}) == len(clips) == len(ORDER)
    for clip in clips:
        assert clip.onset >= int(LEAD_S * WIRE_RATE), clip.name  # the bounds moved past the lead
        speech_s = (clip.end - clip.onset) / WIRE_RATE
        assert 0.8 < speech_s < 4.0, (clip.name, speech_s)
        assert clip.longest_pause_s < 0.5, clip.name  # no pause the 500 ms endpoint would split the turn at
    again = question_clips()
    assert [(clip.name, clip.pcm, clip.onset, clip.end) for clip in again] == \
        [(clip.name, clip.pcm, clip.onset, clip.end) for clip in clips]
