"""One engine call under a deadline, and how its failure is told: shared by every stage's wrapper."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from bargein.protocol.errors import EngineFailure


class StageFailed(EngineFailure):
    """A stage raised, timed out, or is down; the message says which, ``detail`` why.

    An :class:`~bargein.protocol.errors.EngineFailure`, so a session that meets it tells the client which
    stage failed (the message) rather than a bare "internal error"; the detail (the inner error's text,
    which may name upstream addresses) goes to the log only.
    """

    def __init__(self, message: str, *, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail

    def __str__(self) -> str:
        return f"{self.message}: {self.detail}" if self.detail else self.message


@dataclass(frozen=True)
class Deadlines:
    """Seconds each engine call may take before it counts as failed."""

    llm_first_token_s: float = 15.0
    llm_next_token_s: float = 5.0
    tts_first_chunk_s: float = 5.0
    tts_next_chunk_s: float = 5.0
    asr_s: float = 10.0
    vad_frame_s: float = 5.0


def what_failed(error: BaseException) -> str:
    """An engine call's failure in a few words, for the health record and the log."""
    return "timed out" if isinstance(error, TimeoutError) else f"{type(error).__name__}: {error}"


async def next_within(iterator: AsyncIterator[Any], timeout_s: float) -> Any:
    """The next item, or StopAsyncIteration; TimeoutError past the deadline."""
    # asyncio.timeout rather than wait_for: no extra task per token or frame
    async with asyncio.timeout(timeout_s):
        return await anext(iterator)
