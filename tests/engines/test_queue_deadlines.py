"""Deadlines that include a shared engine's queue: a busy engine is not marked down, a stuck one is, and the
fallback's wait for a flite slot is not taken for a flite that does not answer."""

from __future__ import annotations

import asyncio
import stat
import wave
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np
import pytest

from bargein.engines.base import LanguageModel, SpeechRecognizer, SpeechSynthesizer
from bargein.engines.fakes import FakeSynthesizer
from bargein.engines.health import StageHealth
from bargein.engines.resilience import LLM_APOLOGY, ResilientLanguageModel, ResilientRecognizer
from bargein.engines.resilient_speech import ResilientSynthesizer
from bargein.engines.speak.flite_tts import FliteSynthesizer
from bargein.engines.stage_calls import Deadlines, StageFailed
from bargein.values import CancelToken, ChatMessage, GenerationOptions, SpeechChunk, Transcript
from tests.support.faults import FaultySynthesizer

AUDIO = np.zeros(1600, np.float32)
T = TypeVar("T")


class _Queue:
    """A shared engine's queue, long enough that ``size`` calls of ours wait in it past their deadline; calls of
    another session (marked ``other``) are served at once, as if their turn had come."""

    def __init__(self, size: int = 3) -> None:
        self.size = size
        self.waiting = 0
        self.full = asyncio.Event()

    async def wait_for_good(self) -> None:
        self.waiting += 1
        if self.waiting == self.size:
            self.full.set()
        await asyncio.Event().wait()


class _BusyRecognizer(_Queue, SpeechRecognizer):
    async def transcribe(self, audio: np.ndarray, *, language: str | None = None,
                         prompt: str | None = None) -> Transcript:
        if language == "other":
            return Transcript("served")
        await self.wait_for_good()
        raise AssertionError("never served")


class _BusyLanguageModel(_Queue, LanguageModel):
    async def stream(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                     options: GenerationOptions | None = None) -> AsyncIterator[str]:
        if messages[-1].content == "other":
            for token in ("Another ", "session's ", "reply."):
                yield token
            return
        await self.wait_for_good()
        yield "never"


class _BusySynthesizer(_Queue, SpeechSynthesizer):
    sample_rate = 24_000

    async def synthesize(self, text: str, *, voice: str | None, cancel: CancelToken,
                         speed: float = 1.0) -> AsyncIterator[SpeechChunk]:
        if text == "other":
            yield SpeechChunk(np.full(240, 0.1, np.float32), self.sample_rate)
            return
        await self.wait_for_good()
        yield SpeechChunk(np.zeros(10, np.float32), self.sample_rate)


async def _while_queued(engine: _Queue, ours: list[Awaitable[T]], other: Callable[[], Awaitable[object]]) -> list[T]:
    """Our calls, started together: once all of them wait in the engine's queue, another session's call is
    served; then ours reach their deadlines."""
    calls = [asyncio.ensure_future(call) for call in ours]
    await asyncio.wait_for(engine.full.wait(), timeout=30)
    await other()
    return await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), timeout=30)  # type: ignore[arg-type]


async def test_asr_misses_in_a_busy_queue_do_not_take_the_stage_down() -> None:
    """Three calls in a row time out for their users (the deadline holds), but the engine answered another
    session meanwhile: it is busy, not broken, so every session keeps using it (it used to go down)."""
    engine = _BusyRecognizer()
    health = StageHealth("asr")
    asr = ResilientRecognizer(engine, health, Deadlines(asr_s=0.1))
    results = await _while_queued(engine, [asr.transcribe(AUDIO) for _ in range(3)],
                                  lambda: asr.transcribe(AUDIO, language="other"))
    assert all(isinstance(result, StageFailed) and "timed out" in str(result) for result in results)
    assert health.state == "ok"
    assert (health.failures, health.queue_misses) == (0, 3)
    assert health.snapshot()["queue_misses"] == 3


async def test_asr_that_answers_nobody_still_goes_down() -> None:
    """A stuck engine delivers nothing to anyone: its misses are failures, and it goes down as before."""
    engine = _BusyRecognizer(size=99)
    health = StageHealth("asr")
    asr = ResilientRecognizer(engine, health, Deadlines(asr_s=0.02))
    for _ in range(3):
        with pytest.raises(StageFailed):
            await asyncio.wait_for(asr.transcribe(AUDIO), timeout=30)
    assert health.state == "down"
    assert health.queue_misses == 0
    health.close()


async def _reply(llm: ResilientLanguageModel, text: str) -> list[str]:
    return [token async for token in llm.stream([ChatMessage("user", text)], cancel=CancelToken())]


async def test_llm_first_token_misses_in_a_busy_queue_do_not_take_the_stage_down() -> None:
    engine = _BusyLanguageModel()
    health = StageHealth("llm")
    llm = ResilientLanguageModel(engine, health, Deadlines(llm_first_token_s=0.1))
    replies = await _while_queued(engine, [_reply(llm, "hi") for _ in range(3)], lambda: _reply(llm, "other"))
    assert replies == [[LLM_APOLOGY]] * 3  # the users still hear the apology at the deadline
    assert health.state == "ok"
    assert (health.failures, health.queue_misses) == (0, 3)


async def _speak(tts: ResilientSynthesizer, text: str) -> list[SpeechChunk]:
    return [chunk async for chunk in tts.synthesize(text, voice=None, cancel=CancelToken())]


async def test_tts_first_chunk_misses_in_a_busy_queue_do_not_take_the_stage_down() -> None:
    engine = _BusySynthesizer()
    health = StageHealth("tts")
    tts = ResilientSynthesizer(engine, FakeSynthesizer(ms_per_char=5, chunk_ms=20), health,
                               Deadlines(tts_first_chunk_s=0.1))
    clauses = await _while_queued(engine, [_speak(tts, "Hello there.") for _ in range(3)], lambda: _speak(tts, "other"))
    assert all(clauses)  # spoken by the fallback at the deadline
    assert tts.fallback_clauses == 3
    assert health.state == "ok"
    assert (health.failures, health.queue_misses) == (0, 3)


# -- the flite fallback's slots --------------------------------------------------------------------------

def _fake_flite(folder: Path) -> Path:
    """A stand-in for the flite program (lists one voice, "speaks" a prepared WAV at once)."""
    wav = folder / "speech.wav"
    with wave.open(str(wav), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(16_000)
        out.writeframes((np.sin(np.arange(4000) / 5.0) * 8000).astype("<i2").tobytes())
    script = folder / "flite"
    script.write_text(f"""#!/bin/sh
if [ "$1" = "-lv" ]; then echo "Voices available: slt"; exit 0; fi
for last; do :; done
cp {wav} "$last"
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def _failing_primary() -> FaultySynthesizer:
    primary = FaultySynthesizer(FakeSynthesizer(ms_per_char=5, chunk_ms=20))
    primary.fault = "raise"
    return primary


async def test_a_fallback_clause_waiting_for_a_flite_slot_is_still_spoken(tmp_path: Path) -> None:
    """Every flite slot is taken for longer than the first-chunk deadline: the clause waits its turn, then flite
    has the whole deadline for it (before, the wait used it up and the reply failed)."""
    flite = FliteSynthesizer(binary=str(_fake_flite(tmp_path)), max_processes=1)
    deadline = 1.0
    tts = ResilientSynthesizer(_failing_primary(), flite, StageHealth("tts"),
                               Deadlines(tts_first_chunk_s=deadline, tts_fallback_queue_s=60.0))
    slot = flite._slots.setdefault(asyncio.get_running_loop(), asyncio.Semaphore(1))
    await slot.acquire()  # another clause's flite process holds the only slot
    speaking = asyncio.ensure_future(asyncio.wait_for(_speak(tts, "Hello there."), timeout=60))
    await asyncio.sleep(1.5 * deadline)  # past the deadline counted from the ask
    assert not speaking.done()
    slot.release()
    chunks = await speaking
    assert chunks and chunks[0].sample_rate == tts.sample_rate


async def test_a_fallback_clause_does_not_wait_for_a_flite_slot_for_good(tmp_path: Path) -> None:
    flite = FliteSynthesizer(binary=str(_fake_flite(tmp_path)), max_processes=1)
    tts = ResilientSynthesizer(_failing_primary(), flite, StageHealth("tts"),
                               Deadlines(tts_first_chunk_s=0.05, tts_fallback_queue_s=0.2))
    slot = flite._slots.setdefault(asyncio.get_running_loop(), asyncio.Semaphore(1))
    await slot.acquire()  # held for good
    with pytest.raises(StageFailed, match="its fallback too"):
        await asyncio.wait_for(_speak(tts, "Hello there."), timeout=30)
    slot.release()

