"""Word error rate, for checking a recogniser against reference transcripts.

A plain Levenshtein distance over words after a light normalisation (case, punctuation, small
numbers spelled out), so "He was not an ill-disposed young man." matches the reference
"he was not an ill disposed young man" and "10 of clubs" matches "ten of clubs".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

_ONES = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
    "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
)
_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_NOT_WORD = re.compile(r"[^a-z0-9' ]+")
# the references spell out titles; recognisers abbreviate them
_ABBREVIATIONS = {"mr": "mister", "mrs": "missus", "dr": "doctor", "st": "saint"}


def _spell(number: int) -> str:
    """Spell 0..99 the way the references do; larger numbers stay as digits."""
    if number < 20:
        return _ONES[number]
    if number < 100:
        tens, ones = divmod(number, 10)
        return _TENS[tens] + ("" if ones == 0 else " " + _ONES[ones])
    return str(number)


def normalize(text: str) -> list[str]:
    """Lower-case words without punctuation; hyphens split words, small numbers and titles are spelled out."""
    cleaned = _NOT_WORD.sub(" ", text.lower().replace("-", " "))
    words: list[str] = []
    for word in cleaned.split():
        word = word.strip("'")
        if not word:
            continue
        if word.isdigit():
            words.extend(_spell(int(word)).split())
        else:
            words.append(_ABBREVIATIONS.get(word, word))
    return words


def edit_distance(reference: Sequence[str], hypothesis: Sequence[str]) -> int:
    """Substitutions + deletions + insertions turning ``reference`` into ``hypothesis``."""
    previous = list(range(len(hypothesis) + 1))
    for i, ref_word in enumerate(reference, start=1):
        current = [i]
        for j, hyp_word in enumerate(hypothesis, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1,
                               previous[j - 1] + (ref_word != hyp_word)))
        previous = current
    return previous[-1]


def _error_rate(references: Iterable[str], hypotheses: Iterable[str], split: Callable[[str], list[str]]) -> float:
    errors = 0
    total = 0
    for reference, hypothesis in zip(references, hypotheses, strict=True):
        ref_units = split(reference)
        errors += edit_distance(ref_units, split(hypothesis))
        total += len(ref_units)
    if total == 0:
        return 0.0 if errors == 0 else float("inf")
    return errors / total


def word_error_rate(references: Iterable[str], hypotheses: Iterable[str]) -> float:
    """Corpus WER: total word edits over total reference words (0.0 when both are empty)."""
    return _error_rate(references, hypotheses, normalize)


_DIGITS = "零一二三四五六七八九"
_NUMBER = re.compile(r"\d+")


def chinese_number(number: int) -> str:
    """0..9999 in Chinese numerals as spoken (34 -> 三十四, 105 -> 一百零五); larger numbers digit by digit."""
    if number >= 10_000:
        return "".join(_DIGITS[int(digit)] for digit in str(number))
    if number < 10:
        return _DIGITS[number]
    spoken = ""
    zero_pending = False
    for value, unit in ((1000, "千"), (100, "百"), (10, "十"), (1, "")):
        digit = number // value % 10
        if digit == 0:
            zero_pending = bool(spoken)
            continue
        if zero_pending:
            spoken += "零"
            zero_pending = False
        spoken += ("" if (unit == "十" and not spoken and digit == 1) else _DIGITS[digit]) + unit
    return spoken


def characters(text: str) -> list[str]:
    """The letters and digits of ``text``, one per item, lower-cased (Chinese is scored by character).

    In text with Chinese characters, Arabic numbers are spelled in Chinese numerals first, so a
    recogniser writing 3点 for 三点 is not counted wrong.
    """
    if re.search(r"[\u4e00-\u9fff]", text):
        text = _NUMBER.sub(lambda match: chinese_number(int(match.group())), text)
    return [character for character in text.lower() if character.isalnum()]


def character_error_rate(references: Iterable[str], hypotheses: Iterable[str]) -> float:
    """Corpus CER: character edits over reference characters, punctuation and spaces ignored."""
    return _error_rate(references, hypotheses, characters)
