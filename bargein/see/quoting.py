"""Asked to read what the camera shows, the agent says the writing itself.

A small embedded model given the scene note answers "can you read me the sign?" with "Yes, I can read the sign."
about as often as it reads it (on the fit half, every form of the question but that one was read from the note),
and no wording of the note cured it. So a question that asks for the writing, with the server's own
instructions, is answered by quoting the note (``It says: "PLATFORM 4".``, or that no writing is in view) in the
reply's voice, as the machine's fixed lines are; every other question goes to the model with the note as
context. A session with instructions of its own keeps its model's answer (its persona or language may want
other words).
"""

from __future__ import annotations

import re

from bargein.see.scene import SceneNote

ASKS_TO_READ = re.compile(r"""
      \b(?:can|could|would|will)\s+you\s+(?:please\s+)?read\b     # can you read me the sign?
    | ^\W*(?:please\s+)?read\b                                    # read that for me please
    | \bwhat\b(?:(?!\byou\b).)*\b(?:say|says|written)\b           # what does this say? (not: what did you say?)
    | \b(?:is|are)\s+there\s+(?:any\s+)?(?:writing|text|words)\b  # is there any writing here?
    | \bwhat(?:'s|\s+is)\s+(?:on|written\s+on)\s+(?:the|this|that|it)\b  # what's on the label?
""", re.IGNORECASE | re.VERBOSE)
"""An English question that asks for the writing in view (the spoken words, as the recogniser wrote them)."""

NO_WRITING = "I can't see any writing."


def asks_to_read(question: str) -> bool:
    """Whether the user's words ask what the writing in view says."""
    return ASKS_TO_READ.search(question.strip()) is not None


def reading_answer(note: SceneNote | None, question: str) -> str | None:
    """The answer that quotes the note to a question asking to read (None: the model answers: the question asks
    something else, or there is no note)."""
    if note is None or not asks_to_read(question):
        return None
    if not note.text:
        return NO_WRITING
    return f'It says: "{" ".join(note.text)}".'
