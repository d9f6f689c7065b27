"""The embedded language model one reply at a time (``--llm-sequences 1``): a GGUF model on llama-cpp-python,
shared by every session. It is the server's default; ``--llm-sequences N`` selects the batched engine
(:mod:`~bargein.engines.think.llama_batched`). Scripts and benchmarks load it with :func:`load_llama`.

How concurrency works: one ``Llama`` context and one worker thread own the model. Sessions submit
jobs to the worker's inbox. Jobs whose session still waits to hear anything (no first clause yet, or a
tool call being written: :attr:`~bargein.engines.think.llama_jobs.Job.urgent`) are served before all
others, the sessions in turn (:mod:`bargein.engines.fair`), up to ``slice_tokens`` tokens at a time; a
reply already speaking gives way within a token when a new job arrives, and gets an 8-token turn after
waiting 1 s (:func:`~bargein.engines.think.llama_jobs.serve_later_first`). Prefills (a partial transcript's
head start) come last: a session's reply or newer prefill supersedes its waiting ones, one arriving while
first clauses wait is skipped, and a running one stops between prompt chunks when any job arrives. So a
second session's first clause waits neither for the first session's whole reply, nor for a flood of
another session's jobs, nor for stale prefills. Set ``BARGEIN_LLM_TRACE=1`` to log every job's wait,
first clause and prompt reuse (jobs whose first clause took over 1.5 s are always logged).
The context holds one conversation's KV cache at a time; switching conversations copies the outgoing
one's cache out to host memory (:mod:`bargein.engines.think.llama_kv`) and the incoming one's back in, so
every turn evaluates only the tokens its conversation has not seen (KV prefix reuse across turns). Another
session's cache (in the context or a snapshot) is reused only up to the prompt's public prefix (the
instructions and tools, which no user wrote), so no session can time how another's conversation began.
Jobs are interleaved, not batched: throughput is one model's, latency is shared fairly.

The session side (:mod:`~bargein.engines.think.llama_jobs`) is shared with the batched engine: tokens
travel to the event loop with ``call_soon_threadsafe``; the worker checks the response's cancel flag
before every token (and between prompt chunks), so a cancel stops it within one token.
Sampling is done here in numpy (:mod:`bargein.engines.think.llm_sampling`) so that broken logits fall back
to greedy and are counted in ``nonfinite_fallbacks``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bargein.engines.base import LLMCapabilities
from bargein.engines.cpu_reading import available_cores
from bargein.engines.fair import FairQueue
from bargein.engines.think import llm_sampling, text_end
from bargein.engines.think.llama_context import LlamaPrompt, PromptTooLong
from bargein.engines.think.llama_jobs import (
    GRACE_TOKENS,
    Job,
    QueuedEngine,
    reply_sampling,
    serve_later_first,
    trace_job,
)
from bargein.engines.think.llama_jobs import LanguageModelError as LanguageModelError
from bargein.engines.think.llama_kv import KvSnapshots, Tokens, common_prefix, restore_sequence, save_sequence
from bargein.engines.think.llama_stats import TurnStats
from bargein.engines.think.llm_models import describe, resolve_gguf
from bargein.engines.think.llm_prompt import DEFAULT_SYSTEM_PROMPT
from bargein.engines.think.llm_sampling import SamplingParams
from bargein.engines.think.thread_governor import ThreadGovernor
from bargein.values import ChatMessage, GenerationOptions

log = logging.getLogger(__name__)

DEFAULT_LLM = "qwen2.5-coder-0.5b"
"""The packaged model :func:`load_llama` uses unless told otherwise (see docs/llm_choice.md)."""

PROMPT_CHUNK = 32
"""Prompt tokens evaluated per decode call: the cancel flag is checked between chunks."""
MIN_SNAPSHOT_TOKENS = 32
"""A conversation is copied out before being overwritten only if it holds at least this many tokens."""


def default_threads() -> int:
    """Half the CPU cores (at least one): the thread count while other work runs.

    The other half is left to speech recognition and synthesis, which run at the same time. It also
    avoids llama.cpp's OpenMP threads spinning against each other on a busy machine: measured on 2
    shared cores, 2 threads decoded 2 to 8 times slower than 1 while another process was busy. While the
    other cores are idle the model takes them too (:mod:`~bargein.engines.think.thread_governor`).
    """
    return max(1, (os.cpu_count() or 2) // 2)


@dataclass
class _Job(Job):
    tokens: list[int] = field(default_factory=list)
    public: int = 0
    """How many of the prompt's first tokens no user wrote (another session's cache may serve those)."""
    started: bool = False
    synced: bool = False
    text_end_only: bool = False
    """It evaluates the prompt only up to the user's last word and sends :func:`~bargein.engines.think.text_end.
    end_probability` there (or None), leaving the context holding that prefix for the reply that follows."""


def _turn_key(job: Job) -> object:
    return job.owner if job.owner is not None else id(job)  # no session: a turn of its own


class LlamaLanguageModel(QueuedEngine):
    """A :class:`~bargein.engines.base.LanguageModel` on llama.cpp, one context shared by all sessions."""

    def __init__(self, model_path: str | Path, *, name: str | None = None, n_ctx: int = 4096,
                 n_threads: int | None = None, system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
                 sampling: SamplingParams | None = None, seed: int | None = None,
                 slice_tokens: int = 16, snapshot_bytes: int = 256 << 20,
                 snapshot_share_bytes: int | None = None) -> None:
        import llama_cpp  # imported here so the fast tests and the OpenAI engine never need it

        self._lib = llama_cpp
        self.name = name or Path(model_path).name
        self.system_prompt = system_prompt
        self.sampling = sampling or SamplingParams()
        self.slice_tokens = slice_tokens
        self._nonfinite = 0
        """Tokens chosen greedily because the model's logits held NaN or +inf."""
        self.snapshots = KvSnapshots(snapshot_bytes, snapshot_share_bytes or snapshot_bytes // 2)
        self.recent_stats: deque[TurnStats] = deque(maxlen=64)
        # a second thread pays only while its core is free, and costs twice as much when it is not
        self.threads = ThreadGovernor(fewer=n_threads or default_threads(), more=n_threads or available_cores())
        self._llama = llama_cpp.Llama(model_path=str(model_path), n_ctx=n_ctx, n_batch=256,
                                      n_threads=self.threads.fewer, n_threads_batch=self.threads.fewer,
                                      verbose=False)
        self._n_vocab = self._llama.n_vocab()
        self._vocab = llama_cpp.llama_model_get_vocab(self._llama.model)
        self._rng = np.random.default_rng(seed)
        self._prompt = LlamaPrompt(self._llama, system_prompt)
        self._finals = text_end.final_token_mask(self._llama)
        self._kv_saved = True  # nothing worth copying out yet
        self._kv_owner: Hashable | None = None
        """The session whose conversation the context holds."""
        self._inbox: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._active_count = 0
        self._worker = threading.Thread(target=self._serve, name=f"llm-{self.name}", daemon=True)
        self._worker.start()

    def _submit(self, job: Job) -> None:
        assert isinstance(job, _Job)  # made by _new_job
        self._inbox.put(job)

    def _new_job(self, messages: Sequence[ChatMessage], options: GenerationOptions,
                 emit: Callable[[object], None], *, prefill_only: bool = False) -> Job:
        return _Job(list(messages), options, emit, prefill_only=prefill_only)

    @property
    def capabilities(self) -> LLMCapabilities:
        """Tools and prefill (:class:`~bargein.engines.think.llama_jobs.QueuedEngine`), and the end-of-sentence
        estimate (:meth:`text_end`)."""
        return LLMCapabilities(tools=True, prefill=True, text_end=True)

    async def text_end(self, messages: Sequence[ChatMessage], options: GenerationOptions | None = None) -> float | None:
        """The probability that the last message's words end the sentence, read where the prompt a reply to
        ``messages`` would evaluate reaches the user's last word (before the final mark and the template's close).

        Asked just before that reply (the pause's speculative one), it costs one more read of logits: the
        context is left holding the prompt up to the word, which the reply then reuses. An urgent job: it is
        served with first clauses, before replies already speaking and prefills."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[float | None] = loop.create_future()

        def settle(item: object) -> None:
            if not answer.done():
                answer.set_result(item if isinstance(item, float) else None)

        def emit(item: object) -> None:
            loop.call_soon_threadsafe(settle, item)

        job = _Job(list(messages), options or GenerationOptions(), emit, text_end_only=True)
        self._submit(job)
        try:
            return await answer
        finally:
            job.stop.set()  # cancelled while waiting: the model thread skips it

    def close(self) -> None:
        """Stop the worker (after the reply in progress) and free the model."""
        if self._worker.is_alive():
            self._inbox.put(None)
            self._worker.join()
        self._llama.close()

    # --- the worker ----------------------------------------------------------------------------------------

    @property
    def queue_depth(self) -> int:
        """Replies being generated in turns or waiting to start (the ``bargein_queue_depth`` gauge)."""
        return self._active_count + self._inbox.qsize()

    def _serve(self) -> None:
        # Urgent jobs (no first clause yet, or a tool call) before any other: first audio waits for them.
        urgent: FairQueue[_Job] = FairQueue()
        later: FairQueue[_Job] = FairQueue()
        later_since: float | None = None  # when the later jobs last had a turn (or began to wait)
        while True:
            self._active_count = len(urgent) + len(later)
            waiting = [self._inbox.get()] if not self._active_count else []
            while True:
                try:
                    waiting.append(self._inbox.get_nowait())
                except queue.Empty:
                    break
            for job in waiting:
                if job is None:
                    for left in [*urgent.drain(), *later.drain()]:
                        self._finish(left, "cancelled")
                    return
                key = _turn_key(job)
                if job.urgent or job.prefill_only:
                    self._supersede_prefills(later, key)
                if job.prefill_only and urgent:  # it would run only after them, by then stale: skip it
                    self._finish(job, "skipped")
                    continue
                (urgent if job.urgent else later).put(key, job)
            self._active_count = len(urgent) + len(later)  # the job advanced next included
            now = time.perf_counter()
            later_since = None if not later else later_since or now
            if serve_later_first(bool(urgent), later_since, now):
                later_since = now
                session, job = later.pop()
                if job.prefill_only and urgent:
                    self._finish(job, "skipped")
                    continue
                limit = self.slice_tokens if not urgent else GRACE_TOKENS
            else:
                session, job = urgent.pop()
                limit = self.slice_tokens
            if not self._advance(job, limit):
                (urgent if job.urgent else later).put_front(session, job)  # its session's next turn goes on with it

    def _supersede_prefills(self, later: FairQueue[_Job], key: object) -> None:
        """A session's newer prefill or its reply makes its waiting prefills stale: the reply evaluates its
        own prompt anyway, so running an older guess at it first could only add work."""
        for earlier in later.take(key):
            if earlier.prefill_only:
                self._finish(earlier, "superseded")
            else:
                later.put(key, earlier)

    def _advance(self, job: _Job, limit: int) -> bool:
        """Run up to ``limit`` tokens of ``job``; True once it is finished.

        A job that is not urgent gives way (after its current token) as soon as a new job arrives, and an
        urgent one once its first clause is whole, so the scheduler can serve the most urgent job next.
        """
        try:
            if not job.started:
                job.started = True
                job.stats.waited_s = time.perf_counter() - job.submitted
                job.tokens = self._prompt_tokens(job)
                job.stats.prompt_tokens = len(job.tokens)
            if job.text_end_only:
                return self._estimate(job)
            if job.prefill_only:  # stopped between prompt chunks by any new job: it is only a head start
                synced = self._sync_kv(job)
                return self._finish(job, "prefilled" if synced else "cancelled" if job.stop.is_set() else "preempted")
            was_urgent = job.urgent
            for _ in range(limit):
                if job.stop.is_set():
                    return self._finish(job, "cancelled")
                if not was_urgent and not self._inbox.empty():
                    return False
                if not self._sync_kv(job):
                    return self._finish(job, "cancelled")
                logits = self._last_logits()
                recent = np.asarray(job.generated[-self.sampling.repeat_window:], dtype=np.intc)
                pick = llm_sampling.sample(logits, reply_sampling(self.sampling, job), self._rng, recent)
                if pick.fell_back:
                    self._nonfinite += 1
                    log.warning("%s produced non-finite logits; took the greedy token", self.name)
                if pick.token is None or self._lib.llama_vocab_is_eog(self._vocab, pick.token):
                    return self._finish(job, "stop")
                job.generated.append(pick.token)
                job.tokens.append(pick.token)
                # <tool_call> is a special token in Qwen's vocabulary: kept as text when tools are offered
                text = job.decoder.decode(self._llama.detokenize([pick.token], special=bool(job.options.tools)))
                job.send_text(text)
                if len(job.generated) >= job.options.max_tokens:
                    return self._finish(job, "length")
                if was_urgent and not job.urgent:
                    return False
            return False
        except Exception as exc:  # the session gets an error event; the model and the worker live on
            log.exception("%s failed while generating", self.name)
            self._llama.n_tokens = 0
            self._kv_saved = True
            job.send(exc)
            return self._finish(job, "error")

    def _estimate(self, job: _Job) -> bool:
        """Evaluate ``job``'s prompt up to the user's last word and send the end-of-sentence probability there."""
        last = job.messages[-1].content if job.messages and job.messages[-1].role == "user" else ""
        words = self._prompt.tokens_of(text_end.estimate_words(last))
        end = text_end.words_end(job.tokens, words)
        if end is None:
            job.send(None)
            return self._finish(job, "no words")
        job.tokens = job.tokens[:end]
        if job.stop.is_set() or not self._sync_kv(job):
            return self._finish(job, "cancelled")
        job.send(text_end.end_probability(self._last_logits(), self._finals))
        return self._finish(job, "estimated")

    def _last_logits(self) -> npt.NDArray[np.float32]:
        """The logits after the context's last evaluated token (a view into llama.cpp's buffer: read before the next
        evaluation)."""
        return np.ctypeslib.as_array(self._lib.llama_get_logits_ith(self._llama.ctx, -1), shape=(self._n_vocab,))

    def _finish(self, job: _Job, reason: str) -> bool:
        self.recent_stats.append(job.stats)
        job.finish(reason)
        trace_job(log, self.name, job, self._active_count)
        return True

    def _prompt_tokens(self, job: _Job) -> list[int]:
        """The prompt, without the oldest exchanges that do not fit; the reply gets the room left."""
        try:
            tokens, job.public = self._prompt.fit_public(job.messages, job.options)
        except PromptTooLong as error:
            raise LanguageModelError(str(error)) from None
        room = self._llama.n_ctx() - len(tokens)
        job.options = replace(job.options, max_tokens=min(job.options.max_tokens, room))
        return tokens

    def _sync_kv(self, job: _Job) -> bool:
        """Make the context hold ``job.tokens`` and their last logits, evaluating only what is missing.

        Returns False if the job was cancelled halfway through its prompt.
        """
        llama = self._llama
        target: Tokens = np.asarray(job.tokens, dtype=np.intc)
        last = target.shape[0] - 1  # at least the last token is evaluated, for its logits
        kept = min(common_prefix(llama.input_ids[: llama.n_tokens], target), last)
        if self._kv_owner != job.owner:  # another session's conversation: only the public prefix serves
            kept = min(kept, job.public)
        snapshot, shared = self.snapshots.best(target, job.owner, job.public)
        shared = min(shared, last)
        first_sync = not job.synced
        job.synced = True
        if snapshot is not None and shared > kept:
            self._save_current()
            restore_sequence(self._lib, llama.ctx, snapshot)
            llama.input_ids[: snapshot.tokens.shape[0]] = snapshot.tokens
            llama.n_tokens = snapshot.tokens.shape[0]
            self._kv_saved = True
            kept = shared
            if first_sync:
                job.stats.restored_snapshot = True
        elif llama.n_tokens - kept >= MIN_SNAPSHOT_TOKENS:
            self._save_current()  # another conversation is about to be overwritten: keep it
        if first_sync:
            job.stats.reused_tokens = kept
        llama.n_tokens = kept
        self._kv_owner = job.owner
        for start in range(kept, target.shape[0], PROMPT_CHUNK):
            if job.stop.is_set() or (job.prefill_only and not self._inbox.empty()):
                return False
            self._eval(target[start:start + PROMPT_CHUNK].tolist(), job)
            self._kv_saved = False
        return True

    def _eval(self, tokens: list[int], job: _Job) -> None:
        with self.threads.evaluation(self._set_threads) as threads:
            job.stats.evaluations += 1
            job.stats.wide_evaluations += threads > self.threads.fewer
            self._llama.eval(tokens)

    def _set_threads(self, threads: int) -> None:
        self._lib.llama_set_n_threads(self._llama.ctx, threads, threads)

    def _save_current(self) -> None:
        llama = self._llama
        if self._kv_saved or llama.n_tokens < MIN_SNAPSHOT_TOKENS:
            return
        tokens = np.array(llama.input_ids[: llama.n_tokens], dtype=np.intc)
        self.snapshots.add(save_sequence(self._lib, llama.ctx, tokens, owner=self._kv_owner))
        self._kv_saved = True


def load_llama(name: str = DEFAULT_LLM, **kwargs: Any) -> LlamaLanguageModel:
    """Load a packaged model by registry name (or a local ``.gguf`` path), verified and warmed up.

    The warm-up runs one tiny reply, which also leaves the system prompt's KV cache in place for
    the first real turn.
    """
    model = LlamaLanguageModel(resolve_gguf(name), name=name, **kwargs)
    log.info("language model: %s", describe(name))
    model.generate([ChatMessage(role="user", content="Hi!")], GenerationOptions(max_tokens=4))
    return model
