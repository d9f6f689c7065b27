"""Odd inputs to the listening decision: long or Unicode-odd transcripts, degenerate word timings, non-finite
numbers. Each must be judged as the documented rules judge its plain counterpart, and never hang or crash."""

from __future__ import annotations

import math
import time

import numpy as np

from bargein.session.core.listening.classifier import classify, normalise, sound_not_words
from bargein.session.core.listening.decide import by_rule, decide_over_reply, spotted_command
from bargein.session.core.listening.features import NAMES, vector, words_of
from bargein.session.core.listening.keyword import load as load_keyword
from bargein.session.core.listening.over_reply import loud_level_db, loud_stretch
from bargein.session.core.listening.own_voice import loud_speech_probability
from bargein.session.core.listening.segment_book import SegmentBook
from bargein.session.core.listening.segment_stats import SegmentStats
from bargein.session.core.listening.user_words import user_words, word_level_db
from bargein.session.core.settings import Endpointing
from bargein.values import Transcript, WordTiming

FRAME_MS = 32.0
NAN, INF = float("nan"), float("inf")


def _speech(levels_db: list[float]) -> SegmentStats:
    stats = SegmentStats()
    for level in levels_db:
        stats.add(0.9, level, FRAME_MS)
    return stats


def _reply_fields(**overrides: object) -> dict[str, object]:
    fields: dict[str, object] = {"transcript": "Nice weather today", "speech_ms": 900.0, "mean_probability": 0.9,
                                 "level_above_floor_db": 20.0, "no_speech_prob": 0.1, "avg_logprob": -0.4, "words": 3}
    fields.update(overrides)
    return fields


def test_a_run_of_music_notes_before_words_is_judged_at_once() -> None:
    # Whisper writes music as "♪ ♪ ♪ ..."; the annotation pattern nested a repeat in a repeat and, on a run of
    # notes followed by words, backtracked exponentially (26 notes: seconds; 40: the session's loop hung)
    for text in ("♪ " * 26 + "la la", "♪" * 26 + " la la", "(music) " * 26 + "la"):
        started = time.monotonic()
        verdict = classify(_speech([-25.0] * 30), Transcript(text), during_reply=False, noise_floor_db=-60.0)
        assert time.monotonic() - started < 1.0, text
        assert not any("describes a sound" in why for why in verdict.reasons), text
        started = time.monotonic()
        by_rule(_reply_fields(transcript=text))
        assert time.monotonic() - started < 1.0, text
    # what the pattern is for still matches
    for text in ("♪ ♪ ♪", "♪♪♪", " (laughs)", "[Music] (applause)!", "*coughs* ♪♪ ..."):
        assert (sound_not_words(text, normalise(text).split()) or "").startswith("the recogniser describes"), text
        assert by_rule(_reply_fields(transcript=text))[0] == "noise"  # type: ignore[index]


def test_a_zero_length_word_on_a_frame_boundary_is_the_user_s() -> None:
    # Whisper's alignment gives fast words no duration; one that began exactly on a frame edge spanned no frame,
    # was unplaced, and so dropped from the user's words and counted as the room's
    levels = [-20.0] * 20
    assert word_level_db(levels, FRAME_MS, 0.0, WordTiming("stop.", 320.0, 320.0)) == -20.0
    assert word_level_db(levels, FRAME_MS, 0.0, WordTiming("stop.", 330.0, 330.0)) == -20.0
    mine = user_words(levels, FRAME_MS, 0.0, (WordTiming("No,", 0.0, 200.0), WordTiming("stop.", 320.0, 320.0)))
    assert mine is not None and mine.text == "No, stop." and mine.room_words == 0
    # beyond the recorded frames a word is still unplaced
    assert word_level_db(levels, FRAME_MS, 0.0, WordTiming("later", 640.0, 640.0)) is None
    assert word_level_db(levels, FRAME_MS, 0.0, WordTiming("before", -100.0, -50.0)) is None


def test_every_word_of_the_longest_turn_is_placed() -> None:
    """A turn runs up to ``max_turn_ms`` before it is committed as it stands: its last words are still the
    user's, not left unplaced past the frames kept and counted as the room's."""
    longest_ms = Endpointing().max_turn_ms
    stats = SegmentStats()
    for _ in range(math.ceil(longest_ms / FRAME_MS)):
        stats.add(0.9, -20.0, FRAME_MS)
    words = (WordTiming("Tell", 0.0, 300.0), WordTiming("me", 300.0, 500.0),
             WordTiming("more.", longest_ms - 600.0, longest_ms - 200.0))
    mine = user_words(stats.levels_db, FRAME_MS, 0.0, words)
    assert mine is not None and mine.text == "Tell me more." and mine.room_words == 0


def test_non_finite_word_timings_are_unplaced_not_a_crash() -> None:
    levels = [-20.0] * 20
    for start, end in ((NAN, 100.0), (0.0, NAN), (0.0, INF), (-INF, 100.0)):
        assert word_level_db(levels, FRAME_MS, 0.0, WordTiming("x", start, end)) is None, (start, end)
    mine = user_words(levels, FRAME_MS, 0.0, (WordTiming("Stop.", 0.0, 300.0), WordTiming("now", NAN, NAN)))
    assert mine is not None and mine.text == "Stop." and mine.room_words == 1


def test_curly_apostrophes_full_width_and_unicode_hyphens_read_as_their_ascii_forms() -> None:
    assert words_of("Don’t stop") == words_of("Don't stop") == ["don't", "stop"]
    assert words_of("ＳＴＯＰ！") == ["stop"]
    assert words_of("Uh\u2010huh.") == words_of("Uh\u2011huh.") == words_of("Uh-huh.") == ["uh-huh"]
    plain = _reply_fields(transcript="Uh-huh.")
    for odd in ("Uh\u2010huh.", "Uh\u2011huh."):
        assert np.array_equal(vector(_reply_fields(transcript=odd)), vector(plain)), odd
    mark = NAMES.index("question_mark")
    assert vector(_reply_fields(transcript="Why？"))[mark] == vector(_reply_fields(transcript="Why?"))[mark] == 1.0
    assert spotted_command(_reply_fields(transcript="ＳＴＯＰ！")) == "stop"
    # with the agent silent, "I’m sorry." is the same invented phrase as "I'm sorry."
    for text in ("I'm sorry.", "I’m sorry."):
        verdict = classify(_speech([-25.0] * 20), Transcript(text, no_speech_prob=0.5, avg_logprob=-0.5),
                           during_reply=False, noise_floor_db=-60.0)
        assert verdict.decision == "noise" and "invents" in verdict.reasons[0], text
    assert by_rule(_reply_fields(transcript="（laughs）"))[0] == "noise"  # type: ignore[index]


def test_non_finite_recogniser_scores_count_as_missing_not_as_a_cut() -> None:
    # a NaN confidence made the model's probability NaN, and NaN < threshold is false: the reply was cut
    missing = vector(_reply_fields(avg_logprob=None, no_speech_prob=None))
    assert np.array_equal(vector(_reply_fields(avg_logprob=NAN, no_speech_prob=NAN)), missing)
    assert np.isfinite(vector(_reply_fields(avg_logprob=-INF, speech_ms=NAN, mean_probability=NAN,
                                            level_above_floor_db=NAN))).all()
    decision, why = decide_over_reply(_reply_fields(avg_logprob=NAN))
    assert "nan" not in why[0]
    assert decision == decide_over_reply(_reply_fields(avg_logprob=None))[0]
    # a level that is not a number is no level: too faint, as a missing one is; no command cuts on it
    assert by_rule(_reply_fields(level_above_floor_db=NAN)) == by_rule(_reply_fields(level_above_floor_db=None))
    assert spotted_command(_reply_fields(transcript="Stop.", level_above_floor_db=NAN)) is None


def test_non_finite_frame_levels_do_not_crash_the_loud_stretch() -> None:
    assert math.isfinite(loud_level_db([NAN, -20.0, -22.0]))
    assert loud_level_db([NAN, NAN]) == -100.0
    assert loud_level_db([-INF, -INF]) == -100.0
    loud_stretch([NAN, -20.0, -20.0, -60.0, -60.0], FRAME_MS)
    assert loud_speech_probability([NAN, -20.0, -20.0], [0.9, 0.9, 0.9], FRAME_MS) is not None


def test_a_non_finite_encoding_is_not_judged() -> None:
    model = load_keyword("en")
    assert model is not None
    width = model.coef.shape[0]
    assert model.probability([0.0] * width) is not None
    assert model.probability([NAN] * width) is None
    assert model.probability([0.0] * (width - 1)) is None


def test_non_finite_frames_do_not_poison_the_session_s_floor_or_user_level() -> None:
    book = SegmentBook()
    for _ in range(20):
        book.frame(None, 0.05, -60.0, FRAME_MS)
    book.frame(None, 0.05, INF, FRAME_MS)
    book.frame(None, NAN, NAN, FRAME_MS)
    assert math.isfinite(book.noise_floor.level_db)
    book.begin("a", threshold=0.5, during_reply=False)
    for level in [-20.0] * 30 + [INF, NAN]:
        book.frame("a", 0.9, level, FRAME_MS)
    book.frame("a", NAN, -20.0, FRAME_MS)
    verdict = book.judge("a", Transcript("What time is it?", avg_logprob=-0.2), during_reply=False)
    assert verdict.decision == "query"
    assert book.user_level_db is not None and math.isfinite(book.user_level_db)
    assert book.user_loud_level_db is not None and abs(book.user_loud_level_db + 20.0) < 0.1  # the loud stretch's
    assert all(not isinstance(v, float) or math.isfinite(v) for v in verdict.features.values())
