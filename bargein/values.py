"""The plain values every layer shares: audio, cancellation, transcripts, chat messages, speech chunks.

The ground floor of the package: it imports nothing of bargein, so the audio helpers, the listening
policy, the turn core, the metrics and the engines can all speak in these types without importing each other.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

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


# --- what a recogniser heard -------------------------------------------------------------------------


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
    (English and Mandarin finals): what the spoken-command model reads
    (:mod:`bargein.session.core.listening.keyword`)."""


# --- what a language model reads and writes ------------------------------------------------------------


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
    private: bool = False
    """A system message a user caused (a camera's note, a client's own system item), not the instructions:
    an engine that shares prompt caches across sessions never counts it as the shared, public prefix. A private user
    or assistant message is the server's example, not the conversation (the camera guidance's example exchange): no
    one said it, so it grounds no tool call and opens no recalled notes."""


def opens_with_instructions(messages: Sequence[ChatMessage]) -> bool:
    """Whether ``messages`` open with the instructions: a first system message no user caused (the only message an
    engine sharing prompt caches counts as the public prefix, and the one the camera's guidance follows)."""
    return bool(messages) and messages[0].role == "system" and not messages[0].private


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


# --- what a synthesiser makes --------------------------------------------------------------------------


@dataclass(frozen=True)
class SpeechChunk:
    """A piece of synthesised speech and the words it carries (timings relative to this chunk)."""

    audio: Float32Audio
    sample_rate: int
    words: tuple[WordTiming, ...] = field(default=())


# --- where an engine runs ------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerProcess:
    """The worker process an engine runs in: its pid (None while none runs) and how often it was restarted."""

    pid: int | None
    restarts: int
