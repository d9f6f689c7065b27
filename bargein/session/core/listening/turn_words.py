"""What the words of a segment heard over a reply are: a question or a correction takes the turn.

Over a live reply, a short follow-up that leans on the reply ("but how ...?", "or maybe tomorrow?", "for
whom?"), a one-word question ("how?", "when?") or a bare correction ("nope", "wrong", "not that one") is the
user taking the turn, however its acoustics score with the fitted interruption model or the spoken-command model:
the recogniser got the words right, and the words say it. Backchannels ("uh-huh", "okay", "I see") are not
questions and are ruled on before these rules run.

Pure functions of a transcript (normalised words, and its raw text for the final question mark) and a language's
row of :data:`~bargein.session.core.listening.lexicon.TURN_WORDS`. Whether the words are the user's (level over the
room, under the user's own level, the loud stretch a voice, not a vocal sound, not a backchannel) is checked by
the callers first, in :mod:`~bargein.session.core.listening.decide` (English) and
:mod:`~bargein.session.core.listening.classifier` (Mandarin). The rules, in decision order (:data:`TURN_RULES`):

1. :func:`correction`: the whole utterance is a correction, or a short one opens with one ("no, the other one");
2. :func:`wh_question`: a question word among the first words ("how?", "okay but why is that");
3. :func:`follow_up`: a fragment led by a conjunction or a preposition that asks (a question word or a final
   mark: "for whom?", "and then?"), objects ("but I wanted the red one", "or maybe tomorrow") or, led by a
   preposition, adds to what was asked ("with milk", "for two people"; not a set phrase of agreement: "for sure");
4. :func:`question_mark`: a final question mark ("really?", "tomorrow?", Mandarin 吗/呢 too), unless the words are
   what the recogniser invents for noise ("Thank you?", "you?").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from bargein.languages import fold, is_backchannel, language, normalise_utterance
from bargein.session.core.listening.lexicon import TURN_WORDS, TurnWords, only_acknowledgements
from bargein.session.core.listening.thresholds import (
    CORRECTION_MAX_WORDS,
    QUESTION_MAX_WORDS,
    QUESTION_WITHIN_WORDS,
)

_WORDS = re.compile(r"[^\W_]+(?:['’-][^\W_]+)*")
_FINAL_QUESTION = re.compile(r"[?？][\"'”’)\]\s]*$")


@dataclass(frozen=True)
class Said:
    """A transcript as these rules read it."""

    text: str
    """The raw transcript (its punctuation is evidence: Whisper writes "?" where the voice asks)."""
    words: tuple[str, ...]
    """Lower-case words (English) or the utterance as one unit (Mandarin: ``normalise_utterance``)."""
    joined: str
    """The words as one lower-case string without punctuation (Mandarin: without spaces)."""
    row: TurnWords
    spaced: bool


def said(text: str, language_code: str | None) -> Said | None:
    """``text`` as the rules read it; ``None`` for a language without a row of
    :data:`~bargein.session.core.listening.lexicon.TURN_WORDS`."""
    lang = language(language_code)
    row = TURN_WORDS.get(lang.code)
    if row is None:
        return None
    if lang.spaced:
        words = tuple(_WORDS.findall(fold(text).lower()))
        return Said(text, words, " ".join(words), row, True)
    joined = normalise_utterance(text)
    return Said(text, (joined,) if joined else (), joined, row, False)


def _count(s: Said) -> int:
    return len(s.words) if s.spaced else len(s.joined)


def _starts(s: Said, leads: frozenset[str]) -> str | None:
    """The lead ``s`` opens with: its first word, or (Mandarin) a listed opening phrase."""
    if not s.joined:
        return None
    if s.spaced:
        return s.words[0] if s.words[0] in leads else None
    return next((lead for lead in sorted(leads, key=len, reverse=True) if s.joined.startswith(lead)), None)


def _asks(s: Said) -> str | None:
    """The question word among the first :data:`QUESTION_WITHIN_WORDS` words (Mandarin: anywhere)."""
    if s.spaced:
        return next((w for w in s.words[:QUESTION_WITHIN_WORDS] if w in s.row.question_words), None)
    return next((q for q in sorted(s.row.question_words, key=len, reverse=True) if q in s.joined), None)


def _marked(s: Said) -> bool:
    """A final question mark, or (Mandarin) a final particle that asks."""
    return (_FINAL_QUESTION.search(s.text.strip()) is not None
            or (not s.spaced and any(s.joined.endswith(p) for p in s.row.question_endings)))


def correction(s: Said) -> str | None:
    """The whole utterance says "that's wrong", or a short one opens with a correction ("no, the other one");
    set phrases that only open like one ("no problem", 不错) are not."""
    if s.joined in s.row.not_corrections or any(s.joined.startswith(p) for p in s.row.not_corrections if not s.spaced):
        return None
    if s.joined in s.row.corrections:
        return f"a correction ({s.joined!r})"
    lead = _starts(s, s.row.correction_leads)
    if lead is not None and _count(s) <= CORRECTION_MAX_WORDS:
        return f"a correction opening with {lead!r} ({s.joined!r})"
    return None


def wh_question(s: Said) -> str | None:
    """A question word among the first words of a short utterance ("how?", "okay but why")."""
    asked = _asks(s) if _count(s) <= QUESTION_MAX_WORDS else None
    return None if asked is None else f"a question ({asked!r} in {s.joined!r})"


def follow_up(s: Said) -> str | None:
    """A fragment led by a conjunction or a preposition that asks ("for whom?", "and then?"), objects ("but I
    wanted the red one", "or maybe tomorrow") or, led by a preposition, adds to what was asked ("with milk", its
    question mark lost): it continues the conversation, it does not acknowledge ("for sure" does)."""
    lead = _starts(s, s.row.follow_up_leads)
    if lead is None or _count(s) > QUESTION_MAX_WORDS or s.joined == lead:
        return None
    if _marked(s) or _asks(s) is not None:
        return f"a follow-up question led by {lead!r} ({s.joined!r})"
    if lead in s.row.objecting_leads:
        return f"a follow-up led by {lead!r} ({s.joined!r})"
    if lead in s.row.adding_leads and s.joined not in s.row.not_follow_ups and _adds(s, lead):
        return f"a follow-up adding to the request, led by {lead!r} ({s.joined!r})"
    return None


def _adds(s: Said, lead: str) -> bool:
    """Something follows the lead beyond pronouns and articles ("with milk", not "at you")."""
    rest = s.words[1:] if s.spaced else (s.joined[len(lead):],)
    return any(word not in s.row.hollow_words for word in rest)


def question_mark(s: Said) -> str | None:
    """A short utterance the recogniser punctuated as a question (or, in Mandarin, ended with 吗 or 呢), unless it
    is what the recogniser invents for noise ("Thank you?")."""
    if not _marked(s) or _count(s) > QUESTION_MAX_WORDS or s.joined in s.row.invented:
        return None
    return f"a question by its mark ({s.text.strip()!r})"


TurnRule = Callable[[Said], str | None]
TURN_RULES: tuple[tuple[str, TurnRule], ...] = (
    ("correction", correction),
    ("wh_question", wh_question),
    ("follow_up", follow_up),
    ("question_mark", question_mark),
)
"""The rules, named, in decision order: the first that finds a question or a correction decides."""


def takes_the_turn(text: str, language_code: str | None) -> tuple[str, str] | None:
    """``(rule name, why)`` when ``text`` is a question or a correction by :data:`TURN_RULES`; ``None`` when not,
    when it is an acknowledgement ("Right?" asks nothing over a reply) or what the recogniser invents for noise, or
    for a language without a row."""
    s = said(text, language_code)
    if (s is None or not s.joined or s.joined in s.row.invented or (s.spaced and only_acknowledgements(list(s.words)))
            or is_backchannel(text, language_code)):
        return None
    return next(((name, why) for name, rule in TURN_RULES if (why := rule(s)) is not None), None)
