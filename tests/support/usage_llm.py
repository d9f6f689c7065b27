"""A fake language model that notes its prompt's usage as the llama.cpp engines do (for the usage tests)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from bargein.engines.fakes import FakeLanguageModel
from bargein.metrics.cost_meter import note_usage
from bargein.values import CancelToken, ChatMessage, GenerationOptions

PROMPT_TOKENS = 321
CACHED_TOKENS = 300


class UsageNotingLanguageModel(FakeLanguageModel):
    """The fake's reply; when it ends, notes a prompt of ``PROMPT_TOKENS`` with ``CACHED_TOKENS`` reused."""

    async def stream(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                     options: GenerationOptions | None = None) -> AsyncIterator[str]:
        """The fake's pieces, then the usage note."""
        try:
            async for piece in super().stream(messages, cancel=cancel, options=options):
                yield piece
        finally:
            note_usage({"prompt_tokens": PROMPT_TOKENS, "cached_tokens": CACHED_TOKENS})
