"""The embedded LLM decoding every session's reply in one llama.cpp batch per step.

One llama.cpp context holds ``n_seq`` sequences in one unified KV cache. Every step is one
``llama_decode`` over a batch that carries the last sampled token of every generating sequence and a
chunk of each newly admitted prompt; each sequence then samples its next token from its own logits. A
second talker therefore costs the first a little throughput (a larger batch per step), not a whole
reply's wait as with one sequence at a time.

What the single-sequence engine (:mod:`~bargein.engines.think.llama_llm`) does, this one does too:

* **KV kept between turns.** A finished reply's sequence keeps its cache; the session's next prompt
  starts where it left off (:mod:`~bargein.engines.think.llama_slots` chooses the sequence by the tokens
  it holds). The public prefix another session's sequence holds (the system prompt and tools, which no
  user wrote; never more of another's conversation) is copied, which in a unified cache shares cells and
  moves no data. A conversation pushed out of its
  sequence is kept as a host-memory snapshot (:mod:`~bargein.engines.think.llama_kv`) and restored when
  its session speaks again.
* **The same prompt trimming** (:class:`~bargein.engines.think.llama_context.LlamaPrompt`), against one
  sequence's context.
* **Fairness.** Requests beyond ``n_seq`` wait in a per-session round-robin queue
  (:class:`~bargein.engines.fair.FairQueue`); a prompt enters at most ``PROMPT_CHUNK`` tokens per step,
  after every generating sequence's next token, so a long prompt never stalls the others.
* **Tool calls, prefill, cancel within one token, non-finite logits counted**, and it runs in the
  supervised worker process like the single engine (``bargein serve --llm-sequences N``).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from bargein.engines.cpu_reading import available_cores
from bargein.engines.fair import FairQueue
from bargein.engines.think import llm_sampling
from bargein.engines.think.llama_context import LlamaPrompt, PromptTooLong
from bargein.engines.think.llama_jobs import Job, LanguageModelError, QueuedEngine, reply_sampling
from bargein.engines.think.llama_kv import KvSnapshot, KvSnapshots, restore_sequence, save_sequence
from bargein.engines.think.llama_slots import Plan, Slot, SlotTable
from bargein.engines.think.llama_stats import TurnStats
from bargein.engines.think.llm_prompt import DEFAULT_SYSTEM_PROMPT
from bargein.engines.think.llm_sampling import SamplingParams
from bargein.engines.think.thread_governor import ThreadGovernor
from bargein.values import ChatMessage, GenerationOptions

log = logging.getLogger(__name__)
PROMPT_CHUNK = 128
"""Prompt tokens of one sequence per step: a long prompt does not stall the others' next tokens."""
MIN_SNAPSHOT_TOKENS = 32
"""A conversation pushed out of its sequence is copied to host memory only if it holds this many tokens."""
DECODE_NO_ROOM = 1
SLOW_FIRST_TOKEN_S = 2.0
"""A reply whose first token took longer than this is logged with where the time went."""
"""``llama_decode``'s answer when the KV cache has no room for the batch."""


@dataclass
class _Request(Job):
    slot: Slot | None = None
    prompt: list[int] = field(default_factory=list)
    public: int = 0
    """How many of the prompt's first tokens no user wrote (another session's cache may serve those)."""
    fed: int = 0
    """Prompt tokens in the sequence's cache."""
    pending: bool = False
    """The last sampled token is not in the cache yet (it goes into the next step)."""
    admitted: float = 0.0
    """When it got its sequence (``time.perf_counter``)."""


class BatchedLlamaLanguageModel(QueuedEngine):
    """A :class:`~bargein.engines.base.LanguageModel` that decodes up to ``n_seq`` replies together."""

    def __init__(self, model_path: str | Path, *, name: str | None = None, n_seq: int = 4,
                 n_ctx_per_seq: int = 4096, n_threads: int | None = None,
                 system_prompt: str | None = DEFAULT_SYSTEM_PROMPT, sampling: SamplingParams | None = None,
                 seed: int | None = None, snapshot_bytes: int = 256 << 20,
                 snapshot_share_bytes: int | None = None) -> None:
        import llama_cpp

        from bargein.engines.think.llama_llm import default_threads

        self._lib = llama_cpp
        self.name = name or Path(model_path).name
        self.n_seq = n_seq
        self.n_ctx_per_seq = n_ctx_per_seq
        self.system_prompt = system_prompt
        self.sampling = sampling or SamplingParams()
        self._nonfinite = 0
        """Tokens chosen greedily because the model's logits held NaN or +inf."""
        self.steps = 0
        self.largest_batch = 0
        self.snapshots = KvSnapshots(snapshot_bytes, snapshot_share_bytes or snapshot_bytes // 2)
        self.recent_stats: deque[TurnStats] = deque(maxlen=64)
        # a second thread pays only while its core is free, and costs twice as much when it is not
        self.threads = ThreadGovernor(fewer=n_threads or default_threads(), more=n_threads or available_cores())
        threads = self.threads.fewer
        # this Llama gives the model, tokenizer and chat template; decoding runs in the context below
        self._llama = llama_cpp.Llama(model_path=str(model_path), n_ctx=256, n_threads=threads, verbose=False)
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_seq * n_ctx_per_seq
        params.n_batch = max(512, n_seq * PROMPT_CHUNK)
        params.n_ubatch = params.n_batch
        params.n_seq_max = n_seq
        params.kv_unified = True  # one cache: copying a shared prefix into a sequence moves no data
        params.n_threads = params.n_threads_batch = threads
        self._ctx = llama_cpp.llama_init_from_model(self._llama.model, params)
        if not self._ctx:
            raise RuntimeError(f"llama.cpp could not make a context of {n_seq} sequences for {self.name}")
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(params.n_batch, 0, 1)
        self._capacity = int(params.n_batch)
        self._vocab = llama_cpp.llama_model_get_vocab(self._llama.model)
        self._n_vocab = self._llama.n_vocab()
        self._rng = np.random.default_rng(seed)
        self._prompt = LlamaPrompt(self._llama, system_prompt, n_ctx=n_ctx_per_seq)
        self._slots = SlotTable(n_seq, MIN_SNAPSHOT_TOKENS)
        self._inbox: queue.SimpleQueue[_Request | None] = queue.SimpleQueue()
        self._depth = 0
        self._depth_lock = threading.Lock()
        self._prefills: dict[Hashable, _Request] = {}
        self._worker = threading.Thread(target=self._serve, name=f"llm-batched-{self.name}", daemon=True)
        self._worker.start()

    @property
    def queue_depth(self) -> int:
        """Replies being decoded or waiting for a sequence (the ``bargein_queue_depth`` gauge)."""
        return self._depth

    def _submit(self, job: Job) -> None:
        assert isinstance(job, _Request)  # made by _new_job
        with self._depth_lock:
            self._depth += 1
        self._inbox.put(job)

    def _new_job(self, messages: Sequence[ChatMessage], options: GenerationOptions,
                 emit: Callable[[object], None], *, prefill_only: bool = False) -> Job:
        return _Request(list(messages), options, emit, prefill_only=prefill_only)

    def close(self) -> None:
        """Stop the decoding thread (ending the replies in progress) and free the context."""
        if self._worker.is_alive():
            self._inbox.put(None)
            self._worker.join()
            self._lib.llama_batch_free(self._batch)
            self._lib.llama_free(self._ctx)
            self._llama.close()

    # --- the decoding thread -----------------------------------------------------------------------------

    def _serve(self) -> None:
        active: list[_Request] = []
        backlog: FairQueue[_Request] = FairQueue()
        while True:
            incoming = [self._inbox.get()] if not active and not len(backlog) else []
            while True:
                try:
                    incoming.append(self._inbox.get_nowait())
                except queue.Empty:
                    break
            if None in incoming:
                for request in active + backlog.drain():
                    self._finish(request, "cancelled")
                return
            for arrived in incoming:
                assert arrived is not None
                self._queue(backlog, arrived)
            for request in [r for r in active if r.stop.is_set()]:
                active.remove(request)
                self._finish(request, "prefilled" if request.prefill_only else "cancelled")
            while len(backlog) and self._slots.free:
                request = self._next_fair(backlog, active)
                if request.stop.is_set():
                    self._finish(request, "cancelled")
                elif self._admit(request):
                    active.append(request)
            if active:
                active = self._step(active)

    def _queue(self, backlog: FairQueue[_Request], request: _Request) -> None:
        """Wait in the session's turn; a session's reply ends its own prefill where it got to (the reply
        then starts from what the prefill evaluated)."""
        key = request.owner if request.owner is not None else id(request)
        earlier = self._prefills.pop(key, None)
        if earlier is not None:
            earlier.stop.set()
        if request.prefill_only:
            self._prefills[key] = request
        backlog.put(key, request)

    @staticmethod
    def _next_fair(backlog: FairQueue[_Request], active: list[_Request]) -> _Request:
        """The next waiting request in the sessions' turn, passing over sessions already decoding a reply
        while another session waits with none."""
        busy = {request.owner for request in active if request.owner is not None}
        passed: list[tuple[Hashable, _Request]] = []
        chosen: _Request | None = None
        for _ in range(len(backlog)):
            key, request = backlog.pop()
            if request.owner is None or request.owner not in busy:
                chosen = request
                break
            passed.append((key, request))
        if chosen is None:
            key, chosen = passed.pop(0)
        for key, request in reversed(passed):
            backlog.put_front(key, request)
        return chosen

    def _admit(self, request: _Request) -> bool:
        """Give ``request`` a sequence holding as much of its prompt as any cache does; False on failure."""
        try:
            try:
                request.prompt, request.public = self._prompt.fit_public(request.messages, request.options)
            except PromptTooLong as error:
                raise LanguageModelError(str(error)) from None
            room = self.n_ctx_per_seq - len(request.prompt)
            request.options = replace(request.options, max_tokens=min(request.options.max_tokens, room))
            snapshot, shared = self.snapshots.best(np.asarray(request.prompt, dtype=np.intc), request.owner,
                                                   request.public)
            plan = self._slots.plan(request.prompt, shared if snapshot is not None else 0, request.owner,
                                    request.public)
            try:
                self._carry_out(plan, snapshot, request.owner)
            except Exception:
                self._lib.llama_memory_seq_rm(self._memory, plan.target.seq, -1, -1)
                plan.target.tokens = []
                raise
        except Exception as error:  # a prompt that cannot be served ends that reply, not the engine
            log.exception("%s could not start a reply", self.name)
            request.send(error)
            self._finish(request, "error")
            return False
        self._slots.take(plan.target)
        request.slot, request.fed, request.admitted = plan.target, plan.kept, time.perf_counter()
        request.stats.prompt_tokens, request.stats.reused_tokens = len(request.prompt), plan.kept
        request.stats.restored_snapshot = plan.from_snapshot
        return True

    def _carry_out(self, plan: Plan, snapshot: KvSnapshot | None, owner: Hashable | None) -> None:
        slot, memory, lib = plan.target, self._memory, self._lib
        if plan.save_evicted:
            self._save(slot)
        slot.owner = owner
        if plan.from_snapshot and snapshot is not None:
            restore_sequence(lib, self._ctx, snapshot, slot.seq)
            slot.tokens = snapshot.tokens.tolist()
        elif plan.source_seq is None:
            slot.tokens = []
        elif plan.source_seq != slot.seq:
            lib.llama_memory_seq_rm(memory, slot.seq, -1, -1)
            lib.llama_memory_seq_cp(memory, plan.source_seq, slot.seq, 0, plan.kept)
            slot.tokens = self._slots.slots[plan.source_seq].tokens[:plan.kept]
        lib.llama_memory_seq_rm(memory, slot.seq, plan.kept, -1)
        del slot.tokens[plan.kept:]

    def _save(self, slot: Slot) -> None:
        try:
            self.snapshots.add(save_sequence(self._lib, self._ctx, np.asarray(slot.tokens, dtype=np.intc), slot.seq,
                                             slot.owner))
        except RuntimeError:
            log.warning("%s: could not keep a conversation's KV cache; it will be evaluated again", self.name)

    def _decode(self) -> int:
        with self.threads.evaluation(lambda threads: self._lib.llama_set_n_threads(self._ctx, threads, threads)):
            return int(self._lib.llama_decode(self._ctx, self._batch))

    def _step(self, active: list[_Request]) -> list[_Request]:
        """One ``llama_decode`` over every active sequence; returns those still going."""
        rows: list[tuple[_Request, int]] = []
        fed: list[tuple[_Request, list[int]]] = []
        count = 0
        for request in active:  # every generating sequence's next token first
            if request.pending and request.slot is not None:
                token = request.generated[-1]
                self._put(count, token, len(request.slot.tokens), request.slot.seq, True)
                rows.append((request, count))
                fed.append((request, [token]))
                count += 1
        for request in active:  # then prompts, a chunk each while there is room
            if request.fed < len(request.prompt) and request.slot is not None and count < self._capacity:
                chunk = request.prompt[request.fed:request.fed + min(PROMPT_CHUNK, self._capacity - count)]
                for offset, token in enumerate(chunk):
                    last = request.fed + offset == len(request.prompt) - 1 and not request.prefill_only
                    self._put(count, token, request.fed + offset, request.slot.seq, last)
                    if last:
                        rows.append((request, count))
                    count += 1
                fed.append((request, chunk))
        if count == 0:
            return active
        self._batch.n_tokens = count
        self.steps += 1
        self.largest_batch = max(self.largest_batch, count)
        code = self._decode()
        if code == DECODE_NO_ROOM:  # idle conversations fill the cache: drop them and try once more
            for slot in self._slots.forget_free():
                self._lib.llama_memory_seq_rm(self._memory, slot.seq, -1, -1)
            code = self._decode()
        if code != 0:
            error = LanguageModelError(f"{self.name}: llama_decode failed ({code}) on a batch of {count} tokens")
            for request in active:
                request.send(error)
                self._finish(request, "error")
            return []
        for request, tokens in fed:
            assert request.slot is not None
            request.slot.tokens.extend(tokens)
            if request.pending:
                request.pending = False
            else:
                request.fed += len(tokens)
        still: list[_Request] = []
        sampled = {id(request): row for request, row in rows}
        for request in active:
            row = sampled.get(id(request))
            reason = self._sample(request, row) if row is not None else None
            if request.prefill_only and request.fed >= len(request.prompt):
                self._finish(request, "prefilled")
            elif reason is None:
                still.append(request)
            else:
                self._finish(request, reason)
        return still

    def _put(self, index: int, token: int, position: int, seq: int, logits: bool) -> None:
        batch = self._batch
        batch.token[index] = token
        batch.pos[index] = position
        batch.n_seq_id[index] = 1
        batch.seq_id[index][0] = seq
        batch.logits[index] = logits

    def _sample(self, request: _Request, row: int) -> str | None:
        """Pick and send the next token; the finish reason once the reply is complete, else None."""
        if request.stop.is_set():
            return "cancelled"
        logits = np.ctypeslib.as_array(self._lib.llama_get_logits_ith(self._ctx, row), shape=(self._n_vocab,))
        recent = np.asarray(request.generated[-self.sampling.repeat_window:], dtype=np.intc)
        pick = llm_sampling.sample(logits, reply_sampling(self.sampling, request), self._rng, recent)
        if pick.fell_back:
            self._nonfinite += 1
            log.warning("%s produced non-finite logits; took the greedy token", self.name)
        if pick.token is None or self._lib.llama_vocab_is_eog(self._vocab, pick.token):
            return "stop"
        request.generated.append(pick.token)
        request.pending = True
        # <tool_call> is a special token in Qwen's vocabulary: kept as text when tools are offered
        tools = bool(request.options.tools)
        request.send_text(request.decoder.decode(self._llama.detokenize([pick.token], special=tools)))
        return "length" if len(request.generated) >= request.options.max_tokens else None

    def _finish(self, request: _Request, reason: str) -> None:
        slot, request.slot = request.slot, None
        if slot is not None:
            if reason == "error":  # what the cache holds for it is unknown: start that sequence afresh
                self._lib.llama_memory_seq_rm(self._memory, slot.seq, -1, -1)
                slot.tokens = []
            self._slots.release(slot)  # the cache stays for the conversation's next turn
        key = request.owner if request.owner is not None else id(request)
        if self._prefills.get(key) is request:
            del self._prefills[key]
        if not request.prefill_only:
            self.recent_stats.append(request.stats)
            first = request.stats.first_token_s
            if first is not None and first > SLOW_FIRST_TOKEN_S:
                waited = request.admitted - request.submitted if request.admitted else first
                log.warning("%s: first token after %.1f s (%.1f s waiting for a sequence; prompt %d tokens, %d "
                            "from cache%s; %d replies decoding, %d waiting)", self.name, first, waited,
                            request.stats.prompt_tokens, request.stats.reused_tokens,
                            ", restored" if request.stats.restored_snapshot else "", self.n_seq - self._slots.free,
                            max(0, self._depth - 1 - (self.n_seq - self._slots.free)))
        with self._depth_lock:
            self._depth -= 1
        request.finish(reason)  # after the count, so a caller that sees the end sees the depth without it


def load_batched_llama(name: str, **kwargs: Any) -> BatchedLlamaLanguageModel:
    """A packaged model by registry name (or a ``.gguf`` path), served with batched decoding, warmed up."""
    from bargein.engines.think.llm_models import describe, resolve_gguf

    model = BatchedLlamaLanguageModel(resolve_gguf(name), name=name, **kwargs)
    log.info("language model: %s, %d sequences batched", describe(name), model.n_seq)
    model.generate([ChatMessage(role="user", content="Hi!")], GenerationOptions(max_tokens=4))
    return model
