"""Quoting what a caller wrote in a built-in tool's error output, cut short.

An error output goes into the conversation and every later prompt; quoting a whole argument would let one
huge argument (a model stuck in a loop, a hostile client's item) fill the model's context. The start of it
is enough for the model to tell which argument was wrong.
"""

from __future__ import annotations

MAX_QUOTED_CHARS = 80


def quoted(value: object, limit: int = MAX_QUOTED_CHARS) -> str:
    """``value`` written as Python writes it (``repr``), cut after ``limit`` characters with an ellipsis."""
    if isinstance(value, str):  # cut before repr, so the work and the result stay small however long it is
        return repr(value[:limit]) + ("…" if len(value) > limit else "")
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"
