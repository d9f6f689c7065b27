"""Planning model calls and turning phoneme durations into word timings (no model needed)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from bargein.engines.speak.kokoro_align import Part, plan, proportional, token_ids, word_timings


@dataclass
class _Tok:
    text: str
    phonemes: str | None
    whitespace: str


class _ScriptedG2P:
    """Reads each word as its upper-cased letters, splitting off trailing punctuation as its own token,
    and expands the digits of a number into one group per digit (like a normaliser reading "42")."""

    def tokenize(self, text: str) -> list[_Tok]:
        tokens: list[_Tok] = []
        for word in text.split():
            core = word.rstrip(",.!?")
            punct = word[len(core):]
            if core.isdigit():
                tokens.extend(_Tok(d, d.upper() * 2, " ") for d in core[:-1])
                tokens.append(_Tok(core[-1], core[-1] * 2, "" if punct else " "))
            elif core:
                tokens.append(_Tok(core, core.upper(), "" if punct else " "))
            if punct:
                tokens.append(_Tok(punct, punct, " "))
        if tokens:
            tokens[-1].whitespace = ""
        return tokens

    def phonemize_tokens(self, tokens: list[_Tok]) -> list[_Tok]:
        return tokens


def _plan(text: str, max_phonemes: int = 400) -> list[Part]:
    return plan(text, g2p=_ScriptedG2P(), normalize=lambda s: s,
                split_sentences=lambda s: [x for x in s.split("|") if x.strip()], max_phonemes=max_phonemes)


def _said(part: Part, *words: str) -> str:
    """The phonemes that say ``words`` (one run of the part)."""
    span = next(run.span for run in part.runs if run.words == words)
    assert span is not None
    return part.phonemes[span[0]:span[1]]


def test_words_keep_their_phoneme_spans() -> None:
    (part,) = _plan("Hello there, you.")
    assert part.phonemes == "HELLO THERE, YOU."
    assert _said(part, "Hello") == "HELLO"
    assert _said(part, "there,") == "THERE"  # the comma is a pause, not the word
    assert _said(part, "you.") == "YOU"


def test_rewritten_words_share_the_time_of_their_reading() -> None:
    (part,) = _plan("I am 42 today.")
    assert part.words == ("I", "am", "42", "today.")
    assert _said(part, "42") == "44 22"


def test_sentences_are_separate_parts_and_long_ones_are_cut_at_clauses() -> None:
    assert [p.words for p in _plan("One two.|Three.")] == [("One", "two."), ("Three.",)]
    text = "alpha beta gamma, delta epsilon zeta, eta theta iota kappa."
    parts = _plan(text, max_phonemes=40)
    assert [" ".join(p.words) for p in parts] == ["alpha beta gamma, delta epsilon zeta,",
                                                  "eta theta iota kappa."]
    assert all(len(p.phonemes) <= 40 for p in parts)
    # Without clause punctuation the cut falls at a word.
    counting = "one two three four five six seven eight nine ten"
    parts = _plan(counting, max_phonemes=20)
    assert all(len(p.phonemes) <= 20 for p in parts)
    assert [w for p in parts for w in p.words] == counting.split()


def test_token_ids_skip_unknown_characters() -> None:
    ids, where = token_ids("ab?c", {"a": 5, "b": 6, "c": 7})
    assert ids == [0, 5, 6, 7, 0]
    assert where == [1, 2, -1, 3]


def test_durations_become_word_times() -> None:
    (part,) = _plan("Hi you.")
    vocab = {c: i + 1 for i, c in enumerate(sorted(set(part.phonemes)))}
    ids, where = token_ids(part.phonemes, vocab)  # "HI YOU." -> pad H I _ Y O U . pad
    assert len(ids) == 9
    # Each id's duration in units: a 10-unit leading pad, 2 per sound, 1 for the space, 4 for ".".
    durations = [10, 2, 2, 1, 2, 2, 2, 4, 6]
    ends = np.cumsum(durations)
    timings = word_timings(part, where, ends, ms_per_unit=25.0, shift_ms=100.0, duration_ms=2000.0)
    assert [(w.word, w.start_ms, w.end_ms) for w in timings] == [
        ("Hi", 150.0, 250.0),  # units 10-14, less the 100 ms trimmed off the front
        ("you.", 275.0, 425.0),  # units 15-21
    ]


def test_without_durations_words_are_proportional() -> None:
    (part,) = _plan("a bbb")
    timings = word_timings(part, [], None, ms_per_unit=0.0, shift_ms=0.0, duration_ms=400.0)
    assert [(w.start_ms, w.end_ms) for w in timings] == [(0.0, 100.0), (100.0, 400.0)]
    assert proportional([], 0.0, 1.0) == ()
    assert [w.end_ms for w in proportional(["", ""], 5.0, 9.0)] == [5.0, 5.0]


@pytest.mark.parametrize("text", ["", "   ", "|"])
def test_nothing_to_say_plans_nothing(text: str) -> None:
    assert _plan(text) == []
