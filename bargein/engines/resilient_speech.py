"""The TTS stage with deadlines: a clause the primary synthesizer cannot speak is spoken by the fallback."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Sequence

import numpy as np

from bargein.audio.resample import resample
from bargein.engines.base import SpeechSynthesizer, TTSCapabilities
from bargein.engines.health import StageHealth
from bargein.engines.stage_calls import (
    Deadlines,
    GuardedEngine,
    StageFailed,
    next_within,
    record_failed_call,
    what_failed,
)
from bargein.values import CancelToken, SpeechChunk

log = logging.getLogger(__name__)


async def _within_deadlines(chunks: AsyncIterator[SpeechChunk], deadlines: Deadlines, who: str, *,
                            queue_s: float | None = None) -> AsyncGenerator[SpeechChunk, None]:
    """``chunks``, each within its deadline (the first chunk's, then the next's; with ``queue_s``, from when
    the engine serves it: :func:`~bargein.engines.stage_calls.next_within`) and checked for sound; raises
    ``TimeoutError`` or :class:`StageFailed` (unusable audio); closes ``chunks`` however it ends."""
    produced = 0
    try:
        while True:
            timeout = deadlines.tts_first_chunk_s if produced == 0 else deadlines.tts_next_chunk_s
            try:
                chunk = await next_within(chunks, timeout, queue_s=queue_s)
            except StopAsyncIteration:
                return
            if not _sound(chunk):
                raise StageFailed(f"{who} returned unusable audio ({type(chunk).__name__})")
            produced += 1
            yield chunk
    finally:
        with contextlib.suppress(Exception):
            await chunks.aclose()  # type: ignore[attr-defined]


def _sound(chunk: object) -> bool:
    """A chunk a client can play: float audio, finite, in range."""
    if not isinstance(chunk, SpeechChunk) or not isinstance(chunk.audio, np.ndarray) or chunk.sample_rate <= 0:
        return False
    return bool(np.all(np.isfinite(chunk.audio))) and float(np.max(np.abs(chunk.audio), initial=0.0)) <= 4.0


def unspoken(text: str, said: Sequence[str]) -> str | None:
    """What of ``text`` comes after the words ``said`` (the word timings of the audio already out), or
    None when they are not a prefix of it (so the rest cannot be told apart)."""
    position = 0
    for character in "".join(said):
        if character.isspace():
            continue
        while position < len(text) and text[position].isspace():
            position += 1
        if position == len(text) or text[position] != character:
            return None
        position += 1
    return text[position:]


class ResilientSynthesizer(GuardedEngine[SpeechSynthesizer], SpeechSynthesizer):
    """The TTS with deadlines; a clause the primary cannot speak is spoken by the fallback. Its voices, its
    queue and its worker are the primary's."""

    def __init__(self, primary: SpeechSynthesizer, fallback: SpeechSynthesizer | None, health: StageHealth,
                 deadlines: Deadlines) -> None:
        super().__init__(primary, health, deadlines)
        self.fallback = fallback
        self.sample_rate = primary.sample_rate
        self.fallback_clauses = 0
        """Clauses the fallback spoke."""

    @property
    def capabilities(self) -> TTSCapabilities:
        """The primary's voices."""
        return self.inner.capabilities

    def resolve_voice(self, voice: str | None) -> str | None:
        """The primary's voice for ``voice``."""
        return self.inner.resolve_voice(voice)

    async def synthesize(self, text: str, *, voice: str | None, cancel: CancelToken,
                         speed: float = 1.0) -> AsyncIterator[SpeechChunk]:
        """The primary's chunks; when it fails, the fallback speaks what it had not said (the whole clause,
        or the rest after the words already out), at the primary's rate."""
        if not self.health.down:
            chunks = _within_deadlines(self.inner.synthesize(text, voice=voice, cancel=cancel, speed=speed),
                                       self.deadlines, "tts")
            produced = 0
            said: list[str] = []
            since = self.health.deliveries
            try:
                async for chunk in chunks:
                    produced += 1
                    self.health.record_progress()
                    said.extend(word.word for word in chunk.words)
                    yield chunk
                self.health.record_ok()
                return
            except (Exception, TimeoutError) as error:
                if cancel.cancelled:
                    return
                what = record_failed_call(self.health, "tts", error, since=since if produced == 0 else None)
                rest = unspoken(text, said) if produced else text
                if rest is None or self.fallback is None:
                    raise StageFailed("speech synthesis failed", detail=what) from error
                if not rest.strip():  # every word was already out (a worker died after the clause's audio)
                    return
                log.warning("tts failed (%s); the fallback speaks %s", what, "the rest of this clause"
                            if produced else "this clause")
                text = rest
            finally:
                await chunks.aclose()
        if self.fallback is None:
            raise StageFailed("speech synthesis is down and there is no fallback")
        # the fallback's own failures (a refusal for load or not) are not the primary's: the stage's health,
        # which decides whether the primary is tried, records none of them
        self.fallback_clauses += 1
        # the fallback keeps the same deadlines and checks (a wedged one must not hold the reply for good), counted
        # from when it serves the clause: a burst of fallback clauses waits for flite's slots, up to a bound
        spoken = _within_deadlines(self.fallback.synthesize(text, voice=voice, cancel=cancel, speed=speed),
                                   self.deadlines, "the fallback tts", queue_s=self.deadlines.tts_fallback_queue_s)
        try:
            async for chunk in spoken:
                if chunk.sample_rate != self.sample_rate:
                    chunk = SpeechChunk(resample(chunk.audio, chunk.sample_rate, self.sample_rate),
                                        self.sample_rate, chunk.words)
                yield chunk
        except (Exception, TimeoutError) as error:
            if cancel.cancelled:
                return
            what = what_failed(error)
            raise StageFailed("speech synthesis failed (its fallback too)", detail=what) from error
        finally:
            await spoken.aclose()

    async def _probe(self) -> None:
        cancel = CancelToken()
        stream = self.inner.synthesize("OK.", voice=None, cancel=cancel)
        try:
            await next_within(stream, self.deadlines.tts_first_chunk_s)
        finally:
            cancel.cancel("probe")
            with contextlib.suppress(Exception):
                await stream.aclose()  # type: ignore[attr-defined]
