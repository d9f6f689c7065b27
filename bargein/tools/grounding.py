"""Whether a built-in tool call rests on what the user said, or is the model filling in a form.

Offered the built-in tools, the embedded 0.5B model calls one for almost anything on a fresh
conversation, and when the user's words give it nothing to put in the call it writes the examples
from the tools' own descriptions or a date of its training years: "My favourite colour is green."
becomes ``get_current_time({"place": "Tokyo"})``, "How far away is the moon?" becomes
``about_date({"date": "2023-04-15"})``, a line of a novel ``calculate({"expression": "15 / 100 * 80.0"})``.
Run, such a call answers a question nobody asked. A call is *grounded* when at least one number or
content word of its arguments occurs in the user's words (numbers by value, so "48" in "48 times 12"
and "forty eight" both ground ``48 * 12``); a call with no such token in its arguments has nothing to
check and counts as grounded. Pure code.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterator
from typing import Any

_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3})")
_WORD = re.compile(r"[^\W\d_]{3,}")
_UNITS = {"zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
          "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
          "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20, "thirty": 30,
          "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90, "hundred": 100,
          "thousand": 1000, "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6,
          "seventh": 7, "eighth": 8, "ninth": 9, "tenth": 10}
"""Spoken numbers a recogniser may write out, each as its value (:func:`_spoken_numbers` adds compounds)."""
_STOPWORDS = frozenset({"the", "and", "for", "with", "from", "into", "what", "which", "that", "this", "are", "was",
                        "were", "you", "your", "how", "many", "much", "not", "per"})


def grounded(arguments: str, user_words: str) -> bool:
    """True when the call's ``arguments`` (JSON, or raw text) share a number or a content word with
    ``user_words`` (every user message of the conversation), or hold neither to check."""
    try:
        values = list(_leaves(json.loads(arguments)))
    except (ValueError, RecursionError):  # not JSON (or a number too long to read): the raw text
        values = [arguments]
    text = _plain(" ".join(values))
    numbers = {float(n) for n in _NUMBER.findall(text)}
    words = {w for w in _WORD.findall(text) if w not in _STOPWORDS}
    if not numbers and not words:
        return True
    said = _plain(user_words)
    said_numbers = {float(n) for n in _NUMBER.findall(said)} | _spoken_numbers(said)
    said_words = set(_WORD.findall(said))
    return bool(numbers & said_numbers) or bool(words & said_words)


def _plain(text: str) -> str:
    """Lower case, accents folded ("Zürich" is "zurich"), thousands separators dropped ("1,234" is 1234)."""
    folded = unicodedata.normalize("NFKD", text.lower())
    return _THOUSANDS.sub("", "".join(c for c in folded if not unicodedata.combining(c)))


def _spoken_numbers(text: str) -> set[float]:
    """The values of the number words in ``text``, with two-word compounds ("forty eight" is 48 too) and
    halves ("three and a half" is 3.5 too)."""
    found: set[float] = set()
    previous: int | None = None
    words = re.findall(r"[a-z]+", text)
    for index, word in enumerate(words):
        if word == "half" and index >= 3 and words[index - 2:index] == ["and", "a"] and words[index - 3] in _UNITS:
            found.add(_UNITS[words[index - 3]] + 0.5)
        value = _UNITS.get(word)
        if value is not None:
            found.add(float(value))
            if previous is not None and previous >= 20 and previous % 10 == 0 and value < 10:
                found.add(float(previous + value))
            if previous is not None and value in (100, 1000):
                found.add(float(previous * value))
        previous = value
    return found


def _leaves(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    elif value is not None and not isinstance(value, bool):
        yield str(value)
