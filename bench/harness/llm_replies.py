"""One embedded-LLM reply streamed as a session streams it, timed: first token, first clause, decode rate."""

from __future__ import annotations

import time
from dataclasses import dataclass

from bargein.engines.speak.clauses import ClauseSplitter
from bargein.engines.think.llama_llm import LlamaLanguageModel
from bargein.values import CancelToken, ChatMessage, GenerationOptions


@dataclass(frozen=True)
class Reply:
    """One streamed reply and its timings."""

    text: str
    ttft_s: float
    first_clause_s: float
    """When the first clause the TTS would be given was complete (the whole reply if none was)."""
    tokens: int
    decode_tps: float
    reused_tokens: int
    prompt_tokens: int


async def timed_reply(model: LlamaLanguageModel, messages: list[ChatMessage],
                      options: GenerationOptions | None = None) -> Reply:
    """Stream one reply, timing the first piece and the decode rate after it."""
    start = time.perf_counter()
    first: float | None = None
    first_clause: float | None = None
    splitter = ClauseSplitter()
    pieces: list[str] = []
    async for piece in model.stream(messages, cancel=CancelToken(), options=options):
        if first is None:
            first = time.perf_counter()
        if first_clause is None and splitter.feed(piece):
            first_clause = time.perf_counter()
        pieces.append(piece)
    end = time.perf_counter()
    stats = model.last_stats
    assert stats is not None and first is not None
    decode_s = end - first
    tps = (stats.completion_tokens - 1) / decode_s if decode_s > 0 and stats.completion_tokens > 1 else 0.0
    return Reply("".join(pieces), first - start, (first_clause or end) - start, stats.completion_tokens, tps,
                 stats.reused_tokens, stats.prompt_tokens)


def user(text: str) -> ChatMessage:
    """A user message."""
    return ChatMessage(role="user", content=text)
