"""Facts the user states about themselves and their wishes, found by rules in what was said (pure code).

Only the user's words and the part of a reply the user heard are read (the history's text, which a barge-in
truncates to the heard words): a fact is the user's own statement ("my name is Ana", "I'm allergic to
peanuts", "call me Dr. Li", "I prefer metric"), or a short answer to a question the user heard ("What should I
call you?" "Ana."). Each fact has a topic; stating it again replaces it, so "actually, my name is Anna" corrects
"Ana". "Forget that ..." / "forget my ..." asks for a topic's or some words' memories to go. The rules were
fitted on the training half of ``bench/quality/memory.py``'s conversations only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NAME = r"((?:Dr|Mr|Mrs|Ms|Prof)\.?\s+[A-Z][\w'-]*|[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*){0,2}|[a-z][\w'-]+)"
_CLAUSE = r"([^.?!,;]{2,80}?)"
_END = r"(?=\s*(?:[.?!,;]|\band\b|\bbut\b|$))"
_FILLER = re.compile(r"^(?:(?:well|so|oh|um|uh|actually|okay|ok|yes|no|sorry|hey|hi|hello|by the way|just so you "
                     r"know|and|also|i mean)\b[\s,]*)+", re.IGNORECASE)


@dataclass(frozen=True)
class Remember:
    """Keep ``text`` under ``topic`` (replacing what the topic held)."""

    topic: str
    text: str


@dataclass(frozen=True)
class Forget:
    """Forget the ``topic``'s memory, or (no topic) every memory holding all of ``words``."""

    topic: str | None
    words: str


Finding = Remember | Forget


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str]
    topic: str
    template: str


def _rule(pattern: str, topic: str, template: str) -> _Rule:
    return _Rule(re.compile(pattern, re.IGNORECASE), topic, template)


_TOPIC_WORDS = {"name": "name", "called": "address", "call me": "address", "allerg": "allergy", "live": "home",
                "home": "home", "job": "job", "work": "job", "birthday": "birthday", "unit": "units",
                "metric": "units", "imperial": "units", "diet": "diet", "vegetarian": "diet", "vegan": "diet",
                "language": "language", "pronoun": "pronouns", "from": "origin", "temperature": "temperature"}
_RULES = (
    _rule(r"\b(?:call me|you can call me|please call me|i go by|i'd like to be called|i want to be called)\s+"
          + _NAME + _END, "address", "The user wants to be called {0}."),
    _rule(r"\bmy name(?:'s| is)\s+" + _NAME + _END, "name", "The user's name is {0}."),
    _rule(r"\b(?:i am|i'm)\s+called\s+" + _NAME + _END, "name", "The user's name is {0}."),
    _rule(r"\bmy (wife|husband|partner|son|daughter|dog|cat|brother|sister|mother|father|mom|dad|boss|friend)"
          r"(?:'s| is) (?:called |named |name is )?" + _NAME + _END, "name of {0}", "The user's {0} is called {1}."),
    _rule(r"\b(?:i am|i'm) (?:severely |very |really )?allergic to " + _CLAUSE + _END, "allergy",
          "The user is allergic to {0}."),
    _rule(r"\bi have an? " + _CLAUSE + r" allergy" + _END, "allergy", "The user is allergic to {0}."),
    _rule(r"\bi(?:'d| would)? prefer (metric|imperial|celsius|fahrenheit)(?: units)?" + _END, "units",
          "The user prefers {0} units."),
    _rule(r"\bi(?:'d| would)? prefer " + _CLAUSE + _END, "preference", "The user prefers {0}."),
    _rule(r"\bmy (?:favou?rite) (\w+(?: \w+)?) is " + _CLAUSE + _END, "favourite {0}",
          "The user's favourite {0} is {1}."),
    _rule(r"\bi (?:live|am living|'m living) in " + _CLAUSE + _END, "home", "The user lives in {0}."),
    _rule(r"\bi(?: just)? moved to " + _CLAUSE + _END, "home", "The user lives in {0}."),
    _rule(r"\bi(?:'m| am) from " + _CLAUSE + _END, "origin", "The user is from {0}."),
    _rule(r"\bi work as an? " + _CLAUSE + _END, "job", "The user works as a {0}."),
    _rule(r"\bmy job is " + _CLAUSE + _END, "job", "The user's job is {0}."),
    _rule(r"\bmy birthday is (?:on )?" + _CLAUSE + _END, "birthday", "The user's birthday is {0}."),
    _rule(r"\b(?:i am|i'm) (?:a )?(vegetarian|vegan|pescatarian|gluten[- ]free|lactose intolerant|diabetic)\b",
          "diet", "The user is {0}."),
    _rule(r"\bi (?:don't|do not|never) eat " + _CLAUSE + _END, "diet", "The user does not eat {0}."),
    _rule(r"\bmy pronouns are " + _CLAUSE + _END, "pronouns", "The user's pronouns are {0}."),
    _rule(r"\bi speak " + _CLAUSE + _END, "language", "The user speaks {0}."),
)
_REMEMBER = re.compile(r"\b(?:please )?remember (?:that )?" + r"([^?!]{3,200}?)" + r"\s*(?:[.!?]|$)", re.IGNORECASE)
_FORGET = re.compile(r"\b(?:please )?forget (?:that |about |what i said about )?([^?!.]{2,120})", re.IGNORECASE)
_NOT_ALLERGIC = re.compile(r"\b(?:i'm|i am) not (?:actually )?allergic\b", re.IGNORECASE)
_ASKED_NAME = re.compile(r"\b(?:your name|what should i call you|what can i call you|who am i speaking)\b",
                         re.IGNORECASE)
_SHORT_NAME = re.compile(r"^(?:it's |i'm |this is )?" + _NAME + r"\.?$")
_STOP_NAMES = frozenset({"yes", "no", "ok", "okay", "sure", "thanks", "hello", "hi", "fine", "good", "nothing"})
_YOU = re.compile(r"\byour\b|\byou\b", re.IGNORECASE)


def extract(user_text: str, heard_before: str = "") -> list[Finding]:
    """What ``user_text`` asks to remember or forget; ``heard_before``: the heard part of the reply before it."""
    findings: list[Finding] = []
    for sentence in _sentences(user_text):
        findings.extend(_sentence_findings(sentence))
    if not findings and _ASKED_NAME.search(heard_before):
        short = _SHORT_NAME.match(_FILLER.sub("", user_text.strip()))
        if short and short.group(1).lower() not in _STOP_NAMES:
            findings.append(Remember("name", f"The user's name is {_tidy(short.group(1))}."))
    return findings


def _sentences(text: str) -> list[str]:
    return [part.strip() for part in re.split(r"(?<!\bDr\.)(?<!\bMr\.)(?<!\bMs\.)(?<!\bMrs\.)(?<=[.?!])\s+", text)
            if part.strip()]


def _sentence_findings(sentence: str) -> list[Finding]:
    plain = _FILLER.sub("", sentence)
    if sentence.rstrip().endswith("?") and not re.match(r"\s*(?:can|could|will|would) you (?:please )?"
                                                         r"(?:remember|forget)", plain, re.IGNORECASE):
        return []  # a question about the user ("is my name Ana?") states nothing
    forget = _FORGET.search(plain)
    if forget:
        return [_forget(forget.group(1))]
    if _NOT_ALLERGIC.search(plain):
        return [Forget("allergy", "")]
    remember = _REMEMBER.search(plain)
    found: list[Finding] = []
    taken: list[tuple[int, int]] = []
    for rule in _RULES:  # the more specific rules first: a span one of them took is not read again
        for match in rule.pattern.finditer(plain):
            start, end = match.span()
            # "you can call me ..." is the user's wish, but a fact about "you" ("my name is your problem") is not
            if any(_YOU.search(group) for group in match.groups()) or any(start < e and s < end for s, e in taken):
                continue
            taken.append((start, end))
            groups = [_tidy(group) for group in match.groups()]
            found.append(Remember(rule.topic.format(*[g.lower() for g in groups]), rule.template.format(*groups)))
    if not found and remember:
        note = " ".join(remember.group(1).split()).rstrip(" .,;")  # the user's own words, quotes and all
        found.append(Remember("note " + " ".join(note.lower().split()[:4]), f"The user asked to remember: {note}."))
    return found


def _forget(what: str) -> Forget:
    """A topic when the words name one ("forget my name", "forget where I live"), else the words themselves."""
    words = _tidy(re.sub(r"\b(?:my|that|i|i'm|am|the|about|it|please|everything)\b", " ", what, flags=re.IGNORECASE))
    lowered = what.lower()
    for cue, topic in _TOPIC_WORDS.items():
        if cue in lowered:
            return Forget(topic, words)
    return Forget(None, words)


def _tidy(text: str) -> str:
    return " ".join(text.strip(" .,;'\"").split())
