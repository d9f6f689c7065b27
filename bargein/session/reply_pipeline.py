"""The think and speak stages of one reply: LLM tokens -> clauses -> TTS -> wire audio.

The LLM and the TTS run concurrently: clauses flow through a small bounded queue, so the first
clause is being spoken while the model is still writing the second. Both check the reply's
:class:`CancelToken` once per token or chunk. What they produce goes to a :class:`ReplySink`,
which decides (through the duplex machine) whether it may still reach the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from bargein.audio.codecs import AudioFormat, float_to_int16
from bargein.audio.crossfade import Crossfader
from bargein.audio.lead_in import trim_lead_in
from bargein.audio.resample import StreamResampler
from bargein.engines.base import LanguageModel, SpeechSynthesizer
from bargein.engines.fallback import StageFallback
from bargein.engines.speak.clauses import FIRST_CLAUSE_WORDS, ClauseSplitter, has_words
from bargein.session.playback_cushion import HURRY_MIN_WORDS, PlaybackCushion
from bargein.session.tool_use import ToolSetup, reply_with_tools
from bargein.tools.registry import ToolOutcome
from bargein.values import CancelToken, ChatMessage, GenerationOptions, ReplyPiece, SpeechChunk, ToolCall, WordTiming

log = logging.getLogger(__name__)
FIRST_PHRASE_WORDS = 2
"""Fewest words spoken as an early first phrase when the first clause is slow to complete: fewer than the first
clause's cap (:data:`~bargein.engines.speak.clauses.FIRST_CLAUSE_WORDS`), which would otherwise always cut first."""
DEFAULT_MAX_TOKENS = 256
"""Reply length when the session sets no ``max_output_tokens`` ("inf")."""
DELTA_MS = 200.0
"""Longest audio delta sent: finer deltas make cancellation and the heard estimate finer."""


def generation_options(max_tokens: int | None, tools: ToolSetup | None = None,
                       truncation: dict[str, Any] | None = None) -> GenerationOptions:
    """The LLM options of a reply (and of its speculative head start, which must match it);
    ``truncation`` is :meth:`SessionConfig.truncation_options`."""
    options = GenerationOptions(max_tokens=max_tokens or DEFAULT_MAX_TOKENS, **(truncation or {}))
    return tools.apply(options) if tools is not None else options


class ReplySink(Protocol):
    """Where one reply's output goes (:class:`~bargein.session.reply_sink.HandleSink` in a session); a sink serves
    one reply, so nothing here names it."""

    async def wait_for_room(self) -> None:
        """Backpressure from the client connection and real-time pacing."""

    def reply_text(self, text: str) -> None:
        """A piece of the reply's text (transcript of audio about to be sent, or text output)."""

    def reply_audio(self, payload: bytes, duration_ms: float, words: Sequence[WordTiming]) -> None:
        """A piece of wire audio; word timings are relative to this piece."""

    def audio_ahead_ms(self) -> float | None:
        """Audio forwarded to the client that it has not played yet (``None`` before any, or while paused)."""

    def reply_mark(self, stage: str) -> None:
        """A latency stage was reached (llm_first_token, tts_first_audio)."""

    def reply_tokens(self, count: int) -> None:
        """Tokens the LLM produced."""

    def reply_tool_call(self, call: ToolCall, *, after_words: bool = False) -> None:
        """The model called one of the client's tools (or wrote a call that was refused); ``after_words``: it wrote
        words first (their message item precedes the call's, though their audio is still to come)."""

    def reply_server_call(self, call: ToolCall, outcome: ToolOutcome) -> None:
        """The model called a built-in tool, which the server ran."""

    def reply_fallback(self, fallback: StageFallback) -> None:
        """The reply's text is a failed stage's stand-in (the LLM's apology), spoken all the same."""


@dataclass(frozen=True)
class ReplyPlan:
    """Everything a reply needs to know up front."""

    response_id: str
    messages: Sequence[ChatMessage]
    audio: bool
    voice: str | None
    output_format: AudioFormat
    max_tokens: int | None = None
    prefetched: AsyncIterator[ReplyPiece] | None = None
    """Tokens a speculative LLM stream already wrote for exactly these messages."""
    tools: ToolSetup = field(default_factory=ToolSetup)
    speed: float = 1.0
    """``audio.output.speed``: the synthesiser's pace as a multiple of the voice's own."""
    prespoken: Callable[[str, str | None, float], AsyncIterator[SpeechChunk] | None] | None = None
    """Speech of the first clause made privately before the commit, if it is this clause, voice and pace."""
    truncation: dict[str, Any] | None = None
    """How the LLM may cut a history too long for its context (:meth:`SessionConfig.truncation_options`)."""
    prefetched_since: float | None = None
    """When the adopted head start wrote its first words (``time.monotonic``), with its first clause left to this
    reply: the early first phrase's deadline counts from then (:attr:`~bargein.session.speculation.PrefetchedReply.
    unspoken_since`), as it would had the reply started the stream itself."""


class ReplyPipeline:
    """Runs replies against the shared LLM and TTS engines (one pipeline per session, one run per reply)."""

    def __init__(self, llm: LanguageModel, tts: SpeechSynthesizer, *, clause_queue: int = 4,
                 first_clause_deadline_s: float = 0.3) -> None:
        self.llm = llm
        self.tts = tts
        self.clause_queue = clause_queue
        self.first_clause_deadline_s = first_clause_deadline_s
        """How long after the first token the first clause may wait for its natural end."""

    async def run(self, plan: ReplyPlan, sink: ReplySink, cancel: CancelToken) -> None:
        """Produce the whole reply unless cancelled; engine errors propagate to the caller."""
        clauses: asyncio.Queue[str | None] = asyncio.Queue(self.clause_queue)
        cushion = PlaybackCushion(lambda: sink.audio_ahead_ms())
        think = asyncio.create_task(self._think(plan, sink, cancel, clauses if plan.audio else None, cushion))
        if not plan.audio:
            await think
            return
        speak = asyncio.create_task(self._speak(plan, sink, cancel, clauses, cushion))
        try:
            done, _ = await asyncio.wait({think, speak}, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()
            await asyncio.gather(think, speak)
        finally:
            for task in (think, speak):
                if not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task

    async def _think(self, plan: ReplyPlan, sink: ReplySink, cancel: CancelToken,
                     clauses: asyncio.Queue[str | None] | None, cushion: PlaybackCushion) -> None:
        splitter = ClauseSplitter(first_max_words=FIRST_CLAUSE_WORDS)
        options = generation_options(plan.max_tokens, plan.tools, plan.truncation)
        tokens = 0
        worded = False
        first_token_at: float | None = None
        try:
            source = reply_with_tools(
                self.llm, plan.messages, cancel=cancel, options=options, server_side=plan.tools.server_side,
                report=lambda call, outcome: sink.reply_server_call(call, outcome),
                first=plan.prefetched)
            async for token in source:
                if cancel.cancelled:
                    break
                if isinstance(token, ToolCall):
                    if tokens == 0:  # a reply that is only a client call still had a first token (marks count once)
                        sink.reply_mark("llm_first_token")
                    sink.reply_tool_call(token, after_words=worded)
                    continue
                if isinstance(token, StageFallback):  # told before it is spoken, so before response.done
                    sink.reply_fallback(token)
                if tokens == 0:
                    sink.reply_mark("llm_first_token")
                    first_token_at = plan.prefetched_since or time.monotonic()
                tokens += 1
                worded = worded or has_words(token)
                if clauses is None:
                    sink.reply_text(token)
                    continue
                ready = splitter.feed(token) or self._early(splitter, first_token_at, cushion, clauses)
                for clause in ready:
                    await clauses.put(clause)
            if clauses is not None:
                if cancel.cancelled:
                    _drain_then_end(clauses)
                else:
                    if rest := splitter.flush():
                        await clauses.put(rest)
                    await clauses.put(None)
        finally:
            sink.reply_tokens(tokens)

    def _early(self, splitter: ClauseSplitter, first_token_at: float | None, cushion: PlaybackCushion,
               clauses: asyncio.Queue[str | None]) -> list[str]:
        """The whole words written so far, as a clause before its natural end, when waiting for that end would
        keep the client's speaker silent: the first clause once the LLM has been slow for the deadline, a later
        one once the audio still to play runs short with nothing else on its way."""
        if splitter.released == 0:
            slow = first_token_at is not None and time.monotonic() - first_token_at >= self.first_clause_deadline_s
            early = splitter.take_words(FIRST_PHRASE_WORDS) if slow else None
        else:
            early = splitter.take_words(HURRY_MIN_WORDS) if clauses.empty() and cushion.running_short() else None
        return [early] if early is not None else []

    async def _speak(self, plan: ReplyPlan, sink: ReplySink, cancel: CancelToken,
                     clauses: asyncio.Queue[str | None], cushion: PlaybackCushion) -> None:
        crossfader: Crossfader | None = None
        resampler: StreamResampler | None = None
        first_audio = True
        first_clause = True
        carried: list[WordTiming] = []  # words timed past the end of the audio sent so far: they start in the next
        silent: list[str] = []  # clauses with nothing to say ("...", emoji): their text goes with the next one's
        while (clause := await clauses.get()) is not None:
            if cancel.cancelled:
                return
            if not has_words(clause):
                silent.append(clause)
                continue
            cushion.speaking = True
            transcript, silent = " ".join([*silent, clause]), []
            spoken_text_sent = False
            if first_audio:
                sink.reply_mark("first_clause")
            early = (plan.prespoken(clause, plan.voice, plan.speed)
                     if first_audio and plan.prespoken is not None else None)
            async for chunk in early or self.tts.synthesize(clause, voice=plan.voice, cancel=cancel,
                                                            speed=plan.speed):
                if cancel.cancelled:
                    return
                if crossfader is None:
                    crossfader = Crossfader(chunk.sample_rate)
                    resampler = StreamResampler(chunk.sample_rate, plan.output_format.rate)
                    chunk = trim_lead_in(chunk)  # the reply's first sound: nothing before it to pause after
                joined = crossfader.push(chunk)
                if first_audio:
                    sink.reply_mark("tts_first_audio")
                    first_audio = False
                if not spoken_text_sent:
                    # the transcript of a clause goes out with its first audio, so text never runs ahead
                    sink.reply_text(transcript if first_clause else " " + transcript)
                    spoken_text_sent = True
                    first_clause = False
                assert resampler is not None
                carried = await self._send_audio(plan, sink, cancel, resampler.process(joined.audio),
                                                 [*carried, *joined.words])
            cushion.speaking = False  # waiting for the next clause: the think stage may hurry it
        if crossfader is not None and resampler is not None and not cancel.cancelled:
            tail = crossfader.flush()
            audio = np.concatenate([resampler.process(tail.audio), resampler.process(np.zeros(0, np.float32),
                                                                                     last=True)])
            if len(audio):
                await self._send_audio(plan, sink, cancel, audio, [*carried, *tail.words])
        if silent and not cancel.cancelled:  # the reply ended on them: the transcript still says them, last
            joined_text = " ".join(silent)
            sink.reply_text(joined_text if first_clause else " " + joined_text)

    async def _send_audio(self, plan: ReplyPlan, sink: ReplySink, cancel: CancelToken,
                          audio: np.ndarray, words: Sequence[WordTiming]) -> list[WordTiming]:
        """Send ``audio`` in deltas with the words that start in each; returns the words timed at or past its
        end, relative to that end: they start in the audio that follows (the crossfader clamps a word that
        starts in the overlap it holds back to the end of what it emits, and a resampler's delay shortens
        the audio), so they go with it rather than nowhere."""
        rate = plan.output_format.rate
        step = int(rate * DELTA_MS / 1000)
        total_ms = 1000.0 * len(audio) / rate
        for offset in range(0, len(audio), step):
            await sink.wait_for_room()
            if cancel.cancelled:
                return []
            piece = audio[offset:offset + step]
            start_ms = 1000.0 * offset / rate
            end_ms = 1000.0 * (offset + len(piece)) / rate  # the last piece ends exactly at total_ms: no word twice
            piece_words = [WordTiming(w.word, w.start_ms - start_ms, w.end_ms - start_ms)
                           for w in words if start_ms <= w.start_ms < end_ms]
            sink.reply_audio(plan.output_format.encode(float_to_int16(piece)),
                             end_ms - start_ms, piece_words)
        return [WordTiming(w.word, max(0.0, w.start_ms - total_ms), max(0.0, w.end_ms - total_ms))
                for w in words if w.start_ms >= total_ms]


def _drain_then_end(queue: asyncio.Queue[str | None]) -> None:
    while not queue.empty():
        queue.get_nowait()
    queue.put_nowait(None)
