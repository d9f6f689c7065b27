"""Engines that are clients of the Ray Serve deployments: the same protocols as the in-process ones.

A session cannot tell them from local engines. What differs is failure: a replica that dies or does
not answer within the deadline raises :class:`RemoteEngineFailure` from that one call, which costs the
turn that made it (the reply ends with an ``engine_error``), never the session; the next call goes to
whichever replica Serve has brought back. The VAD is the exception: a frame whose remote inference
fails counts as silence (a lost frame, logged), so a session keeps listening while a replica restarts.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import numpy as np

from bargein.engines.base import (
    LanguageModel,
    LLMCapabilities,
    SpeechRecognizer,
    VadStream,
    VoiceActivityDetector,
)
from bargein.engines.fair import EngineBusy, refused
from bargein.engines.listen.silero_vad import CONTEXT_SAMPLES, FRAME_SAMPLES, STATE_SHAPE
from bargein.engines.speak.voice_list import ListedVoices
from bargein.values import (
    CancelToken,
    ChatMessage,
    Float32Audio,
    GenerationOptions,
    ReplyPiece,
    SpeechChunk,
    ToolCall,
    Transcript,
)

log = logging.getLogger(__name__)
VAD_FAILURE_LOG_EVERY_S = 5.0


class RemoteEngineFailure(RuntimeError):
    """A remote stage failed or timed out on one call (the replica died, or the cluster is gone)."""


class RemoteEngineBusy(RemoteEngineFailure, EngineBusy):
    """A remote stage refused one call for load (a replica's engine queue, or Serve's own, was full): the call
    fails, but the stage is not held to be broken (:mod:`bargein.engines.health`)."""


def _remote_failure(stage: str, error: Exception) -> RemoteEngineFailure:
    """What a remote call's ``error`` is to its caller: a refusal for load, or a failure."""
    kind = RemoteEngineBusy if refused(error) else RemoteEngineFailure
    return kind(f"remote {stage}: {type(error).__name__}: {error}"[:400])


class _InFlight:
    """Counts calls in flight, the stage's ``queue_depth`` as this worker sees it."""

    def __init__(self) -> None:
        self.in_flight = 0

    @property
    def queue_depth(self) -> int:
        """Calls this worker has in flight to the deployment."""
        return self.in_flight


class RemoteVad(_InFlight, VoiceActivityDetector):
    """Silero VAD on a Ray Serve deployment; each stream keeps its state here and sends it along."""

    frame_samples = FRAME_SAMPLES

    def __init__(self, handle: Any, timeout_s: float) -> None:
        super().__init__()
        self.handle = handle
        self.timeout_s = timeout_s
        self.failures = 0
        self._last_failure_log = 0.0

    def open_stream(self) -> VadStream:
        """A new stream starting from silence."""
        return RemoteVadStream(self)

    def failed(self, error: BaseException) -> None:
        """Count a lost frame; log at most every few seconds (a dead replica loses 31 frames a second)."""
        self.failures += 1
        now = time.monotonic()
        if now - self._last_failure_log > VAD_FAILURE_LOG_EVERY_S:
            self._last_failure_log = now
            log.warning("remote VAD failed (%d frames lost so far), treating frames as silence: %s: %s",
                        self.failures, type(error).__name__, error)


class RemoteVadStream:
    """One session's recurrent state, sent with each frame to the batched deployment."""

    def __init__(self, owner: RemoteVad) -> None:
        self.owner = owner
        self.state = np.zeros(STATE_SHAPE, np.float32)
        self.context = np.zeros(CONTEXT_SAMPLES, np.float32)

    async def probability(self, frame: Float32Audio) -> float:
        """Speech probability of one frame; silence (0.0) if the remote call fails."""
        if frame.shape != (FRAME_SAMPLES,):
            raise ValueError(f"Silero needs frames of {FRAME_SAMPLES} samples, got {frame.shape}")
        frame = frame.astype(np.float32, copy=False)
        owner = self.owner
        owner.in_flight += 1
        try:
            probability, state = await _answer(owner.handle.step.remote((frame, self.context, self.state)),
                                               owner.timeout_s)
        except Exception as error:  # a replica restarting must not deafen or end the session
            owner.failed(error)
            return 0.0
        finally:
            owner.in_flight -= 1
        self.state = np.asarray(state, np.float32)
        self.context = frame[-CONTEXT_SAMPLES:].copy()
        return float(probability)

    def reset(self) -> None:
        """Start from silence again."""
        self.state = np.zeros(STATE_SHAPE, np.float32)
        self.context = np.zeros(CONTEXT_SAMPLES, np.float32)

    def close(self) -> None:
        """Nothing is held remotely between frames."""


class RemoteRecognizer(_InFlight, SpeechRecognizer):
    """Speech recognition on a Ray Serve deployment."""

    def __init__(self, handle: Any, timeout_s: float) -> None:
        super().__init__()
        self.handle = handle
        self.timeout_s = timeout_s

    async def transcribe(self, audio: Float32Audio, *, language: str | None = None,
                         prompt: str | None = None) -> Transcript:
        """Recognise a clip remotely."""
        self.in_flight += 1
        try:
            result = await _answer(self.handle.transcribe.remote(audio, language, prompt), self.timeout_s)
        except Exception as error:
            raise _remote_failure("ASR", error) from error
        finally:
            self.in_flight -= 1
        if not isinstance(result, Transcript):
            raise RemoteEngineFailure(f"remote ASR answered {type(result).__name__}, not a Transcript")
        return result


class RemoteLanguageModel(_InFlight, LanguageModel):
    """The language model on a Ray Serve deployment, streamed token by token."""

    def __init__(self, handle: Any, timeout_s: float) -> None:
        super().__init__()
        self.handle = handle.options(stream=True)
        self.timeout_s = timeout_s

    async def stream(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                     options: GenerationOptions | None = None) -> AsyncIterator[str]:
        """Tokens until done or cancelled (cancelling also stops the replica's generation)."""
        async for token in _remote_stream(self, self.handle.stream.remote(list(messages), options), cancel, "LLM"):
            yield str(token)


class RemoteToolCallingModel(RemoteLanguageModel):
    """A remote language model that can be offered tools (its replica's engine takes them)."""

    @property
    def capabilities(self) -> LLMCapabilities:
        """It calls the tools it is offered (its replica's engine does)."""
        return LLMCapabilities(tools=True)

    async def stream_reply(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                           options: GenerationOptions | None = None) -> AsyncIterator[ReplyPiece]:
        """Reply text and tool calls until done or cancelled."""
        generator = self.handle.stream_reply.remote(list(messages), options)
        async for piece in _remote_stream(self, generator, cancel, "LLM"):
            if not isinstance(piece, str | ToolCall):
                raise RemoteEngineFailure(f"remote LLM answered {type(piece).__name__}, not text or a tool call")
            yield piece


class RemoteSynthesizer(_InFlight, ListedVoices):
    """Speech synthesis on a Ray Serve deployment, streamed chunk by chunk.

    ``listing`` is what the replica's ``describe`` said of its voices at start-up
    (:func:`~bargein.engines.speak.voice_list.voice_listing`): its ``voices`` are those (None from a replica
    that lists none, or one deployed before replicas said them: then any name is taken).
    """

    def __init__(self, handle: Any, timeout_s: float, sample_rate: int, *,
                 listing: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self.handle = handle.options(stream=True)
        self.timeout_s = timeout_s
        self.sample_rate = sample_rate
        self.listing = dict(listing or {})

    def _voice_listing(self) -> Mapping[str, Any]:
        """The replica's voice listing, as its deployment described it at connection."""
        return self.listing

    async def synthesize(self, text: str, *, voice: str | None, cancel: CancelToken,
                         speed: float = 1.0) -> AsyncIterator[SpeechChunk]:
        """Chunks of speech until done or cancelled."""
        async for chunk in _remote_stream(self, self.handle.synthesize.remote(text, voice, speed), cancel, "TTS"):
            if not isinstance(chunk, SpeechChunk):
                raise RemoteEngineFailure(f"remote TTS answered {type(chunk).__name__}, not a SpeechChunk")
            yield chunk


async def _answer(response: Any, timeout_s: float) -> Any:
    """A Serve response's result within the deadline. A call given up on (past its deadline, or its caller
    cancelled, e.g. by the stage's own deadline) is cancelled on the replica too: awaiting a response does
    not cancel it, and a wedged replica would otherwise pile up work nobody waits for."""
    try:
        return await asyncio.wait_for(response, timeout_s)
    except (TimeoutError, asyncio.CancelledError):
        response.cancel()
        raise


async def _remote_stream(owner: Any, generator: Any, cancel: CancelToken, stage: str) -> AsyncIterator[object]:
    """Items of a Serve generator; each must come within the deadline; cancel stops the remote side."""
    owner.in_flight += 1
    iterator = generator.__aiter__()
    cancelled = asyncio.ensure_future(cancel.wait())  # raced with every read: a barge-in does not wait for one
    try:
        while not cancel.cancelled:
            step = asyncio.ensure_future(iterator.__anext__())
            try:
                done, _ = await asyncio.wait((step, cancelled), timeout=owner.timeout_s,
                                             return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not step.done():
                    step.cancel()
            if cancel.cancelled:
                return
            try:
                if step not in done:
                    raise TimeoutError(f"no answer in {owner.timeout_s:g} s")
                item = step.result()
            except StopAsyncIteration:
                return
            except Exception as error:
                raise _remote_failure(stage, error) from error
            yield item
    finally:
        cancelled.cancel()
        owner.in_flight -= 1
        generator.cancel()
