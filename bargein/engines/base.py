"""The narrow interfaces every engine implements.

A session never touches a model directly: it talks to these protocols, so the real embedded models,
an OpenAI-compatible server and the deterministic fakes of the unit tests are interchangeable.
Heavy models are shared by all sessions; whatever blocks runs off the event loop.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from bargein.values import (
    CancelToken,
    ChatMessage,
    Float32Audio,
    GenerationOptions,
    ReplyPiece,
    SpeechChunk,
    Transcript,
)

if TYPE_CHECKING:
    from bargein.engines.health import Health

# --- voice activity -----------------------------------------------------------------------------------


class VadStream(Protocol):
    """One session's view of a shared VAD model: keeps that session's recurrent state."""

    async def probability(self, frame: Float32Audio) -> float:
        """Speech probability of one frame of exactly ``frame_samples`` samples at 16 kHz."""
        ...

    def reset(self) -> None:
        """Forget the recurrent state (after a long gap or a buffer clear)."""
        ...

    def close(self) -> None:
        """Release the stream's slot in the shared model."""
        ...


class VoiceActivityDetector(Protocol):
    """A VAD model shared by every session."""

    frame_samples: int
    """Samples per frame at 16 kHz (512 for Silero: 32 ms)."""

    def open_stream(self) -> VadStream:
        """A new per-session stream."""
        ...


@runtime_checkable
class EndOfTurnModel(Protocol):
    """Judges from the sound of the speech whether the speaker has finished, shared by every session."""

    window_seconds: int
    """How much of the most recent audio the model listens to."""

    async def probability(self, audio: Float32Audio, *, optional: bool = False) -> float:
        """Probability (0 to 1) that the turn is complete, from 16 kHz mono audio ending now. An ``optional``
        request may be refused with :class:`TurnModelBusy` when the shared model has no CPU to spare."""
        ...


class TurnModelBusy(Exception):
    """The shared end-of-turn model refused an optional score: it has spent the CPU share it may use."""


# --- speech recognition -------------------------------------------------------------------------------


@runtime_checkable
class SpeechRecognizer(Protocol):
    """Speech to text on 16 kHz mono audio, shared by every session."""

    async def transcribe(self, audio: Float32Audio, *, language: str | None = None,
                         prompt: str | None = None) -> Transcript:
        """Recognise a whole clip (final transcript)."""
        ...


# --- language model -----------------------------------------------------------------------------------


@runtime_checkable
class LanguageModel(Protocol):
    """Streams a reply token by token; stops within one token of ``cancel``."""

    def stream(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
               options: GenerationOptions | None = None) -> AsyncIterator[str]:
        """Yield text pieces (tokens) of the reply until done or cancelled (tools are not offered)."""
        ...


@runtime_checkable
class ToolCallingModel(LanguageModel, Protocol):
    """A language model that can be offered tools (``options.tools``) and answer with calls to them."""

    def stream_reply(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                     options: GenerationOptions | None = None) -> AsyncIterator[ReplyPiece]:
        """Yield reply text pieces and, where the model calls a tool, a :class:`ToolCall` each."""
        ...


# --- speech synthesis ---------------------------------------------------------------------------------


@runtime_checkable
class SpeechSynthesizer(Protocol):
    """Text to speech. Yields audio as it is made; stops within one chunk of ``cancel``."""

    sample_rate: int

    def synthesize(self, text: str, *, voice: str | None, cancel: CancelToken,
                   speed: float = 1.0) -> AsyncIterator[SpeechChunk]:
        """Speak one clause or sentence; ``speed`` is a multiple of the voice's own pace (Realtime's 0.25-1.5)."""
        ...


# --- the bundle ---------------------------------------------------------------------------------------


@dataclass
class Engines:
    """The engines a server shares among its sessions."""

    vad: VoiceActivityDetector
    asr: SpeechRecognizer
    llm: LanguageModel
    tts: SpeechSynthesizer
    turn: EndOfTurnModel | None = None
    """The semantic end-of-turn model; without one only plain silence can end a turn."""
    description: dict[str, str] = field(default_factory=dict)
    """Human-readable name and origin of each engine, printed at start-up."""
    health: Health | None = None
    """Each stage's state when the engines run behind :mod:`bargein.engines.resilience`."""

    async def aclose(self) -> None:
        """Release model resources; engines without resources ignore this."""
        if self.health is not None:
            self.health.close()
        for engine in (self.vad, self.asr, self.llm, self.tts, self.turn):
            closer = getattr(engine, "aclose", None)
            if closer is not None:
                await closer()
