"""The narrow interfaces every engine implements.

A session never touches a model directly: it talks to these protocols, so the real embedded models,
an OpenAI-compatible server and the deterministic fakes of the unit tests are interchangeable.
Heavy models are shared by all sessions; whatever blocks runs off the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from bargein.engines.health import Health

Float32Audio = npt.NDArray[np.float32]
"""Mono audio as float32 in [-1, 1]."""

LISTEN_SAMPLE_RATE = 16_000
"""Every listening engine (VAD, ASR) receives mono 16 kHz audio."""


class CancelToken:
    """A response's cancellation flag, checked by every stage once per token or chunk.

    Cancellation is a value, not an exception path: a stage that sees ``cancelled`` stops producing
    and returns normally.
    """

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.reason: str | None = None

    @property
    def cancelled(self) -> bool:
        """True once :meth:`cancel` has been called."""
        return self._event.is_set()

    def cancel(self, reason: str = "cancelled") -> None:
        """Mark the work as cancelled; idempotent, the first reason wins."""
        if not self._event.is_set():
            self.reason = reason
            self._event.set()

    async def wait(self) -> None:
        """Block until cancelled."""
        await self._event.wait()


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


@dataclass(frozen=True)
class WordTiming:
    """A word and where it lies in an audio clip, in milliseconds from the clip's start."""

    word: str
    start_ms: float
    end_ms: float
    probability: float | None = None
    """How sure the recogniser was of the word (0-1), where it says."""


@dataclass(frozen=True)
class Transcript:
    """What a recogniser heard in one clip, with the confidences the listening classifier uses."""

    text: str
    language: str = "en"
    no_speech_prob: float = 0.0
    avg_logprob: float = 0.0
    words: tuple[WordTiming, ...] = ()
    voiced_encoding: tuple[float, ...] = ()
    """Whisper's encoder output averaged over the clip's voiced frames, where the recogniser computes it
    (English and Mandarin finals): what the spoken-command model reads (:mod:`bargein.listening_model.keyword`)."""


@runtime_checkable
class SpeechRecognizer(Protocol):
    """Speech to text on 16 kHz mono audio, shared by every session."""

    async def transcribe(self, audio: Float32Audio, *, language: str | None = None,
                         prompt: str | None = None) -> Transcript:
        """Recognise a whole clip (final transcript)."""
        ...


# --- language model -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChatImage:
    """An image attached to a user turn (camera frame or ``input_image`` item), as a data URL."""

    data_url: str


@dataclass(frozen=True)
class ToolCall:
    """A function call the model made: the tool's name, the call's id and its arguments as JSON text.

    ``refused`` is set when the model's output could not be turned into a call of an offered tool
    (not JSON, unknown name, arguments that do not fit the schema even after mending); ``raw`` then
    holds what the model wrote, so the client can be shown it.
    """

    name: str
    call_id: str
    arguments: str = "{}"
    repaired: bool = False
    """True when the arguments the model wrote had to be mended to fit the tool's schema."""
    refused: str | None = None
    raw: str = ""


@dataclass(frozen=True)
class ChatMessage:
    """One message of the history the LLM sees. Assistant messages hold heard text only.

    An assistant message may carry the tool calls it made; a ``tool`` message carries one call's
    output, with the call's id in ``tool_call_id``.
    """

    role: Literal["system", "user", "assistant", "tool"]
    content: str
    images: tuple[ChatImage, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None


ToolChoice = str | Mapping[str, Any]
"""``"auto"``, ``"none"``, ``"required"`` or ``{"type": "function", "name": ...}`` (Realtime names)."""


@dataclass(frozen=True)
class GenerationOptions:
    """Per-response generation knobs, and the tools the model may call (Realtime ``function`` tools)."""

    max_tokens: int = 256
    temperature: float = 0.7
    truncate: bool = True
    """Drop the oldest messages when the history does not fit the context (False: fail instead)."""
    retention_ratio: float | None = None
    """When messages must be dropped, keep only this fraction of the history's tokens (fewer, larger cuts
    keep the cached prefix valid for longer); None: drop just enough."""
    tools: tuple[Mapping[str, Any], ...] = ()
    tool_choice: ToolChoice = "auto"


ReplyPiece = str | ToolCall
"""What a tool-calling model yields: a piece of reply text, or a whole tool call."""


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


@dataclass(frozen=True)
class SpeechChunk:
    """A piece of synthesised speech and the words it carries (timings relative to this chunk)."""

    audio: Float32Audio
    sample_rate: int
    words: tuple[WordTiming, ...] = field(default=())


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
