"""Whether a spoken reply opens by echoing the camera message instead of answering (issue 44).

A reply *echoes* when its opening, the first sentence (up to the first ``.``, ``!`` or ``?`` followed by a space or
the end; the whole reply if it has none), names, case-insensitively, any of:

* the camera or the picture: ``camera``, ``image``, ``picture``, ``photo``, ``frame``, ``scene``, ``detector``;
* the user in the third person: ``the user``, ``user's``;
* one of the camera message's facts: ``face``/``faces``, ``writing``, ``dim light``, ``bright light``,
  ``even light``, ``little motion``, ``some motion``, ``much motion``.

The spoken questions of ``bench/harness/question_clips.py`` ask about none of these (the sky, the moon, a cat's
name, dinner, a joke, a spider, folders, weasels), so an opening that names one is about the camera message or the
prompt, not the question. Counted for camera-off replies too, as the control (they have no camera message to echo,
so what they count is the test's false alarms and the model's "The user is ..." habit).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

ECHO_WORDS = re.compile(
    r"\b(?:camera|image|picture|photo|frame|scene|detector|the user|user's|faces?|writing"
    r"|(?:dim|bright|even) light|(?:little|some|much) motion)\b", re.IGNORECASE)
"""What an echoing opening names (see the module's docstring)."""
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)")


def opening(reply: str) -> str:
    """The reply's first sentence (all of it when no sentence ends)."""
    text = reply.strip()
    end = _SENTENCE_END.search(text)
    return text if end is None else text[: end.end()]


def echoes(reply: str) -> bool:
    """Whether the reply's opening talks about the camera, the picture, "the user" or the scene's facts."""
    return ECHO_WORDS.search(opening(reply)) is not None


def echo_count(replies: Sequence[str]) -> str:
    """``k of n`` replies whose opening echoes (empty replies left out)."""
    spoken = [reply for reply in replies if reply.strip()]
    return f"{sum(echoes(reply) for reply in spoken)} of {len(spoken)}"
