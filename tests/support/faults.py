"""Engines that fail on command, mid-turn: raise, hang, return garbage (fault-injection tests only).

Each wrapper has a ``fault`` attribute a test sets while the server runs: ``None`` (behave), ``"raise"``,
``"hang"`` or ``"garbage"``; ``after`` is how many tokens/chunks go out normally first, so the fault lands
mid-turn.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import numpy as np

from bargein.engines.base import LanguageModel, SpeechRecognizer, SpeechSynthesizer, VadStream, VoiceActivityDetector
from bargein.values import (
    CancelToken,
    ChatMessage,
    Float32Audio,
    GenerationOptions,
    SpeechChunk,
    Transcript,
    WordTiming,
)


class InjectedFault(RuntimeError):
    """The failure a test asked for."""


async def strike(fault: str | None, stage: str) -> None:
    """Carry out a ``raise`` or ``hang`` fault (``garbage`` is each engine's own)."""
    if fault == "raise":
        raise InjectedFault(f"{stage} fault")
    if fault == "hang":
        await asyncio.sleep(3600)


class FaultyLanguageModel(LanguageModel):
    """An LLM that fails on command after ``after`` tokens."""

    def __init__(self, inner: LanguageModel) -> None:
        self.inner = inner
        self.fault: str | None = None
        self.after = 0
        self.calls = 0

    async def stream(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                     options: GenerationOptions | None = None) -> AsyncIterator[str]:
        """The inner tokens until the fault strikes."""
        self.calls += 1
        produced = 0
        async for token in self.inner.stream(messages, cancel=cancel, options=options):
            if self.fault is not None and produced >= self.after:
                await strike(self.fault, "llm")
                yield None  # type: ignore[misc]  # garbage: not text
                return
            produced += 1
            yield token


class FaultySynthesizer(SpeechSynthesizer):
    """A TTS that fails on command after ``after`` chunks of a clause."""

    def __init__(self, inner: SpeechSynthesizer) -> None:
        self.inner = inner
        self.sample_rate = inner.sample_rate
        self.fault: str | None = None
        self.after = 0
        self.calls = 0
        self.wrong_words = False
        """Time words the text does not have (so what was said cannot be placed in it)."""

    async def synthesize(self, text: str, *, voice: str | None, cancel: CancelToken,
                         speed: float = 1.0) -> AsyncIterator[SpeechChunk]:
        """The inner chunks until the fault strikes."""
        self.calls += 1
        produced = 0
        async for chunk in self.inner.synthesize(text, voice=voice, cancel=cancel, speed=speed):
            if self.fault is not None and produced >= self.after:
                await strike(self.fault, "tts")
                yield SpeechChunk(np.full(480, np.nan, np.float32), chunk.sample_rate)  # garbage: not audio
                return
            produced += 1
            if self.wrong_words:
                chunk = SpeechChunk(chunk.audio, chunk.sample_rate, (WordTiming("zzz", 0.0, 1.0),))
            yield chunk


class FaultyRecognizer(SpeechRecognizer):
    """An ASR that fails on command."""

    def __init__(self, inner: SpeechRecognizer) -> None:
        self.inner = inner
        self.fault: str | None = None

    async def transcribe(self, audio: Float32Audio, *, language: str | None = None,
                         prompt: str | None = None) -> Transcript:
        """The inner transcript unless a fault is set."""
        await strike(self.fault, "asr")
        if self.fault == "garbage":
            return "not a transcript"  # type: ignore[return-value]
        return await self.inner.transcribe(audio, language=language, prompt=prompt)


class FaultyVad(VoiceActivityDetector):
    """A VAD whose streams fail on command."""

    def __init__(self, inner: VoiceActivityDetector) -> None:
        self.inner = inner
        self.frame_samples = inner.frame_samples
        self.fault: str | None = None

    def open_stream(self) -> VadStream:
        """A stream that consults ``fault`` on every frame."""
        return _FaultyVadStream(self.inner.open_stream(), self)


class _FaultyVadStream:
    def __init__(self, inner: VadStream, owner: FaultyVad) -> None:
        self.inner = inner
        self.owner = owner

    async def probability(self, frame: Float32Audio) -> float:
        await strike(self.owner.fault, "vad")
        if self.owner.fault == "garbage":
            return float("nan")
        return await self.inner.probability(frame)

    def reset(self) -> None:
        self.inner.reset()

    def close(self) -> None:
        self.inner.close()
