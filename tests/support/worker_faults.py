"""Engines for worker processes that kill their own process on command (fault-injection tests only).

A test arms the fault by creating the flag file; the next final recognition (not a partial) or the next
clause the wrapped engine is asked for removes the flag and SIGKILLs the worker before answering, as a
segfault in native code would, so the kill lands mid-request every time.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Hashable
from pathlib import Path
from typing import Any

from bargein.engines.base import ASRCapabilities, SpeechRecognizer, SpeechSynthesizer
from bargein.engines.process.wire import WorkerSpec
from bargein.values import CancelToken, Float32Audio, SpeechChunk, Transcript


def _strike(flag: Path) -> None:
    try:
        flag.unlink()
    except FileNotFoundError:
        return
    os.kill(os.getpid(), signal.SIGKILL)


class KillOnFinal(SpeechRecognizer):
    """A recogniser that kills its worker on a final transcription while ``flag`` exists."""

    def __init__(self, inner: WorkerSpec, flag: str) -> None:
        self.inner: Any = inner.build_engine()[0]
        self.flag = Path(flag)

    @property
    def capabilities(self) -> ASRCapabilities:
        """The inner recogniser's languages, and its partial path."""
        return ASRCapabilities(partial=True, languages=self.inner.capabilities.languages)

    async def transcribe(self, audio: Float32Audio, *, language: str | None = None,
                         prompt: str | None = None) -> Transcript:
        """The inner final transcript, unless armed."""
        _strike(self.flag)
        transcript: Transcript = await self.inner.transcribe(audio, language=language, prompt=prompt)
        return transcript

    async def transcribe_partial(self, audio: Float32Audio, *, language: str | None = None,
                                 prompt: str | None = None, key: Hashable | None = None) -> Transcript:
        """The inner partial (never armed)."""
        transcript: Transcript = await self.inner.transcribe_partial(audio, language=language, prompt=prompt,
                                                                     key=key)
        return transcript


class KillOnClause(SpeechSynthesizer):
    """A voice that kills its worker when asked for a clause while ``flag`` exists."""

    def __init__(self, inner: WorkerSpec, flag: str) -> None:
        self.inner: Any = inner.build_engine()[0]
        self.flag = Path(flag)
        self.sample_rate: int = self.inner.sample_rate

    async def synthesize(self, text: str, *, voice: str | None, cancel: CancelToken,
                         speed: float = 1.0) -> AsyncIterator[SpeechChunk]:
        """The inner chunks, unless armed."""
        _strike(self.flag)
        async for chunk in self.inner.synthesize(text, voice=voice, cancel=cancel, speed=speed):
            yield chunk
