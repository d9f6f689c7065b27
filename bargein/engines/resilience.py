"""Every engine call with a deadline, each stage's health, and what the user hears when a stage fails.

Wrappers around the four engines (same protocols, so a session cannot tell them from the real ones):

- **LLM** fails or misses its deadline before its first token: the reply is a short spoken apology
  (:data:`LLM_APOLOGY`), spoken by the TTS like any reply; after some tokens, the reply ends with
  :data:`LLM_CUT_APOLOGY`. The session goes on.
- **TTS** (Kokoro) fails or misses its deadline: the clause is spoken by the fallback synthesizer
  (flite); after some of its audio, the rest of it (the words after those whose timings went out), or,
  when that cannot be told, the reply fails with an error.
- **ASR** and **VAD** fail with :class:`StageFailed` (the session reports it; see the session's turn
  handling for what the user is told).

Each stage's :class:`~bargein.engines.health.StageHealth` is *ok*, *degraded* or *down*; a down stage
is not called at all (its fallback applies at once) while a background probe retries it with backoff,
using the cheap call each wrapper provides.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bargein.audio.resample import resample
from bargein.engines.base import (
    CancelToken,
    ChatMessage,
    Engines,
    Float32Audio,
    GenerationOptions,
    LanguageModel,
    ReplyPiece,
    SpeechChunk,
    SpeechRecognizer,
    SpeechSynthesizer,
    ToolCall,
    ToolCallingModel,
    Transcript,
    VadStream,
    VoiceActivityDetector,
)
from bargein.engines.health import Health, StageHealth
from bargein.protocol.errors import EngineFailure

log = logging.getLogger(__name__)
LLM_APOLOGY = "Sorry, I can't answer that right now. Please try again in a moment."
LLM_CUT_APOLOGY = " Sorry, I lost my train of thought."


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


async def _within_deadlines(chunks: AsyncIterator[SpeechChunk], deadlines: Deadlines,
                            who: str) -> AsyncGenerator[SpeechChunk, None]:
    """``chunks``, each within its deadline (the first chunk's, then the next's) and checked for sound; raises
    ``TimeoutError`` or :class:`StageFailed` (unusable audio); closes ``chunks`` however it ends."""
    produced = 0
    try:
        while True:
            timeout = deadlines.tts_first_chunk_s if produced == 0 else deadlines.tts_next_chunk_s
            try:
                chunk = await _next(chunks, timeout)
            except StopAsyncIteration:
                return
            if not _sound(chunk):
                raise StageFailed(f"{who} returned unusable audio ({type(chunk).__name__})")
            produced += 1
            yield chunk
    finally:
        with contextlib.suppress(Exception):
            await chunks.aclose()  # type: ignore[attr-defined]


async def _next(iterator: AsyncIterator[Any], timeout_s: float) -> Any:
    """The next item, or StopAsyncIteration; TimeoutError past the deadline."""
    # asyncio.timeout rather than wait_for: no extra task per token or frame
    async with asyncio.timeout(timeout_s):
        return await anext(iterator)


class ResilientLanguageModel:
    """The LLM with deadlines; a failure becomes a spoken apology instead of silence."""

    def __init__(self, inner: LanguageModel, health: StageHealth, deadlines: Deadlines) -> None:
        self.inner = inner
        self.health = health
        self.deadlines = deadlines
        health.probe = self._probe

    def __getattr__(self, name: str) -> Any:  # queue_depth, nonfinite_fallbacks, pid...
        return getattr(self.inner, name)

    async def stream(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                     options: GenerationOptions | None = None) -> AsyncIterator[str]:
        """The inner model's tokens, or the apology when it fails (the session hears something)."""
        async for piece in self._guarded(messages, cancel, options, tools=False):
            if isinstance(piece, str):
                yield piece

    async def stream_reply(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                           options: GenerationOptions | None = None) -> AsyncIterator[ReplyPiece]:
        """Text and tool calls from a tool-calling inner model (plain text from any other), guarded alike."""
        async for piece in self._guarded(messages, cancel, options, tools=True):
            yield piece

    async def _guarded(self, messages: Sequence[ChatMessage], cancel: CancelToken,
                       options: GenerationOptions | None, *, tools: bool) -> AsyncIterator[ReplyPiece]:
        if self.health.down:
            yield LLM_APOLOGY
            return
        inner_cancel = CancelToken()
        link = asyncio.ensure_future(_link(cancel, inner_cancel))
        tokens: AsyncIterator[ReplyPiece]
        if tools and isinstance(self.inner, ToolCallingModel):
            tokens = self.inner.stream_reply(messages, cancel=inner_cancel, options=options)
        else:
            tokens = self.inner.stream(messages, cancel=inner_cancel, options=options)
        produced = 0
        try:
            while not cancel.cancelled:
                timeout = self.deadlines.llm_first_token_s if produced == 0 else self.deadlines.llm_next_token_s
                try:
                    token = await _next(tokens, timeout)
                except StopAsyncIteration:
                    break
                except (Exception, TimeoutError) as error:
                    if cancel.cancelled:
                        return
                    inner_cancel.cancel("failed")
                    what = "timed out" if isinstance(error, TimeoutError) else f"{type(error).__name__}: {error}"
                    log.warning("llm failed after %d token(s): %s; speaking the apology", produced, what)
                    self.health.record_failure(f"llm {what}"[:300])
                    yield LLM_APOLOGY if produced == 0 else LLM_CUT_APOLOGY
                    return
                if not isinstance(token, str | ToolCall):
                    inner_cancel.cancel("garbage")
                    self.health.record_failure(f"llm returned {type(token).__name__}")
                    yield LLM_APOLOGY if produced == 0 else LLM_CUT_APOLOGY
                    return
                produced += 1
                yield token
            if not cancel.cancelled:
                self.health.record_ok()
        finally:
            inner_cancel.cancel("done")
            link.cancel()
            with contextlib.suppress(Exception):
                await tokens.aclose()  # type: ignore[attr-defined]

    async def _probe(self) -> None:
        cancel = CancelToken()
        stream = self.inner.stream([ChatMessage("user", "Hi")], cancel=cancel,
                                   options=GenerationOptions(max_tokens=1))
        try:
            await _next(stream, self.deadlines.llm_first_token_s)
        except StopAsyncIteration:
            pass
        finally:
            cancel.cancel("probe")
            with contextlib.suppress(Exception):
                await stream.aclose()  # type: ignore[attr-defined]


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


async def _link(outer: CancelToken, inner: CancelToken) -> None:
    await outer.wait()
    inner.cancel(outer.reason or "cancelled")


class ResilientSynthesizer:
    """The TTS with deadlines; a clause the primary cannot speak is spoken by the fallback."""

    def __init__(self, primary: SpeechSynthesizer, fallback: SpeechSynthesizer | None, health: StageHealth,
                 deadlines: Deadlines) -> None:
        self.primary = primary
        self.fallback = fallback
        self.health = health
        self.deadlines = deadlines
        self.sample_rate = primary.sample_rate
        self.fallback_clauses = 0
        """Clauses the fallback spoke."""
        health.probe = self._probe

    def __getattr__(self, name: str) -> Any:
        return getattr(self.primary, name)

    async def synthesize(self, text: str, *, voice: str | None, cancel: CancelToken,
                         speed: float = 1.0) -> AsyncIterator[SpeechChunk]:
        """The primary's chunks; when it fails, the fallback speaks what it had not said (the whole clause,
        or the rest after the words already out), at the primary's rate."""
        if not self.health.down:
            chunks = _within_deadlines(self.primary.synthesize(text, voice=voice, cancel=cancel, speed=speed),
                                       self.deadlines, "tts")
            produced = 0
            said: list[str] = []
            try:
                async for chunk in chunks:
                    produced += 1
                    said.extend(word.word for word in chunk.words)
                    yield chunk
                self.health.record_ok()
                return
            except (Exception, TimeoutError) as error:
                if cancel.cancelled:
                    return
                what = "timed out" if isinstance(error, TimeoutError) else f"{type(error).__name__}: {error}"
                self.health.record_failure(f"tts {what}"[:300])
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
        self.fallback_clauses += 1
        # the fallback keeps the same deadlines and checks: a wedged one must not hold the reply for good
        spoken = _within_deadlines(self.fallback.synthesize(text, voice=voice, cancel=cancel, speed=speed),
                                   self.deadlines, "the fallback tts")
        try:
            async for chunk in spoken:
                if chunk.sample_rate != self.sample_rate:
                    chunk = SpeechChunk(resample(chunk.audio, chunk.sample_rate, self.sample_rate),
                                        self.sample_rate, chunk.words)
                yield chunk
        except (Exception, TimeoutError) as error:
            if cancel.cancelled:
                return
            what = "timed out" if isinstance(error, TimeoutError) else f"{type(error).__name__}: {error}"
            raise StageFailed("speech synthesis failed (its fallback too)", detail=what) from error
        finally:
            await spoken.aclose()

    async def _probe(self) -> None:
        cancel = CancelToken()
        stream = self.primary.synthesize("OK.", voice=None, cancel=cancel)
        try:
            await _next(stream, self.deadlines.tts_first_chunk_s)
        finally:
            cancel.cancel("probe")
            with contextlib.suppress(Exception):
                await stream.aclose()  # type: ignore[attr-defined]


class ResilientRecognizer:
    """The ASR with a deadline; failures raise :class:`StageFailed`."""

    def __init__(self, inner: SpeechRecognizer, health: StageHealth, deadlines: Deadlines) -> None:
        self.inner = inner
        self.health = health
        self.deadlines = deadlines
        health.probe = self._probe

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def transcribe(self, audio: Float32Audio, *, language: str | None = None,
                         prompt: str | None = None) -> Transcript:
        """The inner transcript, within the deadline."""
        if self.health.down:
            raise StageFailed("speech recognition is down (retrying in the background)")
        try:
            async with asyncio.timeout(self.deadlines.asr_s):
                transcript = await self.inner.transcribe(audio, language=language, prompt=prompt)
        except (Exception, TimeoutError) as error:
            what = "timed out" if isinstance(error, TimeoutError) else f"{type(error).__name__}: {error}"
            self.health.record_failure(f"asr {what}"[:300])
            raise StageFailed("speech recognition failed", detail=what) from error
        if not isinstance(transcript, Transcript) or not isinstance(transcript.text, str):
            self.health.record_failure(f"asr returned {type(transcript).__name__}")
            raise StageFailed("speech recognition returned garbage")
        self.health.record_ok()
        return transcript

    async def _probe(self) -> None:
        await asyncio.wait_for(self.inner.transcribe(np.zeros(8000, np.float32)), self.deadlines.asr_s)


class ResilientVad:
    """The VAD with a deadline per frame; failures raise :class:`StageFailed`."""

    def __init__(self, inner: VoiceActivityDetector, health: StageHealth, deadlines: Deadlines) -> None:
        self.inner = inner
        self.health = health
        self.deadlines = deadlines
        self.frame_samples = inner.frame_samples
        health.probe = self._probe

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def open_stream(self) -> VadStream:
        """A per-session stream whose frames have a deadline."""
        return _ResilientVadStream(self.inner.open_stream(), self)

    async def _probe(self) -> None:
        stream = self.inner.open_stream()
        try:
            await asyncio.wait_for(stream.probability(np.zeros(self.frame_samples, np.float32)),
                                   self.deadlines.vad_frame_s)
        finally:
            stream.close()


class _ResilientVadStream:
    def __init__(self, inner: VadStream, owner: ResilientVad) -> None:
        self.inner = inner
        self.owner = owner

    async def probability(self, frame: Float32Audio) -> float:
        health = self.owner.health
        if health.down:
            raise StageFailed("voice activity detection is down (retrying in the background)")
        try:
            async with asyncio.timeout(self.owner.deadlines.vad_frame_s):
                value = await self.inner.probability(frame)
            value = float(value)
        except (Exception, TimeoutError) as error:
            what = "timed out" if isinstance(error, TimeoutError) else f"{type(error).__name__}: {error}"
            health.record_failure(f"vad {what}"[:300])
            raise StageFailed("voice activity detection failed", detail=what) from error
        if not 0.0 <= value <= 1.0:  # NaN fails this too
            health.record_failure(f"vad returned {value}")
            raise StageFailed(f"voice activity detection returned {value}")
        health.record_ok()
        return value

    def reset(self) -> None:
        self.inner.reset()

    def close(self) -> None:
        self.inner.close()


def make_resilient(engines: Engines, *, fallback_tts: SpeechSynthesizer | None = None,
                   deadlines: Deadlines | None = None, health: Health | None = None) -> Engines:
    """The same engines behind deadlines and health tracking (``engines.health`` set)."""
    deadlines = deadlines or Deadlines()
    health = health or Health()
    wrapped = Engines(
        ResilientVad(engines.vad, health["vad"], deadlines),
        ResilientRecognizer(engines.asr, health["asr"], deadlines),
        ResilientLanguageModel(engines.llm, health["llm"], deadlines),
        ResilientSynthesizer(engines.tts, fallback_tts, health["tts"], deadlines),
        engines.turn, description=dict(engines.description), health=health)
    return wrapped
