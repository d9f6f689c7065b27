"""The session side of the embedded llama.cpp engines: a reply is a job put on the model thread's inbox.

Both embedded engines (:mod:`~bargein.engines.think.llama_llm`, one sequence at a time, and
:mod:`~bargein.engines.think.llama_batched`, many sequences per step) own their model from one thread.
A session's reply is a :class:`Job`; tokens travel back to the session's event loop with
``call_soon_threadsafe``, and a cancel sets the job's ``stop`` flag, which the model thread checks before
every token. :class:`QueuedEngine` is that shared front: streaming, prefill, blocking generation and the
per-reply figures.
"""

from __future__ import annotations

import asyncio
import codecs
import logging
import os
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Hashable, Sequence
from dataclasses import dataclass, field

from bargein.engines.base import LLMCapabilities
from bargein.engines.fair import owner_now
from bargein.engines.speak.clauses import FIRST_CLAUSE_WORDS, ClauseSplitter
from bargein.engines.think.llama_prompt import TemplateToolCalling
from bargein.engines.think.llama_stats import TurnStats
from bargein.engines.think.llm_sampling import SamplingParams
from bargein.engines.think.tool_calls import forced_tool
from bargein.metrics.cost_meter import note_usage
from bargein.values import CancelToken, ChatMessage, GenerationOptions

END = object()
"""The last item a job sends: the reply is complete (or was cancelled)."""


class LanguageModelError(RuntimeError):
    """Generation failed inside the model; the session reports it and lives on."""


@dataclass
class Job:
    """One reply (or prefill) asked of the model thread."""

    messages: list[ChatMessage]
    options: GenerationOptions
    emit: Callable[[object], None]
    stop: threading.Event = field(default_factory=threading.Event)
    stats: TurnStats = field(default_factory=TurnStats)
    generated: list[int] = field(default_factory=list)
    head: str = ""
    """The reply's first characters: whether it is a tool call."""
    prefill_only: bool = False
    submitted: float = field(default_factory=time.perf_counter)
    owner: Hashable | None = field(default_factory=owner_now)
    decoder: codecs.IncrementalDecoder = field(
        default_factory=lambda: codecs.getincrementaldecoder("utf-8")(errors="replace"))
    done: threading.Event = field(default_factory=threading.Event)
    heard: ClauseSplitter | None = field(default_factory=lambda: ClauseSplitter(first_max_words=FIRST_CLAUSE_WORDS))
    """Cuts the reply's text as the session's speech does, until its first clause is whole (then None)."""

    @property
    def urgent(self) -> bool:
        """Whether the session still waits to hear anything of this reply: it has no first clause yet, or
        it is writing a tool call (the words come after the tool's result). A prefill is never urgent.

        The engines serve urgent jobs before any other: first audio waits for a first clause, while a
        reply already speaking has seconds of audio queued ahead of its next tokens.
        """
        return not self.prefill_only and (self.heard is not None or self.calling_tool)

    @property
    def calling_tool(self) -> bool:
        """Whether the reply so far reads as a tool call (its text is not spoken)."""
        return bool(self.options.tools) and self.head.lstrip()[:1] in ("<", "{", "`")

    def send(self, item: object) -> None:
        """Hand ``item`` to the session; a session whose loop has closed stops the job."""
        try:
            self.emit(item)
        except RuntimeError:  # the session's event loop is closed: nobody listens, stop generating
            self.stop.set()

    def send_text(self, text: str) -> None:
        """Send a decoded piece of the reply, noting the first one's time and the reply's head."""
        if not text:
            return
        self.head = self.head if len(self.head) >= 16 else self.head + text
        if self.stats.first_token_s is None:
            self.stats.first_token_s = time.perf_counter() - self.submitted
        if self.heard is not None and not self.calling_tool and self.heard.feed(text):
            self.heard = None
            self.stats.first_clause_s = time.perf_counter() - self.submitted
        self.send(text)

    def finish(self, reason: str) -> None:
        """Record how the job ended and send the end marker (after any undecoded tail)."""
        self.stats.finish_reason = reason
        self.stats.completion_tokens = len(self.generated)
        self.stats.total_s = time.perf_counter() - self.submitted
        tail = self.decoder.decode(b"", final=True)
        if tail and reason != "cancelled":
            self.send(tail)
        self.done.set()  # before the end marker, so a stream that sees the end also sees the job done
        self.send(END)


TOOL_RESULT_TEMPERATURE = 0.3
"""The highest temperature a reply right after a tool's result is sampled at."""


def reply_sampling(base: SamplingParams, job: Job) -> SamplingParams:
    """The sampler for ``job``'s next token.

    Whether to call a tool, and the call itself, are chosen greedily without the repeat penalty (JSON
    repeats its quotes and braces); a small model sampled at 0.7 calls the wrong tool or none.

    The answer to a tool's result is sampled at no more than :data:`TOOL_RESULT_TEMPERATURE`: it reports
    the result. At 0.7 the embedded 0.5B model ignored the result in 3 of 12 tries (it asked the user's
    question back, or offered help) and at 0.3 in none of 16.
    """
    options = job.options
    if options.tools and (forced_tool(options) is not None or not job.head.strip() or job.calling_tool):
        return SamplingParams(temperature=0.0, top_k=base.top_k, top_p=base.top_p, repeat_penalty=1.0,
                              repeat_window=base.repeat_window)
    temperature = options.temperature
    if job.messages and job.messages[-1].role == "tool":
        temperature = min(temperature, TOOL_RESULT_TEMPERATURE)
    return SamplingParams(temperature=temperature, top_k=base.top_k, top_p=base.top_p,
                          repeat_penalty=base.repeat_penalty, repeat_window=base.repeat_window)


TAIL_GRACE_S = 1.0
"""Replies already speaking (and prefills) wait for first clauses at most this long before they get a turn:
the session has heard only a first clause, a second or so of speech."""
GRACE_TOKENS = 8
"""Tokens such a turn runs while first clauses wait (about a clause)."""


def serve_later_first(urgent_waiting: bool, later_since: float | None, now: float) -> bool:
    """Whether the model thread serves a job that is not urgent next: when no urgent job waits, or when the
    others have waited :data:`TAIL_GRACE_S` since their last turn (``later_since``; None: none waits)."""
    if later_since is None:
        return False
    return not urgent_waiting or now - later_since >= TAIL_GRACE_S


TRACE_ENV = "BARGEIN_LLM_TRACE"
"""Set to 1 to log every reply's wait, prompt reuse and timings (the worker's log); otherwise only the slow ones."""
SLOW_FIRST_CLAUSE_S = 1.5
"""A reply whose first clause took longer than this is logged even without :data:`TRACE_ENV`."""


def trace_job(log: logging.Logger, engine: str, job: Job, held: int) -> None:
    """Log where a finished job's time went: the line that tells what a slow turn waited on."""
    stats = job.stats
    slow = stats.first_clause_s is not None and stats.first_clause_s > SLOW_FIRST_CLAUSE_S
    level = logging.INFO if slow or os.environ.get(TRACE_ENV) == "1" else logging.DEBUG
    if not log.isEnabledFor(level):
        return

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{1000 * value:.0f}"

    kind = "prefill" if job.prefill_only else "call" if job.calling_tool else "reply"
    log.log(level, "%s job session=%s kind=%s end=%s held=%d waited_ms=%s first_token_ms=%s first_clause_ms=%s "
            "total_ms=%s prompt=%d reused=%d restored=%s tokens=%d wide_evals=%d/%d", engine, _short(job.owner), kind,
            stats.finish_reason, held, ms(stats.waited_s), ms(stats.first_token_s), ms(stats.first_clause_s),
            ms(stats.total_s), stats.prompt_tokens, stats.reused_tokens, stats.restored_snapshot,
            stats.completion_tokens, stats.wide_evaluations, stats.evaluations)


def _short(owner: Hashable | None) -> str:
    return "-" if owner is None else f"{hash(owner) & 0xFFFF:04x}"


class QueuedEngine(TemplateToolCalling):
    """Streaming, prefill and blocking generation over a model thread that serves :class:`Job` s."""

    name: str
    recent_stats: deque[TurnStats]
    _nonfinite: int = 0

    @property
    def nonfinite_fallbacks(self) -> int:
        """Samplings that fell back to greedy because the distribution was not finite."""
        return self._nonfinite

    @property
    def capabilities(self) -> LLMCapabilities:
        """It calls the tools it is offered, and evaluates a prompt ahead of its reply (:meth:`prefill`)."""
        return LLMCapabilities(tools=True, prefill=True)

    def _submit(self, job: Job) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Stop the model thread and free the model."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """:meth:`close` without blocking the event loop."""
        await asyncio.to_thread(self.close)

    def _new_job(self, messages: Sequence[ChatMessage], options: GenerationOptions,
                 emit: Callable[[object], None], *, prefill_only: bool = False) -> Job:
        return Job(list(messages), options, emit, prefill_only=prefill_only)

    async def _text(self, messages: Sequence[ChatMessage], cancel: CancelToken,
                    options: GenerationOptions) -> AsyncIterator[str]:
        if cancel.cancelled:
            return
        loop = asyncio.get_running_loop()
        # Unbounded in type only: the model thread puts at most max_tokens pieces and one end marker.
        pieces: asyncio.Queue[object] = asyncio.Queue()

        def emit(item: object) -> None:
            loop.call_soon_threadsafe(pieces.put_nowait, item)

        job = self._new_job(messages, options, emit)

        def halt() -> None:
            if not job.stop.is_set() and not job.done.is_set():
                job.stats.tokens_at_cancel = len(job.generated)
                job.stop.set()

        async def watch_cancel() -> None:
            await cancel.wait()
            halt()
            pieces.put_nowait(END)

        watcher = asyncio.ensure_future(watch_cancel())
        self._submit(job)
        try:
            while True:
                item = await pieces.get()
                if item is END or cancel.cancelled:
                    return
                if isinstance(item, BaseException):
                    raise LanguageModelError(f"{self.name} failed: {item}") from item
                assert isinstance(item, str)
                yield item
        finally:
            halt()  # the cancel seen here first, or the consumer walked away without cancelling
            watcher.cancel()
            # the prompt's size and the part of it whose KV cache was reused: the reply's honest usage
            note_usage({"prompt_tokens": job.stats.prompt_tokens, "cached_tokens": job.stats.reused_tokens})

    def prefill(self, messages: Sequence[ChatMessage], options: GenerationOptions | None = None) -> None:
        """Evaluate a prompt ahead of its reply, without waiting; the reply's first token then comes sooner.

        Meant for a session that already knows most of the next prompt (a partial transcript while the
        user is finishing a sentence): the final prompt reuses whatever prefix still matches.
        """
        self._submit(self._new_job(messages, options or GenerationOptions(), lambda item: None, prefill_only=True))

    def generate(self, messages: Sequence[ChatMessage], options: GenerationOptions | None = None) -> str:
        """The whole reply, blocking (for warm-up, scripts and benchmarks; never on the event loop)."""
        out: list[object] = []
        job = self._new_job(messages, options or GenerationOptions(), out.append)
        self._submit(job)
        job.done.wait()
        errors = [item for item in out if isinstance(item, BaseException)]
        if errors:
            raise LanguageModelError(f"{self.name} failed: {errors[0]}") from errors[0]
        return "".join(item for item in out if isinstance(item, str))

    @property
    def last_stats(self) -> TurnStats | None:
        """Figures of the most recently finished reply."""
        return self.recent_stats[-1] if self.recent_stats else None
