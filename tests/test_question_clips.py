"""The finished-question clips of ``bench.first_audio --clips questions``: held out of the endpoint's fit."""

from __future__ import annotations

import shutil

import pytest

from bench.endpoint_set import SENTENCES, VOICES
from bench.endpoint_tiers import HELD_OUT_VOICES
from bench.question_clips import RECORDED, SYNTHETIC, question_clips
from bench.realtime_harness import WIRE_RATE
from tests.data.voices import ASTERISK, FAMILIES


def test_no_question_is_spoken_by_a_voice_or_in_words_the_endpoint_was_fitted_on() -> None:
    fitted_texts = {sentence.replace("| ", "").lower() for sentence in SENTENCES}
    for family, text in SYNTHETIC:
        engine = FAMILIES[family].engine
        voice = family.split("-", 1)[1]
        assert engine in ("flite", "festival"), family
        if engine == "flite":  # the endpoint set speaks Flite's voices; only slt is held out of the tiers' fit
            assert voice in VOICES["flite"] and voice in HELD_OUT_VOICES, family
        assert text.lower() not in fitted_texts
    assert not {text.lower() for text in RECORDED.values()} & fitted_texts


@pytest.mark.skipif(not (shutil.which("flite") and shutil.which("text2wave") and ASTERISK.is_dir()),
                    reason="needs flite, festival and asterisk-core-sounds-en-wav (scripts/setup.sh test)")
def test_every_clip_is_one_finished_turn_with_room_either_side() -> None:
    clips = question_clips()
    assert len(clips) == len(SYNTHETIC) + len(RECORDED)
    assert len({clip.name for clip in clips}) == len(clips)
    for clip in clips:
        assert clip.onset >= int(0.2 * WIRE_RATE), clip.name  # the lead of silence before the first word
        assert clip.end < clip.samples, clip.name
        speech_s = (clip.end - clip.onset) / WIRE_RATE
        assert 0.8 < speech_s < 4.0, (clip.name, speech_s)
        assert clip.longest_pause_s < 0.5, clip.name  # one turn: no pause the 500 ms endpoint would split
    assert [clip.name for clip in question_clips()] == [clip.name for clip in clips]
    assert [clip.pcm for clip in question_clips()] == [clip.pcm for clip in clips]  # the same audio every run
