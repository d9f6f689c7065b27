"""Preemptive work: recognise, and start replying to, a turn before its endpoint confirms it ended.

When the VAD first sees silence in a turn, recognition starts on the audio so far; if the words make
a query, the LLM starts too, writing into a private buffer that no client can see. If the user goes on
speaking, all of it is cancelled and counted as waste. If the endpoint confirms the turn, the final
transcript is already there and the reply starts from the tokens already written. With a TTS, the
first clause of those tokens is spoken too, into a private buffer (:mod:`bargein.session.private_clause`),
so the reply's first audio is ready at the commit. The buffered tokens and speech are only ever consumed
by a reply the duplex machine started *after* the endpoint, and only if the history it would send the
LLM is exactly the one the speculation used (and, for the speech, the clause and voice are the same).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

import numpy.typing as npt

from bargein.engines.base import LanguageModel, SpeechRecognizer, SpeechSynthesizer
from bargein.engines.fair import urgent_task
from bargein.engines.speak.clauses import FIRST_CLAUSE_WORDS, ClauseSplitter
from bargein.engines.think.tool_calls import reply_pieces
from bargein.metrics.cost_meter import Speculative, speculating
from bargein.session.private_clause import PrivateClause
from bargein.session.tool_use import answered_in_words
from bargein.values import CancelToken, ChatMessage, GenerationOptions, ReplyPiece, SpeechChunk, ToolCall, Transcript

log = logging.getLogger(__name__)
MAX_GUESSES = 8
"""Turns with a guess kept at once (a guess lives until its turn resumes or a reply starts)."""


@dataclass
class SpeculationCounts:
    """What speculation started, what a reply used, and what was thrown away."""

    asr_started: int = 0
    asr_used: int = 0
    asr_discarded: int = 0
    llm_started: int = 0
    llm_used: int = 0
    llm_discarded: int = 0
    tts_started: int = 0
    """First clauses spoken privately before the commit (counted when their guess ends)."""
    tts_used: int = 0
    """Of those, the ones handed to the reply that followed."""
    prompts_warmed: int = 0
    """Prompts evaluated ahead from partial transcripts (:meth:`Speculator.warm`)."""

    @property
    def waste(self) -> float:
        """Share of speculative jobs whose result was discarded."""
        started = self.asr_started + self.llm_started
        return (self.asr_discarded + self.llm_discarded) / started if started else 0.0


class PrefetchedReply:
    """An LLM stream started early, buffering its tokens until a reply adopts it (or it is dropped)."""

    def __init__(self, llm: LanguageModel, messages: Sequence[ChatMessage], options: GenerationOptions,
                 tts: SpeechSynthesizer | None = None, voice: str | None = None, speed: float = 1.0, *,
                 drops_call: Callable[[ToolCall], bool] | None = None) -> None:
        self.messages = list(messages)
        self.options = options
        self.drops_call = drops_call
        """Whether a call the model opens its reply with is dropped and the reply asked again without tools,
        as the adopting reply would (:func:`~bargein.session.tool_use.ungrounded_call`)."""
        self.cancel = CancelToken()
        self.voice = voice
        self.speed = speed
        self.first_clause: PrivateClause | None = None
        self._tts = tts
        self._splitter = ClauseSplitter(first_max_words=FIRST_CLAUSE_WORDS) if tts is not None else None
        self._tokens: list[ReplyPiece] = []
        self._first_words_at: float | None = None
        self._done = asyncio.Event()
        self._grew = asyncio.Event()
        self.error: BaseException | None = None
        self.work = Speculative()
        """Its CPU, wasted if it is discarded (the cost ledger's)."""
        with speculating(self.work):
            self._task = asyncio.create_task(self._run(llm, options))

    async def _run(self, llm: LanguageModel, options: GenerationOptions) -> None:
        try:
            async for token in self._pieces(llm, options):
                self._tokens.append(token)
                self._grew.set()
                if self._first_words_at is None and not isinstance(token, ToolCall):
                    self._first_words_at = time.monotonic()
                if isinstance(token, ToolCall):
                    self._splitter = None  # a tool call: the reply's words wait for its result
                elif self._splitter is not None and (ready := self._splitter.feed(token)):
                    self._speak_first(ready[0])
            if self._splitter is not None and not self.cancel.cancelled and (rest := self._splitter.flush()):
                self._speak_first(rest)  # the whole reply is shorter than a clause
        except Exception as error:  # surfaces in the adopting reply, not here
            self.error = error
        finally:
            self._done.set()
            self._grew.set()

    def _pieces(self, llm: LanguageModel, options: GenerationOptions) -> AsyncIterator[ReplyPiece]:
        """The reply as :func:`~bargein.session.tool_use.reply_with_tools` will read it: a call that opens it
        and is dropped is replaced by the reply asked again without tools (later calls are left to it)."""
        stream = reply_pieces(llm, self.messages, cancel=self.cancel, options=options)
        if self.drops_call is None:
            return stream
        return answered_in_words(stream, llm, self.messages, cancel=self.cancel, options=options,
                                 drops_call=self.drops_call)

    def adopt(self, reply_cancel: CancelToken) -> AsyncIterator[ReplyPiece]:
        """The token stream for the reply that takes this over; the reply's cancel stops the LLM.

        A first clause not yet begun is left to the reply, which speaks it itself (never twice)."""
        self._splitter = None
        link = asyncio.create_task(self._follow(reply_cancel))
        return self._iterate(link)

    @property
    def unspoken_since(self) -> float | None:
        """When the stream wrote its first words (``time.monotonic``), where its first clause is left to the reply:
        the reply's early first phrase then waits out its deadline from that token, as it would had it started the
        stream itself, not from the adoption. ``None``: no words yet, or the first clause was spoken privately (the
        reply reads it whole from the buffer and must cut it where the private speech did)."""
        return self._first_words_at if self.first_clause is None else None

    async def _follow(self, reply_cancel: CancelToken) -> None:
        await reply_cancel.wait()
        self.cancel.cancel(reply_cancel.reason or "cancelled")

    async def _iterate(self, link: asyncio.Task[None]) -> AsyncIterator[ReplyPiece]:
        index = 0
        try:
            while True:
                if index < len(self._tokens):
                    index += 1
                    yield self._tokens[index - 1]
                    continue
                if self._done.is_set():
                    if self.error is not None:
                        raise self.error
                    return
                self._grew.clear()
                await self._grew.wait()
        finally:
            link.cancel()

    def _speak_first(self, clause: str) -> None:
        if self._tts is not None:
            self.first_clause = PrivateClause(self._tts, clause, self.voice, self.speed, self.cancel)
        self._splitter = None  # one clause: the reply speaks the rest itself

    def spoken(self, clause: str, voice: str | None, speed: float) -> AsyncIterator[SpeechChunk] | None:
        """The privately spoken audio of ``clause`` in ``voice`` at ``speed``, if that is what was spoken early."""
        first = self.first_clause
        return first.replay() if first is not None and first.matches(clause, voice, speed) else None

    def discard(self) -> None:
        """Stop generating and speaking (within one token or chunk) and forget the tokens and the speech."""
        self.cancel.cancel("speculation discarded")
        self.work.discard(sum(isinstance(piece, str) for piece in self._tokens))
        self._tokens.clear()
        if self.first_clause is not None:
            self.first_clause.discard()


@dataclass
class _Guess:
    item_id: str
    recognition: asyncio.Task[Transcript]
    reply: PrefetchedReply | None = None
    estimate: asyncio.Task[float | None] | None = None
    """The language model's end-of-sentence estimate for the words the reply answers (asked with it)."""
    used: bool = False
    work: Speculative = field(default_factory=Speculative)
    """The recognition's CPU, wasted if it is discarded."""


@dataclass
class Speculator:
    """Speculative recognition and replies of one session."""

    asr: SpeechRecognizer
    llm: LanguageModel
    tts: SpeechSynthesizer | None = None
    """Speaks the first clause of a prefetched reply privately (``None``: tokens only)."""
    enabled: bool = True
    counts: SpeculationCounts = field(default_factory=SpeculationCounts)
    _guesses: dict[str, _Guess] = field(default_factory=dict)
    _primed: dict[str, tuple[tuple[float, float], asyncio.Task[Transcript]]] = field(default_factory=dict)
    """Per turn over a paused reply: its loud stretch last recognised primed (at most :data:`MAX_GUESSES`)."""
    hints: Callable[[], tuple[str | None, str | None]] = field(default=lambda: (None, None))
    """The session's transcription language and prompt (a speculative result stands as the final)."""

    def recognise(self, item_id: str, audio: npt.NDArray, *,  # type: ignore[type-arg]
                  urgent: bool = False) -> asyncio.Task[Transcript] | None:
        """Start recognising a turn's audio so far (replacing any older guess for it); ``urgent``: a paused
        reply waits for it, so the recogniser serves it before other work."""
        if not self.enabled or len(audio) < 1600:
            return None
        self._drop_sync(item_id)
        while len(self._guesses) >= MAX_GUESSES:
            self._drop_sync(next(iter(self._guesses)))
        language, prompt = self.hints()
        work = Speculative()
        with speculating(work):
            task = urgent_task(self.asr.transcribe(audio, language=language, prompt=prompt), urgent=urgent)
        self._guesses[item_id] = _Guess(item_id, task, work=work)
        self.counts.asr_started += 1
        return task

    def recognise_primed(self, item_id: str, span: tuple[float, float], audio: npt.NDArray,  # type: ignore[type-arg]
                         prompt: str) -> tuple[asyncio.Task[Transcript], bool] | None:
        """Recognise a turn's loud stretch ``span`` (stream ms), primed with ``prompt``, urgently; and whether
        that recognition is new: the same stretch as the turn's last one (within a frame) is not recognised
        again. ``None``: too short to hold a word. It runs on when the user speaks on (the stretch often stays
        the same: a "Stop." with the room's talker going on around it)."""
        if not self.enabled or len(audio) < 1600:
            return None
        known = self._primed.get(item_id)
        if known is not None and _same_span(known[0], span) and not known[1].cancelled():
            return known[1], False
        self._primed.pop(item_id, None)
        while len(self._primed) >= MAX_GUESSES:
            self._primed.pop(next(iter(self._primed)))
        language, _ = self.hints()
        task = urgent_task(self.asr.transcribe(audio, language=language, prompt=prompt))
        self._primed[item_id] = (span, task)
        return task, True

    def prefetch(self, item_id: str, messages: Sequence[ChatMessage], options: GenerationOptions,
                 voice: str | None = None, speed: float = 1.0, *,
                 drops_call: Callable[[ToolCall], bool] | None = None,
                 estimate_end: bool = False) -> asyncio.Task[float | None] | None:
        """Start the reply's LLM stream early (and its first clause's speech in ``voice``), for ``item_id``; with
        ``estimate_end``, where the LLM can, its end-of-sentence estimate for the words first (asked just before the
        reply, whose prompt then reuses the evaluation: :meth:`~bargein.engines.base.LanguageModel.text_end`),
        returned as a task (an already prefetched guess's, if it has one; ``None``: no estimate will come)."""
        guess = self._guesses.get(item_id)
        if guess is None or guess.reply is not None:
            return guess.estimate if guess is not None else None
        if estimate_end and self.llm.capabilities.text_end:
            guess.estimate = asyncio.create_task(self.llm.text_end(messages, options))
        guess.reply = PrefetchedReply(self.llm, messages, options, self.tts, voice, speed, drops_call=drops_call)
        self.counts.llm_started += 1
        return guess.estimate

    @property
    def warms_reach_model(self) -> bool:
        """Whether :meth:`warm` can reach a model that keeps what it read (speculation on, and an LLM that evaluates
        a prompt ahead)."""
        return self.enabled and self.llm.capabilities.prefill

    @property
    def warm_runs_now(self) -> bool:
        """Whether a warm asked for now reaches the model: :attr:`warms_reach_model`, and the LLM serves no reply and
        has no job waiting (a warm then is skipped, :meth:`warm`)."""
        return self.warms_reach_model and not self.llm.queue_depth

    def warm(self, messages: Sequence[ChatMessage], options: GenerationOptions) -> None:
        """Have the LLM evaluate ``messages`` without replying (where it can), so a later prompt that begins
        the same way reuses the work; the words a partial transcript heard so far, typically. Skipped while
        the LLM is serving any reply (another session's) or has a job waiting: their tokens come first."""
        if self.warm_runs_now:
            self.llm.prefill(messages, options)
            self.counts.prompts_warmed += 1

    def drop(self, item_id: str) -> None:
        """The user went on speaking: the guess for ``item_id`` is stale (not its loud stretch's, which may hold)."""
        self._drop_sync(item_id)

    def abandon(self, item_id: str) -> None:
        """The turn was abandoned (turn detection went off, or the client cleared the buffer): its guess and its
        primed recognition both go."""
        self._drop_sync(item_id)
        primed = self._primed.pop(item_id, None)
        if primed is not None and not primed[1].done():
            primed[1].cancel()

    def _drop_sync(self, item_id: str) -> None:
        guess = self._guesses.pop(item_id, None)
        if guess is None:
            return
        if not guess.used:  # a used one is the turn's final: its transcriber owns it
            if not guess.recognition.done():
                guess.recognition.cancel()
            self.counts.asr_discarded += 1
            guess.work.discard()
        if guess.reply is not None:
            self.counts.tts_started += guess.reply.first_clause is not None
            self._discard_reply(guess, guess.reply)

    def take_recognition(self, item_id: str) -> asyncio.Task[Transcript] | None:
        """The endpoint confirmed the turn: its recognition (running or done), if one was guessed."""
        guess = self._guesses.get(item_id)
        if guess is None or guess.recognition.cancelled():
            return None
        guess.used = True
        self.counts.asr_used += 1
        return guess.recognition

    def take_primed(self, item_id: str, span: tuple[float, float]) -> asyncio.Task[Transcript] | None:
        """The endpoint confirmed the turn: the primed recognition of its loud stretch ``span`` (running or done),
        if that same stretch was recognised before the endpoint."""
        known = self._primed.pop(item_id, None)
        return known[1] if known is not None and _same_span(known[0], span) and not known[1].cancelled() else None

    def take_reply(self, messages: Sequence[ChatMessage], options: GenerationOptions) -> PrefetchedReply | None:
        """A reply is starting: the prefetched stream made for exactly these messages and options (tools, token
        limit, truncation: a session.update or a response's own limit may have changed them since), if any.

        Every other guess is stale from now on and is discarded.
        """
        chosen: PrefetchedReply | None = None
        for item_id in list(self._guesses):
            guess = self._guesses.pop(item_id)
            if guess.reply is None:
                continue
            spoke = guess.reply.first_clause is not None
            self.counts.tts_started += spoke
            if chosen is None and guess.reply.messages == list(messages) and guess.reply.options == options:
                chosen = guess.reply
                self.counts.llm_used += 1
                self.counts.tts_used += spoke
            else:
                self._discard_reply(guess, guess.reply)
        return chosen

    def _discard_reply(self, guess: _Guess, reply: PrefetchedReply) -> None:
        """A guess's prefetched reply nobody will play goes, and the end-of-sentence estimate asked with it (an
        urgent model job for a prompt nobody reads)."""
        self.counts.llm_discarded += 1
        reply.discard()
        if guess.estimate is not None:
            guess.estimate.cancel()

    def close(self) -> None:
        """Cancel everything (the session is ending), the guesses a transcriber adopted too."""
        for item_id in list(self._guesses):
            recognition = self._guesses[item_id].recognition
            self._drop_sync(item_id)
            recognition.cancel()
        for _, task in self._primed.values():
            task.cancel()
        self._primed.clear()


def _same_span(a: tuple[float, float], b: tuple[float, float], within_ms: float = 32.0) -> bool:
    """Two loud stretches that are the same one (their edges within a frame)."""
    return abs(a[0] - b[0]) <= within_ms and abs(a[1] - b[1]) <= within_ms
