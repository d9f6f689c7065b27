"""Text planning and word alignment for the Kokoro (hibari) synthesiser.

The synthesiser speaks one *part* per model call: a sentence, or a piece of one cut at clause punctuation
when it is too long for the model. Planning keeps, for every word of the caller's text, the span of
phoneme characters that says it, so that the model's per-phoneme durations turn into word timings.

The G2P normalises text before reading it ("Dr." becomes "Doctor", "3/4/2024" becomes "March fourth,
2024"), so the words it reads are not always the caller's words. The caller's words are matched to the
G2P's whitespace-delimited groups with a sequence alignment; a run of words that was rewritten shares the
time of the groups that replaced it, split in proportion to the words' lengths.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any

import numpy as np
import numpy.typing as npt

from bargein.values import WordTiming

PUNCTUATION = frozenset(';:,.!?—…"“”()[] ')
"""Phoneme-string characters that are pauses or spacing, not sounds of a word."""
_CLAUSE_PUNCT = frozenset(",;:—")
_KEY = re.compile(r"[^0-9a-z]+")


@dataclass(frozen=True)
class WordRun:
    """Caller's words that map to one span of phoneme characters (usually one word, one span)."""

    words: tuple[str, ...]
    span: tuple[int, int] | None
    """``[start, end)`` of the spoken phoneme characters in the part's string; None when silent."""


@dataclass(frozen=True)
class Part:
    """One model call: its phoneme string and the words it carries."""

    phonemes: str
    runs: tuple[WordRun, ...]
    aligned: bool = True
    """False when the G2P's tokens were unavailable; words then get proportional timings."""

    @property
    def words(self) -> tuple[str, ...]:
        """The caller's words in this part, in order."""
        return tuple(w for run in self.runs for w in run.words)


@dataclass(frozen=True)
class _Group:
    text: str
    phonemes: str


def _key(word: str) -> str:
    return _KEY.sub("", word.lower())


def _spoken_span(phonemes: str) -> tuple[int, int] | None:
    """First and one-past-last spoken characters of a phoneme string."""
    idx = [i for i, c in enumerate(phonemes) if c not in PUNCTUATION]
    return (idx[0], idx[-1] + 1) if idx else None


def _groups(tokens: Sequence[Any]) -> list[_Group]:
    """Whitespace-delimited groups of G2P tokens ("world" + "," is one group, as in the text)."""
    groups: list[_Group] = []
    text, phon = "", ""
    for tk in tokens:
        text += tk.text
        phon += tk.phonemes or ""
        if tk.whitespace:
            groups.append(_Group(text, phon))
            text, phon = "", ""
    if text or phon:
        groups.append(_Group(text, phon))
    return groups


def _align(words: Sequence[str], groups: Sequence[_Group]) -> list[tuple[list[str], list[int]]]:
    """Runs of (caller's words, group indices) in order; every word and every group lands in one run."""
    runs: list[tuple[list[str], list[int]]] = []
    matcher = SequenceMatcher(None, [_key(w) for w in words], [_key(g.text) for g in groups], autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            runs.extend(([words[i]], [j1 + i - i1]) for i in range(i1, i2))
        elif op == "replace":
            runs.append((list(words[i1:i2]), list(range(j1, j2))))
        elif op == "delete":  # words the G2P dropped (a lone dash): silent, but still words of the reply
            runs.append((list(words[i1:i2]), []))
        elif runs:  # "insert": groups the text did not have (an expansion): said with the run before
            runs[-1][1].extend(range(j1, j2))
        else:
            runs.append(([], list(range(j1, j2))))
    return runs


def plan(text: str, *, g2p: Any, normalize: Callable[[str], str],
         split_sentences: Callable[[str], list[str]], max_phonemes: int = 400) -> list[Part]:
    """Cut ``text`` into model calls and keep each word's phoneme span.

    Sentences are parts of their own; a sentence over ``max_phonemes`` is cut after the last clause
    punctuation that fits, else at the last word that fits (a single word longer than that is its own part).
    """
    parts: list[Part] = []
    for sentence in split_sentences(text):
        words = sentence.split()
        try:
            groups = _groups(g2p.phonemize_tokens(g2p.tokenize(normalize(sentence))))
        except AttributeError:  # a hibari without the token API: whole-sentence G2P, proportional timing
            phonemes = g2p(sentence)
            if phonemes:
                parts.append(Part(phonemes, (WordRun(tuple(words), _spoken_span(phonemes)),), aligned=False))
            continue
        runs = _align(words, groups)
        parts.extend(_pack(runs, groups, max_phonemes))
    return parts


def _pack(runs: list[tuple[list[str], list[int]]], groups: Sequence[_Group], max_phonemes: int) -> list[Part]:
    """Join runs into phoneme strings of at most ``max_phonemes`` characters."""
    out: list[Part] = []
    current: list[tuple[list[str], str]] = []  # (words, phonemes of the run) of the part being built
    length = 0
    last_clause = -1  # index in ``current`` after which a clause ends
    for words, idx in runs:
        phon = " ".join(groups[j].phonemes for j in idx if groups[j].phonemes)
        extra = len(phon) + (1 if length and phon else 0)
        if current and length + extra > max_phonemes:
            cut = last_clause + 1 if last_clause >= 0 else len(current)
            out.append(_part(current[:cut]))
            current = current[cut:]
            length = len(" ".join(p for _, p in current if p))
            last_clause = max((i for i, (_, p) in enumerate(current) if p and p[-1] in _CLAUSE_PUNCT),
                              default=-1)
            extra = len(phon) + (1 if length and phon else 0)
        current.append((words, phon))
        length += extra
        if phon and phon[-1] in _CLAUSE_PUNCT:
            last_clause = len(current) - 1
    if current:
        out.append(_part(current))
    return [p for p in out if _spoken_span(p.phonemes) is not None]


def _part(runs: Sequence[tuple[list[str], str]]) -> Part:
    phonemes = ""
    planned = []
    for words, phon in runs:
        span = None
        if phon:
            if phonemes:
                phonemes += " "
            inner = _spoken_span(phon)
            if inner is not None:
                span = (len(phonemes) + inner[0], len(phonemes) + inner[1])
            phonemes += phon
        planned.append(WordRun(tuple(words), span))
    return Part(phonemes, tuple(planned))


def token_ids(phonemes: str, vocab: dict[str, int]) -> tuple[list[int], list[int]]:
    """Model input ids (with the two 0 pads) and, per phoneme character, the index of its id (-1: dropped)."""
    ids = [0]
    where = []
    for c in phonemes:
        if c in vocab:
            where.append(len(ids))
            ids.append(vocab[c])
        else:
            where.append(-1)
    ids.append(0)
    return ids, where


def word_timings(part: Part, where: Sequence[int], ends: npt.NDArray[np.int64] | None, *,
                 ms_per_unit: float, shift_ms: float, duration_ms: float) -> tuple[WordTiming, ...]:
    """Word timings of one rendered part, in ms from its (trimmed) start.

    ``ends`` is the model's cumulative duration per input id (the end of each phoneme in duration
    units of ``ms_per_unit``); ``shift_ms`` is the leading audio trimmed off. Without ``ends``, or for
    a part that is not aligned, words share the spoken time in proportion to their characters.
    """
    if ends is None:
        return proportional(part.words, 0.0, duration_ms)
    if not part.aligned:
        return proportional(part.words, float(ends[0]) * ms_per_unit - shift_ms,
                            float(ends[-2]) * ms_per_unit - shift_ms)
    timings: list[WordTiming] = []
    cursor = float(ends[0]) * ms_per_unit - shift_ms  # end of the leading pad: speech starts here
    for run in part.runs:
        start = end = cursor
        ids = [where[i] for i in range(*run.span) if where[i] >= 0] if run.span else []
        if ids:
            start = float(ends[ids[0] - 1]) * ms_per_unit - shift_ms
            end = float(ends[ids[-1]]) * ms_per_unit - shift_ms
        timings.extend(proportional(run.words, start, end))
        cursor = end
    return tuple(WordTiming(w.word, min(max(w.start_ms, 0.0), duration_ms),
                            min(max(w.end_ms, 0.0), duration_ms)) for w in timings)


def proportional(words: Sequence[str], start_ms: float, end_ms: float) -> tuple[WordTiming, ...]:
    """Words spread over ``[start_ms, end_ms]`` in proportion to their lengths in characters."""
    total = sum(len(w) for w in words)
    if not words or total == 0:
        return tuple(WordTiming(w, start_ms, start_ms) for w in words)
    out = []
    edge = 0
    span = max(end_ms - start_ms, 0.0)
    for w in words:
        a = start_ms + span * edge / total
        edge += len(w)
        out.append(WordTiming(w, a, start_ms + span * edge / total))
    return tuple(out)
