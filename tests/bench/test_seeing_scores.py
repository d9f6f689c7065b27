"""The seeing bench's scoring: text read (case, spaces and punctuation aside, numbers exact), nothing invented."""

from __future__ import annotations

from bargein.see.scene import SceneNote
from bench.quality.seeing import invents_nothing, reads_text
from bench.quality.seeing_frames import HALVES, frames


def test_reading_ignores_case_spaces_and_punctuation_but_not_numbers() -> None:
    assert reads_text("PLATFORM 4", "The sign says: platform4.")
    assert reads_text("Coffee 3.50", "It reads COFFEE 3,50")
    assert not reads_text("EXIT 1", "It says EXIT 12")
    assert not reads_text("ROOM 12", "It says ROOM 1 2 and ROOM 3")  # 12 is not said as a number


def test_an_answer_with_a_number_or_a_quote_invents() -> None:
    blank = SceneNote((), 0, "even light", (), None, 0.0)
    assert invents_nothing(blank, "I can't see any writing there.")
    assert not invents_nothing(blank, "It says 'OPEN'.")
    assert not invents_nothing(blank, "I think it says 24.")
    assert not invents_nothing(SceneNote(("OPEN",), 0, "even light", (), None, 0.0), "no text")


def test_the_halves_share_no_font_or_background() -> None:
    (fit_fonts, fit_backgrounds), (held_fonts, held_backgrounds) = HALVES["fit"], HALVES["held_out"]
    assert not set(fit_fonts) & set(held_fonts) and not set(fit_backgrounds) & set(held_backgrounds)
    made = frames("held_out", per_pair=1, blanks_per_background=1)
    assert {f.family for f in made if f.text} == set(held_fonts)
    assert {f.background for f in made} == set(held_backgrounds)
    assert sum(1 for f in made if not f.text) == len(held_backgrounds)
