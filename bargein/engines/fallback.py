"""Text a resilient engine says in place of a failed stage's output, marked so the session can tell.

The LLM's apology (:mod:`bargein.engines.resilience`) is spoken like any reply text, so it is a ``str``;
being a :class:`StageFallback`, it also carries which stage failed and why, and the session tells the client
(an ``error`` event) that the reply it hears is an apology, not an answer.
"""

from __future__ import annotations


class StageFallback(str):
    """Reply text standing in for a failed stage (a ``str``, so every consumer of text takes it as is)."""

    stage: str
    """The stage that failed (``llm``)."""
    code: str
    """The ``error`` event's code for the client (``llm_unavailable``)."""
    reason: str
    """What failed, for the client's message (no upstream addresses or bodies: those stay in the log)."""

    def __new__(cls, text: str, *, stage: str, code: str, reason: str) -> StageFallback:
        """The text ``text``, marked as ``stage``'s fallback."""
        marked = super().__new__(cls, text)
        marked.stage, marked.code, marked.reason = stage, code, reason
        return marked


def llm_apology(text: str, failure: BaseException | str) -> StageFallback:
    """The LLM's apology, marked: the reply is spoken, and the client is told it is not an answer.

    ``failure`` is the error (said by its type only: its message may hold an upstream address or body) or a
    reason in words."""
    if isinstance(failure, TimeoutError):
        reason = "the language model missed its deadline"
    elif isinstance(failure, BaseException):
        reason = f"the language model failed ({type(failure).__name__})"
    else:
        reason = failure
    return StageFallback(text, stage="llm", code="llm_unavailable", reason=reason)
