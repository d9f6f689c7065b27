"""Where a camera-on turn's first audio goes, turn by turn, for ``bench.latency.seeing_latency`` (issue 44).

From each turn's ledger (``bargein.turn.metrics``) and its reply's transcript: the LLM's first token, the first
clause as the reply cut it for the voice (:class:`~bargein.engines.speak.clauses.ClauseSplitter`
with :data:`~bargein.engines.speak.clauses.FIRST_CLAUSE_WORDS`), its words and the tokens the model wrote before it
was whole (the transcript tokenised again with the embedded model's tokenizer: an estimate, since the model's own
tokens may split differently), the ledger's time to write it and to voice it, the reply's length in tokens, and
whether a scene read was running when the turn's silence began (``scene_read_at_silence``). From the embedded
LLM's job trace in the server's log: each reply's prompt tokens not already in the model's cache when it began (for a
head start, what the turn's warms did not cover), its wait for the model thread and its first token, and the warms'
count, model time and tokens per turn.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bargein.engines.speak.clauses import FIRST_CLAUSE_WORDS, ClauseSplitter

Tokenize = Callable[[str], list[str]]
"""Text -> the model's token pieces, in order."""
TRANSCRIPT_EVENTS = ("response.output_audio_transcript.delta", "response.output_text.delta")
REPLY_CAP = 48
"""The bench's replies' token limit (``max_output_tokens``)."""


@dataclass(frozen=True)
class TurnFigures:
    """One answered turn's account (``None``: the ledger did not say)."""

    first_audio_ms: float | None
    endpoint_ms: float | None
    llm_first_token_ms: float | None
    first_clause: str
    clause_tokens: int | None
    first_clause_ms: float | None
    tts_synth_ms: float | None
    reply_tokens: int | None
    read_at_silence: bool | None
    guess_ms: float | None = None
    """When the speculative guess came back, from the speech end (a short-tier endpoint waits for it)."""
    turn_end_probability: float | None = None
    reply: str = ""
    """The reply's words as sent (for the echo count, ``bench/latency/seeing_echo.py``)."""

    @property
    def clause_words(self) -> int:
        """Words in the reply's first clause."""
        return len(self.first_clause.split())

    def line(self) -> str:
        """One row of the per-turn log."""
        def cell(value: float | None) -> str:
            return "-" if value is None else f"{value:.0f}"

        read = {None: "-", True: "yes", False: "no"}[self.read_at_silence]
        score = "-" if self.turn_end_probability is None else f"{self.turn_end_probability:.2f}"
        return (f"   turn: server first audio {cell(self.first_audio_ms)}, endpoint {cell(self.endpoint_ms)} "
                f"(guess {cell(self.guess_ms)}, score {score}), "
                f"llm first token {cell(self.llm_first_token_ms)}, "
                f"first clause {self.clause_words} words / {cell(self.clause_tokens)} tok "
                f"in {cell(self.first_clause_ms)} ms, "
                f"tts {cell(self.tts_synth_ms)}, reply {cell(self.reply_tokens)} tok, read at silence {read}: "
                f"{self.first_clause!r}")


_JOB = re.compile(r" job session=(\S+) kind=(\S+) end=(\S+) held=\d+ waited_ms=(\S+) first_token_ms=(\S+) "
                  r"first_clause_ms=\S+ total_ms=(\S+) prompt=(\d+) reused=(\d+)")


@dataclass(frozen=True)
class ModelJob:
    """One job of the embedded LLM's trace (``BARGEIN_LLM_TRACE=1``): a reply (a head start or a reply of its own)
    or a prefill (a warm), its wait for the model thread, its first token, its time and its new prompt tokens."""

    kind: str
    end: str
    waited_ms: float | None
    first_token_ms: float | None
    total_ms: float | None
    new_tokens: int

    def line(self) -> str:
        """One row of the per-session log."""
        def cell(value: float | None) -> str:
            return "-" if value is None else f"{value:.0f}"

        return (f"   llm {self.kind} {self.end}: waited {cell(self.waited_ms)} ms, new prompt {self.new_tokens} tok, "
                f"first token {cell(self.first_token_ms)} ms, total {cell(self.total_ms)} ms")


def model_jobs(log: Path | None, since: int) -> list[ModelJob]:
    """The LLM jobs a server logged after byte ``since`` (none without a log or the trace)."""
    if log is None or not log.exists():
        return []
    with log.open("rb") as handle:
        handle.seek(since)
        text = handle.read().decode("utf-8", "replace")

    def ms(value: str) -> float | None:
        return None if value == "-" else float(value)
    return [ModelJob(m[2], m[3], ms(m[4]), ms(m[5]), ms(m[6]), int(m[7]) - int(m[8])) for m in _JOB.finditer(text)]


def model_medians(jobs: Sequence[ModelJob], turns: int) -> str:
    """One condition's LLM jobs: replies' new prompt tokens, wait and first token (medians), and the warms' count
    and model time per answered turn."""
    replies = [j for j in jobs if j.kind == "reply" and j.end in ("stop", "length")]
    warms = [j for j in jobs if j.kind == "prefill"]

    def median(values: list[float | int | None]) -> str:
        known = [float(v) for v in values if v is not None]
        return f"{statistics.median(known):.0f}" if known else "-"
    per_turn = max(1, turns)
    return (f"{len(replies)} | {median([j.new_tokens for j in replies])} | {median([j.waited_ms for j in replies])} | "
            f"{median([j.first_token_ms for j in replies])} | {len(warms) / per_turn:.1f} | "
            f"{sum(j.total_ms or 0.0 for j in warms) / per_turn:.0f} | "
            f"{sum(j.new_tokens for j in warms) / per_turn:.0f}")


MODEL_HEADER = ("| condition | replies | new prompt tok | waited for the model ms | first token ms | warms per turn | "
                "warm model ms per turn | warm tok per turn |\n|---|---|---|---|---|---|---|---|")


def transcripts(other: dict[str, list[tuple[float, dict[str, Any]]]]) -> dict[str, str]:
    """Each reply's words as they were sent (by response id)."""
    text: dict[str, str] = {}
    for kind in TRANSCRIPT_EVENTS:
        for _, event in other.get(kind, []):
            text[event.get("response_id", "")] = text.get(event.get("response_id", ""), "") + event.get("delta", "")
    return text


def first_clause(pieces: Sequence[str]) -> tuple[str, int | None]:
    """The first clause the reply's splitter releases when fed ``pieces`` one by one, and how many pieces it took
    (``None``: the reply ended first, its whole text being the clause)."""
    splitter = ClauseSplitter(first_max_words=FIRST_CLAUSE_WORDS)
    for count, piece in enumerate(pieces, 1):
        if ready := splitter.feed(piece):
            return ready[0], count
    return splitter.flush() or "", None


def figures(metrics: dict[str, Any], text: str, tokenize: Tokenize | None) -> TurnFigures:
    """One turn's account from its ledger and its reply's transcript."""
    def number(key: str) -> float | None:
        value = metrics.get(key)
        return float(value) if isinstance(value, int | float) else None

    pieces = tokenize(text) if tokenize is not None and text else list(text.split(" "))
    clause, count = first_clause(pieces)
    read = number("scene_read_at_silence")
    tokens = number("tokens")
    return TurnFigures(number("first_audio_ms"), number("endpoint_ms"),
                       number("llm_first_token_ms"), clause,
                       (count if count is not None else len(pieces)) if tokenize is not None else None,
                       number("first_clause_ms"), number("tts_synth_ms"), None if tokens is None else int(tokens),
                       None if read is None else read > 0, number("guess_ms"), number("turn_end_probability"),
                       text)


def model_tokenizer(model: str = "qwen2.5-coder-0.5b") -> Tokenize | None:
    """The embedded model's tokenizer (its vocabulary only), as token pieces; None where it cannot be loaded."""
    try:
        import llama_cpp

        from bargein.engines.think.llm_models import resolve_gguf

        llama = llama_cpp.Llama(model_path=str(resolve_gguf(model)), vocab_only=True, verbose=False)
    except Exception:  # the figures go on without the token counts
        return None

    def tokenize(text: str) -> list[str]:
        ids = llama.tokenize(text.encode(), add_bos=False, special=False)
        return [llama.detokenize([token]).decode("utf-8", "replace") for token in ids]
    return tokenize


def medians(turns: Sequence[TurnFigures]) -> str:
    """One condition's medians: where its turns' time went."""
    def median(values: list[float | int | None]) -> str:
        known = [float(v) for v in values if v is not None]
        return f"{statistics.median(known):.0f}" if known else "-"

    reads = [t.read_at_silence for t in turns if t.read_at_silence is not None]
    capped = sum(1 for t in turns if t.reply_tokens is not None and t.reply_tokens >= REPLY_CAP)
    return (f"{len(turns)} | {median([t.first_audio_ms for t in turns])} | {median([t.endpoint_ms for t in turns])} | "
            f"{median([t.guess_ms for t in turns])} | "
            f"{median([t.llm_first_token_ms for t in turns])} | "
            f"{median([t.clause_tokens for t in turns])} | {median([t.clause_words for t in turns])} | "
            f"{median([t.first_clause_ms for t in turns])} | {median([t.tts_synth_ms for t in turns])} | "
            f"{median([t.reply_tokens for t in turns])} ({capped} at the cap) | "
            f"{sum(reads)} of {len(reads)}")


MEDIANS_HEADER = ("| condition | turns | server first audio | endpoint | guess | llm first token | "
                  "first clause tok | words | first clause ms | tts ms | reply tok | read at silence |\n"
                  "|---|---|---|---|---|---|---|---|---|---|---|---|")
