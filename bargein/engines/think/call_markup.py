"""The markup of Qwen-style tool calls in a model's text: tags, code fences, and where a bare JSON call begins.

Pure text scanning for :class:`bargein.engines.think.tool_calls.ToolCallSplitter`, which decides what of a
streamed reply is spoken and what is a call (or markup dropped unspoken).
"""

from __future__ import annotations

import json
import re

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"
RESPONSE_TAG = "<tool_response>"
RESPONSE_CLOSE_TAG = "</tool_response>"
"""The template wraps a tool's output in these: a model that writes one invents the answer, never to be spoken."""
MARKUP = (OPEN_TAG, CLOSE_TAG, RESPONSE_TAG, RESPONSE_CLOSE_TAG)
FENCE = "```"
_NAME_KEY = '"name"'
MAX_CALL_CHARS = 8_192
"""A call longer than this is cut off and refused: no tool here takes that much."""


def bare_call_start(text: str) -> tuple[int | None, bool]:
    """Where in ``text`` a bare JSON call (``{"name"``, perhaps in a code fence) may begin, and whether it
    surely does; ``(None, False)`` when nothing in it can."""
    for at, char in enumerate(text):
        if char in "{`":
            opens = _opens_call(text[at:])
            if opens is not False:
                return at, bool(opens)
    return None, False


def _opens_call(text: str) -> bool | None:
    """Whether ``text`` (from a ``{`` or a backtick) opens a ``{"name": "...`` object: True, False, or None
    while too little of it is in to tell."""
    rest = text
    if rest.startswith("`"):
        if not (rest.startswith(FENCE) or FENCE.startswith(rest)):
            return False
        rest = rest[len(FENCE):]
        if len(rest) < len("json") and "json".startswith(rest):
            return None
        rest = rest.removeprefix("json").lstrip()
        if not rest:
            return None
        if not rest.startswith("{"):
            return False
    rest = rest[1:].lstrip()
    if len(rest) < len(_NAME_KEY):
        return None if _NAME_KEY.startswith(rest) else False
    if not rest.startswith(_NAME_KEY):
        return False
    # sure only once the key has a string value: prose that quotes "name" must not hold the reply back
    rest = rest[len(_NAME_KEY):].lstrip()
    if not rest:
        return None
    if rest[0] != ":":
        return False
    rest = rest[1:].lstrip()
    return None if not rest else rest[0] == '"'


def bare_calls(raw: str) -> list[str] | None:
    """The calls of a bare reply made only of two or more strict JSON calls (each with a ``name``),
    separated by white space or stray ``<tool_call>`` tags; ``None`` for anything else."""
    if len(raw) > MAX_CALL_CHARS:
        return None
    decoder = json.JSONDecoder()
    calls: list[str] = []
    rest = raw
    while True:
        rest = rest.strip()
        while rest.startswith((OPEN_TAG, CLOSE_TAG)):
            rest = rest.removeprefix(OPEN_TAG).removeprefix(CLOSE_TAG).strip()
        if not rest:
            break
        try:
            value, end = decoder.raw_decode(rest)
        except (ValueError, RecursionError):
            return None
        if not isinstance(value, dict) or "name" not in value:
            return None
        calls.append(rest[:end])
        rest = rest[end:]
    return calls if len(calls) > 1 else None


def partial_tag_length(text: str, tag: str) -> int:
    """How many trailing characters of ``text`` could be the start of ``tag``."""
    for length in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-length:]):
            return length
    return 0


_STRAY_OPENER = re.compile(r'^\{\s*"name"?\s*:?\s*"?\s*')
_STRAY_CLOSER = re.compile(r'"?\s*\}?$')


def without_stray_opener(text: str) -> str:
    """``text``, a reply that began like a bare call but never became one, without the call's opening (``{"name``,
    ``{"name": "``) and the stray quote or brace it left at the end: the words the model went on to write are the
    reply. A small model offered tools sometimes starts a call greedily and then answers in words
    (``{"nameA spider has eight legs."``); spoken as written the user hears the markup, and the history that keeps
    it leads the next replies to open the same way. Text that does not open that way is returned unchanged."""
    opened = _STRAY_OPENER.match(text)
    if opened is None:
        return text
    return _STRAY_CLOSER.sub("", text[opened.end():]).strip()
