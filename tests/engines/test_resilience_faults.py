"""The resilience wrappers alone, with fake engines: what a turn gets when the fallback fails too."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import numpy as np
import pytest

from bargein.engines.base import SpeechSynthesizer
from bargein.engines.fakes import FakeSynthesizer
from bargein.engines.health import StageHealth
from bargein.engines.resilient_speech import ResilientSynthesizer
from bargein.engines.stage_calls import Deadlines, StageFailed
from bargein.values import CancelToken, SpeechChunk
from tests.support.faults import FaultySynthesizer

DEADLINES = Deadlines(tts_first_chunk_s=0.05, tts_next_chunk_s=0.05)


def _failing_primary() -> FaultySynthesizer:
    primary = FaultySynthesizer(FakeSynthesizer(ms_per_char=5, chunk_ms=20))
    primary.fault = "raise"
    return primary


async def _speak(tts: ResilientSynthesizer, cancel: CancelToken | None = None) -> list[SpeechChunk]:
    return [chunk async for chunk in tts.synthesize("Hello there.", voice=None, cancel=cancel or CancelToken())]


@pytest.mark.parametrize("fault", ["hang", "raise", "garbage"])
async def test_a_failing_fallback_fails_the_clause_with_stage_failed(fault: str) -> None:
    """The primary failed and the fallback hangs, raises or makes no audio: the clause fails with the stage's
    error (the session's ``error`` event names speech synthesis), within the deadline, not never."""
    fallback = FaultySynthesizer(FakeSynthesizer(ms_per_char=5, chunk_ms=20))
    fallback.fault = fault
    tts = ResilientSynthesizer(_failing_primary(), fallback, StageHealth("tts"), DEADLINES)
    with pytest.raises(StageFailed, match="speech synthesis failed"):
        await asyncio.wait_for(_speak(tts), timeout=30)


class _CancelledThenBroken(SpeechSynthesizer):
    """A fallback during which the reply is cancelled (a barge-in), and which then fails."""

    sample_rate = 24_000

    async def synthesize(self, text: str, *, voice: str | None, cancel: CancelToken,
                         speed: float = 1.0) -> AsyncIterator[SpeechChunk]:
        cancel.cancel("barge-in")
        raise RuntimeError("broken after the cancel")
        yield  # an async generator


async def test_a_fallback_that_fails_after_a_cancel_ends_quietly() -> None:
    """A reply cancelled while the fallback fails is not an error: the turn is over already."""
    tts = ResilientSynthesizer(_failing_primary(), _CancelledThenBroken(), StageHealth("tts"), DEADLINES)
    assert await asyncio.wait_for(_speak(tts), timeout=30) == []


async def test_a_working_fallback_still_speaks_the_clause() -> None:
    tts = ResilientSynthesizer(_failing_primary(), FakeSynthesizer(ms_per_char=5, chunk_ms=20), StageHealth("tts"),
                               Deadlines())
    chunks = await _speak(tts)
    assert chunks and all(np.all(np.isfinite(chunk.audio)) for chunk in chunks)
    assert tts.fallback_clauses == 1
