"""What one reply of the embedded model cost: the figures the prefix cache and the benchmarks are judged by."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TurnStats:
    """What one reply cost: the figures the prefix cache and the benchmarks are judged by."""

    prompt_tokens: int = 0
    reused_tokens: int = 0
    """Prompt tokens whose KV cache was already there (kept in the context or restored)."""
    restored_snapshot: bool = False
    completion_tokens: int = 0
    finish_reason: str = ""
    first_token_s: float | None = None
    """Seconds from submission to the first text piece, measured on the worker."""
    first_clause_s: float | None = None
    """Seconds from submission to the end of the reply's first clause (as the session's speech cuts it)."""
    waited_s: float | None = None
    """Seconds from submission until the model thread first worked on the reply."""
    total_s: float = 0.0
    evaluations: int = 0
    """Model evaluations (prompt chunks and tokens) run for this reply (the one-sequence engine counts them;
    the batched engine evaluates many replies at once and leaves both counts at 0)."""
    wide_evaluations: int = 0
    """Of those, the ones run on every core (:mod:`~bargein.engines.think.thread_governor`)."""
    tokens_at_cancel: int | None = None
    """Completion tokens already sampled when the cancel was seen by the event loop."""
