"""Every engine call with a deadline, each stage's health, and what the user hears when a stage fails.

Wrappers around the four engines (same protocols, so a session cannot tell them from the real ones):

- **LLM** fails or misses its deadline before its first token: the reply is a short spoken apology
  (:data:`LLM_APOLOGY`), spoken by the TTS like any reply; after some tokens, the reply ends with
  :data:`LLM_CUT_APOLOGY`. The session goes on.
- **TTS** (Kokoro) fails or misses its deadline: the clause is spoken by the fallback synthesizer
  (flite); after some of its audio, the rest of it (the words after those whose timings went out), or,
  when that cannot be told, the reply fails with an error (:mod:`bargein.engines.resilient_speech`).
- **ASR** and **VAD** fail with :class:`StageFailed` (the session reports it; see the session's turn
  handling for what the user is told).

Each stage's :class:`~bargein.engines.health.StageHealth` is *ok*, *degraded* or *down*; a down stage
is not called at all (its fallback applies at once) while a background probe retries it with backoff,
using the cheap call each wrapper provides.

Deadlines and health: each deadline (:class:`~bargein.engines.stage_calls.Deadlines`) runs from when the
session asked, so the user never waits past it, queue included. What a miss does to the stage's health
depends on where the call was: a miss before the call's first result while the stage delivered results
to other calls is the shared engine's queue (busy, not broken) and is not counted against it
(:meth:`~bargein.engines.health.StageHealth.record_miss`); a miss while nothing was delivered, a stall
after the first result, and any error the engine raised are failures, and ``down_after`` of them in a
row take the stage down for every session. A call the engine refused for load (a full queue:
:class:`~bargein.engines.fair.EngineBusy`, ``WorkerBusy``, Whisper's ``RecognizerBusy``) fails for its
caller like any failure, but is no failure of the stage (counted in ``refusals``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Hashable, Sequence

import numpy as np

from bargein.engines.base import (
    ASRCapabilities,
    Engines,
    LanguageModel,
    LLMCapabilities,
    SpeechRecognizer,
    SpeechSynthesizer,
    VadStream,
    VoiceActivityDetector,
)
from bargein.engines.fallback import llm_apology
from bargein.engines.health import Health, StageHealth
from bargein.engines.resilient_speech import ResilientSynthesizer
from bargein.engines.stage_calls import Deadlines, GuardedEngine, StageFailed, next_within, record_failed_call
from bargein.values import (
    CancelToken,
    ChatMessage,
    Float32Audio,
    GenerationOptions,
    ReplyPiece,
    ToolCall,
    Transcript,
)

log = logging.getLogger(__name__)
LLM_APOLOGY = "Sorry, I can't answer that right now. Please try again in a moment."
LLM_CUT_APOLOGY = " Sorry, I lost my train of thought."


class ResilientLanguageModel(GuardedEngine[LanguageModel], LanguageModel):
    """The LLM with deadlines; a failure becomes a spoken apology instead of silence. What it can do, its
    queue, its worker and its counters are the inner model's."""

    @property
    def capabilities(self) -> LLMCapabilities:
        """The inner model's."""
        return self.inner.capabilities

    @property
    def nonfinite_fallbacks(self) -> int:
        """The inner model's."""
        return self.inner.nonfinite_fallbacks

    def prefill(self, messages: Sequence[ChatMessage], options: GenerationOptions | None = None) -> None:
        """The inner model's prefill (no deadline: it never waits)."""
        self.inner.prefill(messages, options)

    async def text_end(self, messages: Sequence[ChatMessage], options: GenerationOptions | None = None) -> float | None:
        """The inner model's end-of-sentence estimate; None when it fails (the endpoint then goes on without it,
        and the reply that follows meets the failure itself)."""
        try:
            return await self.inner.text_end(messages, options)
        except Exception:
            log.debug("the end-of-sentence estimate failed", exc_info=True)
            return None

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
            yield llm_apology(LLM_APOLOGY, "the language model is down")
            return
        inner_cancel = CancelToken()
        link = asyncio.ensure_future(_link(cancel, inner_cancel))
        tokens: AsyncIterator[ReplyPiece]
        if tools and self.inner.capabilities.tools:
            tokens = self.inner.stream_reply(messages, cancel=inner_cancel, options=options)
        else:
            tokens = self.inner.stream(messages, cancel=inner_cancel, options=options)
        produced = 0
        since = self.health.deliveries
        try:
            while not cancel.cancelled:
                timeout = self.deadlines.llm_first_token_s if produced == 0 else self.deadlines.llm_next_token_s
                try:
                    token = await next_within(tokens, timeout)
                except StopAsyncIteration:
                    break
                except (Exception, TimeoutError) as error:
                    if cancel.cancelled:
                        return
                    inner_cancel.cancel("failed")
                    what = record_failed_call(self.health, "llm", error, since=since if produced == 0 else None)
                    log.warning("llm failed after %d token(s): %s; speaking the apology", produced, what)
                    yield llm_apology(LLM_APOLOGY if produced == 0 else LLM_CUT_APOLOGY, error)
                    return
                if not isinstance(token, str | ToolCall):
                    inner_cancel.cancel("garbage")
                    self.health.record_failure(f"llm returned {type(token).__name__}")
                    yield llm_apology(LLM_APOLOGY if produced == 0 else LLM_CUT_APOLOGY,
                                      "the language model returned no text")
                    return
                produced += 1
                self.health.record_progress()
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
            await next_within(stream, self.deadlines.llm_first_token_s)
        except StopAsyncIteration:
            pass
        finally:
            cancel.cancel("probe")
            with contextlib.suppress(Exception):
                await stream.aclose()  # type: ignore[attr-defined]


async def _link(outer: CancelToken, inner: CancelToken) -> None:
    await outer.wait()
    inner.cancel(outer.reason or "cancelled")


class ResilientRecognizer(GuardedEngine[SpeechRecognizer], SpeechRecognizer):
    """The ASR with a deadline; failures raise :class:`StageFailed`. What it can do, its queue and its worker
    are the inner recogniser's."""

    @property
    def capabilities(self) -> ASRCapabilities:
        """The inner recogniser's."""
        return self.inner.capabilities

    async def transcribe_partial(self, audio: Float32Audio, *, language: str | None = None,
                                 prompt: str | None = None, key: Hashable | None = None) -> Transcript:
        """The inner recogniser's quick partial as it comes (a guess: no deadline, no health); from one without
        a partial path, :meth:`transcribe` with its deadline."""
        if self.inner.capabilities.partial:
            return await self.inner.transcribe_partial(audio, language=language, prompt=prompt, key=key)
        return await self.transcribe(audio, language=language, prompt=prompt)

    async def transcribe(self, audio: Float32Audio, *, language: str | None = None,
                         prompt: str | None = None) -> Transcript:
        """The inner transcript, within the deadline."""
        if self.health.down:
            raise StageFailed("speech recognition is down (retrying in the background)")
        since = self.health.deliveries
        try:
            async with asyncio.timeout(self.deadlines.asr_s):
                transcript = await self.inner.transcribe(audio, language=language, prompt=prompt)
        except (Exception, TimeoutError) as error:
            what = record_failed_call(self.health, "asr", error, since=since)
            raise StageFailed("speech recognition failed", detail=what) from error
        if not isinstance(transcript, Transcript) or not isinstance(transcript.text, str):
            self.health.record_failure(f"asr returned {type(transcript).__name__}")
            raise StageFailed("speech recognition returned garbage")
        self.health.record_ok()
        return transcript

    async def _probe(self) -> None:
        await asyncio.wait_for(self.inner.transcribe(np.zeros(8000, np.float32)), self.deadlines.asr_s)


class ResilientVad(GuardedEngine[VoiceActivityDetector], VoiceActivityDetector):
    """The VAD with a deadline per frame; failures raise :class:`StageFailed`. Its queue and its worker are
    the inner model's."""

    def __init__(self, inner: VoiceActivityDetector, health: StageHealth, deadlines: Deadlines) -> None:
        super().__init__(inner, health, deadlines)
        self.frame_samples = inner.frame_samples

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
        since = health.deliveries
        try:
            async with asyncio.timeout(self.owner.deadlines.vad_frame_s):
                value = await self.inner.probability(frame)
            value = float(value)
        except (Exception, TimeoutError) as error:
            what = record_failed_call(health, "vad", error, since=since)
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
        engines.turn, description=dict(engines.description), health=health, see=engines.see)
    return wrapped
