"""The narrow interfaces every engine implements, and the abilities each declares.

A session never touches a model directly: it talks to these protocols, so the real embedded models,
an OpenAI-compatible server and the deterministic fakes of the unit tests are interchangeable.
Heavy models are shared by all sessions; whatever blocks runs off the event loop.

What an engine can do beyond the minimum is declared, never probed: each protocol has a ``capabilities``
value (:class:`ASRCapabilities`, :class:`LLMCapabilities`, :class:`TTSCapabilities`) and every member a
caller may use, with a default that fits an engine without the ability (a partial recognition that is a
final one, a prefill that does nothing, no voices of its own). An engine subclasses its protocol to inherit
those defaults and overrides what it does better; callers read the declaration and call the members.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Hashable, Sequence
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
    WorkerProcess,
)

if TYPE_CHECKING:
    from bargein.engines.health import Health
    from bargein.see.shared import Seeing


class SharedEngine(Protocol):
    """What every engine shared by the sessions offers, whatever its stage (defaults for one without them)."""

    @property
    def queue_depth(self) -> int | None:
        """Work waiting for the engine (the ``bargein_queue_depth`` gauge and the admission check read it);
        None: it keeps no queue of its own (and is left out of the gauge)."""
        return None

    @property
    def description(self) -> str:
        """What the engine is, for the start-up banner (a worker process sends it with ``ready``); its class's
        name unless it says more."""
        return type(self).__name__

    @property
    def worker(self) -> WorkerProcess | None:
        """The supervised worker process the engine runs in; None when it runs in this process."""
        return None

    async def aclose(self) -> None:
        """Release the engine's resources (threads, worker processes); nothing to release by default."""
        return None


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


class VoiceActivityDetector(SharedEngine, Protocol):
    """A VAD model shared by every session."""

    frame_samples: int
    """Samples per frame at 16 kHz (512 for Silero: 32 ms)."""

    def open_stream(self) -> VadStream:
        """A new per-session stream."""
        ...


@runtime_checkable
class EndOfTurnModel(SharedEngine, Protocol):
    """Judges from the sound of the speech whether the speaker has finished, shared by every session."""

    window_seconds: int
    """How much of the most recent audio the model listens to."""

    async def probability(self, audio: Float32Audio, *, optional: bool = False) -> float:
        """Probability (0 to 1) that the turn is complete, from 16 kHz mono audio ending now. An ``optional``
        request may be refused with :class:`TurnModelBusy` when the shared model has no CPU to spare."""
        ...

    @property
    def score_counts(self) -> tuple[int, int] | None:
        """Scores run, and optional ones shed for want of CPU (the end-of-turn gauges); None: it does not count."""
        return None


class TurnModelBusy(Exception):
    """The shared end-of-turn model refused an optional score: it has spent the CPU share it may use."""


# --- speech recognition -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ASRCapabilities:
    """What a recogniser can do beyond recognising a whole clip."""

    partial: bool = False
    """:meth:`SpeechRecognizer.transcribe_partial` is a quicker path of its own (else it is a final recognition)."""
    languages: frozenset[str] | None = None
    """The language codes it transcribes (a session asking for another gets an error); None: it does not say."""


@runtime_checkable
class SpeechRecognizer(SharedEngine, Protocol):
    """Speech to text on 16 kHz mono audio, shared by every session."""

    @property
    def capabilities(self) -> ASRCapabilities:
        """What it can do beyond :meth:`transcribe` (by default: nothing, and it does not name its languages)."""
        return ASRCapabilities()

    async def transcribe(self, audio: Float32Audio, *, language: str | None = None,
                         prompt: str | None = None) -> Transcript:
        """Recognise a whole clip (final transcript)."""
        ...

    async def transcribe_partial(self, audio: Float32Audio, *, language: str | None = None,
                                 prompt: str | None = None, key: Hashable | None = None) -> Transcript:
        """A quick transcript of the speech so far; with a ``key`` (the session), a newer partial of that key may
        replace one still waiting. Without ``capabilities.partial``: the final recognition of the clip."""
        return await self.transcribe(audio, language=language, prompt=prompt)


# --- language model -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LLMCapabilities:
    """What a language model can do beyond streaming a reply."""

    tools: bool = False
    """It can be offered tools (``options.tools``) and answer with calls to them
    (:meth:`LanguageModel.stream_reply`)."""
    prefill: bool = False
    """:meth:`LanguageModel.prefill` evaluates a prompt ahead of the turn, to be reused when the reply is asked for."""
    text_end: bool = False
    """:meth:`LanguageModel.text_end` estimates whether the user's last words end their sentence (the embedded
    one-sequence engine; a remote model has no such read of its logits)."""


@runtime_checkable
class LanguageModel(SharedEngine, Protocol):
    """Streams a reply token by token; stops within one token of ``cancel``."""

    @property
    def nonfinite_fallbacks(self) -> int:
        """Samplings that fell back to greedy because the distribution was not finite (a gauge); 0 by default."""
        return 0

    @property
    def capabilities(self) -> LLMCapabilities:
        """What it can do beyond :meth:`stream` (by default: nothing)."""
        return LLMCapabilities()

    def stream(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
               options: GenerationOptions | None = None) -> AsyncIterator[str]:
        """Yield text pieces (tokens) of the reply until done or cancelled (tools are not offered)."""
        ...

    def stream_reply(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                     options: GenerationOptions | None = None) -> AsyncIterator[ReplyPiece]:
        """Yield reply text pieces and, where the model calls a tool (``capabilities.tools``), a
        :class:`~bargein.values.ToolCall` each; without tools, the text of :meth:`stream`."""
        return self.stream(messages, cancel=cancel, options=options)

    def prefill(self, messages: Sequence[ChatMessage], options: GenerationOptions | None = None) -> None:
        """Evaluate ``messages`` ahead of the turn where ``capabilities.prefill`` says it can (else nothing)."""
        return None

    async def text_end(self, messages: Sequence[ChatMessage], options: GenerationOptions | None = None) -> float | None:
        """The probability that the last message's words end the sentence (a final mark or the end of the turn
        next, after them with the recogniser's final mark stripped: :mod:`bargein.engines.think.text_end`), read
        from the prompt a reply to ``messages`` would evaluate, where ``capabilities.text_end`` says it can; None
        otherwise, or when the words cannot be found in that prompt."""
        return None




# --- speech synthesis ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class TTSCapabilities:
    """The voices a synthesiser names, so a session can refuse a name it cannot speak."""

    voices: tuple[str, ...] | None = None
    """Its own voice names; None: it lists none, and any name is taken."""
    default_voice: str | None = None
    """The voice a name it does not know falls back to, where :meth:`SpeechSynthesizer.resolve_voice` maps other
    spellings of its voices; None: it takes its own names only."""
    voice_spellings: tuple[str, ...] = ()
    """Other names it maps to its voices (Kokoro's ids, the Realtime names), for a listing made elsewhere."""


@runtime_checkable
class SpeechSynthesizer(SharedEngine, Protocol):
    """Text to speech. Yields audio as it is made; stops within one chunk of ``cancel``."""

    sample_rate: int

    @property
    def capabilities(self) -> TTSCapabilities:
        """Its voices (by default it names none and takes any name)."""
        return TTSCapabilities()

    def resolve_voice(self, voice: str | None) -> str | None:
        """The voice it speaks for ``voice``; None where it cannot say (``capabilities.default_voice`` unset)."""
        return None

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
    see: Seeing | None = None
    """The ``see`` stage's shared part (vision settings); None: the defaults (scene notes, no images to the LLM)."""

    async def aclose(self) -> None:
        """Release model resources; engines without resources ignore this."""
        if self.health is not None:
            self.health.close()
        for engine in (self.vad, self.asr, self.llm, self.tts, self.turn):
            if engine is not None:
                await engine.aclose()
