"""Deterministic fake engines, named as fakes: for unit tests and for the ``instant`` benchmark mode.

They implement the same protocols as the real models, answer at once (or after a configured delay)
and produce predictable output, so tests can assert exact transcripts, replies and audio lengths.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Mapping, Sequence

import numpy as np

from bargein.engines.base import (
    ASRCapabilities,
    EndOfTurnModel,
    LanguageModel,
    LLMCapabilities,
    SpeechRecognizer,
    SpeechSynthesizer,
    VoiceActivityDetector,
)
from bargein.languages import language_code
from bargein.values import (
    CancelToken,
    ChatMessage,
    Float32Audio,
    GenerationOptions,
    ReplyPiece,
    SpeechChunk,
    Transcript,
    WordTiming,
)

MAX_KNOWN_UTTERANCES = 256
"""Utterances the fake recogniser remembers (the oldest are forgotten)."""


class FakeRecognizer(SpeechRecognizer):
    """The n-th distinct utterance gets the n-th scripted transcript (then the last one again).

    An utterance is known by its first 300 ms of samples, so partial, speculative and final
    recognitions of one turn (which all start at the same sample) agree; audio shorter than
    ``min_speech_s`` or silent gives ''.
    """

    def __init__(self, transcripts: Sequence[str] = ("hello there",), *, delay_s: float = 0.0,
                 min_speech_s: float = 0.1, languages: frozenset[str] | None = None) -> None:
        self._transcripts = list(transcripts)
        self.languages = languages
        """The languages it claims to know, like a real recogniser's (None: any)."""
        self._known: OrderedDict[bytes, str] = OrderedDict()
        self._seen = 0
        self.delay_s = delay_s
        self.min_speech_s = min_speech_s
        self.calls = 0

    @property
    def capabilities(self) -> ASRCapabilities:
        """The languages it claims to know; no partial path of its own."""
        return ASRCapabilities(languages=self.languages)

    async def transcribe(self, audio: Float32Audio, *, language: str | None = None,
                         prompt: str | None = None) -> Transcript:
        """The transcript scripted for this utterance, or '' for too little or silent audio."""
        self.calls += 1
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if len(audio) < self.min_speech_s * 16_000 or float(np.max(np.abs(audio))) < 1e-3:
            return Transcript(text="", no_speech_prob=1.0)
        key = hashlib.sha256(np.round(audio[:4800] * 32767).astype(np.int16).tobytes()).digest()
        if key not in self._known:
            self._known[key] = self._transcripts[min(self._seen, len(self._transcripts) - 1)]
            self._seen += 1
            while len(self._known) > MAX_KNOWN_UTTERANCES:  # a soak sends thousands: keep the newest
                self._known.popitem(last=False)
        return Transcript(text=self._known[key], language=language_code(language) or "en")


class FakeLanguageModel(LanguageModel):
    """Replies ``You said: <last user text>.`` followed by ``filler``, one word per token.

    Offered tools (:meth:`stream_reply`), it calls ``calls[word]`` (a tool name and JSON arguments)
    (checked against the tool's schema like a real model's call) when the last user text holds ``word``
    and that tool is offered; after a tool's output it replies
    ``The tool said: <output>.``
    """

    @property
    def capabilities(self) -> LLMCapabilities:
        """It calls the tools it is offered."""
        return LLMCapabilities(tools=True)

    def __init__(self, *, filler: str = "", token_delay_s: float = 0.0, fail: bool = False,
                 calls: Mapping[str, tuple[str, str]] | None = None) -> None:
        self.filler = filler
        self.token_delay_s = token_delay_s
        self.fail = fail
        self.calls = dict(calls or {})
        self.seen: deque[list[ChatMessage]] = deque(maxlen=64)
        """The newest prompts (bounded: a soak sends thousands)."""
        self.seen_options: deque[GenerationOptions] = deque(maxlen=64)
        self._call_count = 0

    async def stream_reply(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                           options: GenerationOptions | None = None) -> AsyncIterator[ReplyPiece]:
        """A scripted tool call, the answer to a tool's output, or the plain reply."""
        options = options or GenerationOptions()
        self.seen_options.append(options)
        from bargein.engines.think.tool_calls import offered_tools, resolve_call

        tools = offered_tools(options)
        offered = {tool.get("name") for tool in tools}
        last = messages[-1] if messages else None
        if last is not None and last.role == "user":
            for word, (name, arguments) in self.calls.items():
                if word in last.content.lower() and name in offered:
                    self.seen.append(list(messages))
                    self._call_count += 1
                    # checked against the schema as a real engine's call is: it may come back refused
                    yield resolve_call(arguments, tools, call_id=f"call_fake{self._call_count}", name=name)
                    return
        if last is not None and last.role == "tool":
            self.seen.append(list(messages))
            for index, word in enumerate(f"The tool said: {last.content}.".split(" ")):
                if cancel.cancelled:
                    return
                if self.token_delay_s:
                    await asyncio.sleep(self.token_delay_s)
                yield word if index == 0 else " " + word
            return
        async for piece in self.stream(messages, cancel=cancel, options=options):
            yield piece

    async def stream(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                     options: GenerationOptions | None = None) -> AsyncIterator[str]:
        """Yield the reply word by word, stopping at the first token after ``cancel``."""
        self.seen.append(list(messages))
        if self.fail:
            raise RuntimeError("fake language model failure")
        last_user = next((m.content for m in reversed(messages) if m.role == "user"), "")
        reply = f"You said: {last_user}. {self.filler}".strip()
        for index, word in enumerate(reply.split(" ")):
            if cancel.cancelled:
                return
            if self.token_delay_s:
                await asyncio.sleep(self.token_delay_s)
            if cancel.cancelled:
                return
            yield word if index == 0 else " " + word


class FakeSynthesizer(SpeechSynthesizer):
    """Speaks any text as a quiet 220 Hz tone, ``ms_per_char`` long, in chunks of ``chunk_ms``."""

    sample_rate = 24_000

    def __init__(self, *, ms_per_char: float = 60.0, chunk_ms: float = 100.0, delay_s: float = 0.0,
                 amplitude: float = 0.2) -> None:
        self.ms_per_char = ms_per_char
        self.chunk_ms = chunk_ms
        self.delay_s = delay_s
        self.amplitude = amplitude

    async def synthesize(self, text: str, *, voice: str | None, cancel: CancelToken,
                         speed: float = 1.0) -> AsyncIterator[SpeechChunk]:
        """Yield the tone chunk by chunk with proportional word timings (``speed`` shortens it)."""
        total_ms = len(text) * self.ms_per_char / speed
        words = _proportional_words(text, total_ms)
        start_ms = 0.0
        while start_ms < total_ms:
            if cancel.cancelled:
                return
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            end_ms = min(total_ms, start_ms + self.chunk_ms)
            samples = np.arange(int(start_ms * 24), int(end_ms * 24))
            audio = (self.amplitude * np.sin(2 * np.pi * 220 * samples / 24_000)).astype(np.float32)
            chunk_words = tuple(
                WordTiming(w.word, w.start_ms - start_ms, w.end_ms - start_ms)
                for w in words if start_ms <= w.start_ms < end_ms
            )
            yield SpeechChunk(audio, 24_000, chunk_words)
            start_ms = end_ms


def _proportional_words(text: str, total_ms: float) -> list[WordTiming]:
    timings: list[WordTiming] = []
    position = 0
    for word in text.split():
        start = text.index(word, position)
        position = start + len(word)
        timings.append(WordTiming(word, total_ms * start / len(text), total_ms * position / len(text)))
    return timings


class FakeVad(VoiceActivityDetector):
    """Calls a frame speech when its RMS exceeds ``rms_threshold``: for scripted-audio tests."""

    frame_samples = 512

    def __init__(self, rms_threshold: float = 0.02) -> None:
        self.rms_threshold = rms_threshold

    def open_stream(self) -> _FakeVadStream:
        """A stateless stream."""
        return _FakeVadStream(self.rms_threshold)


class _FakeVadStream:
    def __init__(self, rms_threshold: float) -> None:
        self.rms_threshold = rms_threshold

    async def probability(self, frame: Float32Audio) -> float:
        rms = float(np.sqrt(np.mean(np.square(frame)))) if len(frame) else 0.0
        return 0.95 if rms >= self.rms_threshold else 0.02

    def reset(self) -> None:
        """Stateless."""

    def close(self) -> None:
        """Stateless."""


class FakeEndOfTurn(EndOfTurnModel):
    """Answers scripted end-of-turn probabilities: the n-th call gets the n-th (then the last again).

    Recorded probabilities of real clips make endpoint timelines reproducible without the model.
    """

    window_seconds = 8

    def __init__(self, probabilities: Sequence[float] = (0.9,), *, delay_s: float = 0.0) -> None:
        self._probabilities = list(probabilities)
        self.delay_s = delay_s
        self.calls = 0

    async def probability(self, audio: Float32Audio, *, optional: bool = False) -> float:
        """The next scripted probability."""
        value = self._probabilities[min(self.calls, len(self._probabilities) - 1)]
        self.calls += 1
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        return value
