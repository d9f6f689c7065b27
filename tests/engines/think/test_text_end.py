"""The end-of-sentence estimate's arithmetic, shared by the embedded engine and the offline bench."""

from __future__ import annotations

import numpy as np

from bargein.engines.think.text_end import end_probability, estimate_words, words_end


def test_the_recognisers_final_marks_are_stripped_not_the_words() -> None:
    assert estimate_words(" I need a table for. ") == "I need a table for"
    assert estimate_words("Can you tell me?") == "Can you tell me"
    assert estimate_words("Remind me to...") == "Remind me to"
    assert estimate_words("Mr. Smith, please") == "Mr. Smith, please"
    assert estimate_words(" . ") == ""


def test_the_probability_is_the_final_tokens_share() -> None:
    finals = np.array([False, True, True, False])
    assert end_probability([0.0, 0.0, 0.0, 0.0], finals) == 0.5
    assert end_probability([0.0, 1000.0, 0.0, 0.0], finals) == 1.0, "large logits do not overflow"
    assert end_probability([9.0, -9.0, -9.0, 0.0], finals) < 1e-6
    assert end_probability([0.0, float("nan"), 0.0, 0.0], finals) == 1.0, "broken logits: no estimate to act on"


def test_the_words_are_found_last_in_the_prompt() -> None:
    prompt = [1, 5, 6, 7, 2, 3, 5, 6, 7, 13, 2, 4]
    assert words_end(prompt, [5, 6, 7]) == 9, "the user's last message, not an earlier one with the same words"
    assert prompt[:words_end(prompt, [5, 6, 7]) or 0][-1] == 7
    assert words_end(prompt, [6, 8]) is None and words_end(prompt, []) is None
