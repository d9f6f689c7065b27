"""The embedded LLM decoding every session's reply in one llama.cpp batch per step.

One llama.cpp context holds ``n_seq`` sequences, each with its own range of the KV cache. Every step
is one ``llama_decode`` over a batch that carries a chunk of each newly admitted prompt and the last
sampled token of every generating sequence; each sequence then samples its next token from its own
logits. A second talker therefore costs the first a little throughput (a larger batch per step), not a
whole reply's wait as with one sequence at a time. A cancelled or finished reply frees its sequence
(its KV range is cleared) for the next request; requests beyond ``n_seq`` wait for a free sequence.

What it does not do (the single-sequence engine does): keep a session's KV between its turns, so a
long history is prefilled again each turn.
"""

from __future__ import annotations

import asyncio
import codecs
import logging
import queue
import threading
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from bargein.engines.base import CancelToken, ChatMessage, GenerationOptions
from bargein.engines.think import llm_sampling
from bargein.engines.think.llama_prompt import TemplateToolCalling, render
from bargein.engines.think.llm_prompt import (
    DEFAULT_SYSTEM_PROMPT,
    HistoryTooLong,
    TokenCounts,
    fit_history,
    with_system_prompt,
)
from bargein.engines.think.llm_sampling import SamplingParams
from bargein.engines.think.tool_calls import forced_tool

log = logging.getLogger(__name__)
PROMPT_CHUNK = 128
"""Prompt tokens of one sequence per step: a long prompt does not stall the others' next tokens."""
_END = object()


@dataclass
class _Request:
    messages: Sequence[ChatMessage]
    options: GenerationOptions
    emit: Any
    stop: threading.Event = field(default_factory=threading.Event)
    seq: int = -1
    prompt: list[int] = field(default_factory=list)
    fed: int = 0
    """Prompt tokens already in the KV cache."""
    generated: list[int] = field(default_factory=list)
    head: str = ""
    """The reply's first characters: whether it is a tool call."""
    decoder: codecs.IncrementalDecoder = field(
        default_factory=lambda: codecs.getincrementaldecoder("utf-8")(errors="replace"))

    @property
    def position(self) -> int:
        return self.fed + len(self.generated)


class BatchedLlamaLanguageModel(TemplateToolCalling):
    """A :class:`~bargein.engines.base.LanguageModel` that decodes up to ``n_seq`` replies together."""

    def __init__(self, model_path: str | Path, *, name: str | None = None, n_seq: int = 4,
                 n_ctx_per_seq: int = 2048, n_threads: int | None = None,
                 system_prompt: str | None = DEFAULT_SYSTEM_PROMPT, sampling: SamplingParams | None = None,
                 seed: int | None = None) -> None:
        import llama_cpp

        from bargein.engines.think.llama_llm import default_threads

        self._lib = llama_cpp
        self.name = name or Path(model_path).name
        self.n_seq = n_seq
        self.n_ctx_per_seq = n_ctx_per_seq
        self.system_prompt = system_prompt
        self.sampling = sampling or SamplingParams()
        self.nonfinite_fallbacks = 0
        self.steps = 0
        self.largest_batch = 0
        threads = n_threads or default_threads()
        # this Llama gives the model, tokenizer and chat template; decoding runs in the context below
        self._llama = llama_cpp.Llama(model_path=str(model_path), n_ctx=256, n_threads=threads, verbose=False)
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_seq * n_ctx_per_seq
        params.n_batch = max(512, n_seq * PROMPT_CHUNK)
        params.n_ubatch = params.n_batch
        params.n_seq_max = n_seq + 1  # the last one holds the shared prefix (system prompt) for the others
        params.kv_unified = True  # one cache, so copying the shared prefix into a sequence moves no data
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
        self._formatter = self._make_formatter()
        self._inbox: queue.SimpleQueue[_Request | None] = queue.SimpleQueue()
        self._waiting = 0
        self._count_lock = threading.Lock()
        self._bos = ""
        self._prefix_seq = n_seq
        self._prefix: list[int] = []
        self._worker = threading.Thread(target=self._serve, name=f"llm-batched-{self.name}", daemon=True)
        self._worker.start()

    @property
    def queue_depth(self) -> int:
        """Requests admitted or waiting for a sequence."""
        return self._waiting

    async def _text(self, messages: Sequence[ChatMessage], cancel: CancelToken,
                    options: GenerationOptions) -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        pieces: asyncio.Queue[object] = asyncio.Queue()
        request = _Request(list(messages), options,
                           lambda item: loop.call_soon_threadsafe(pieces.put_nowait, item))
        with self._count_lock:
            self._waiting += 1
        self._inbox.put(request)
        try:
            while True:
                getter = asyncio.ensure_future(pieces.get())
                waiter = asyncio.ensure_future(cancel.wait())
                done, _pending = await asyncio.wait({getter, waiter}, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                if getter not in done:
                    getter.cancel()
                    return
                item = getter.result()
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield str(item)
        finally:
            request.stop.set()

    def close(self) -> None:
        """Stop the decoding thread (ending the replies in progress) and free the context."""
        if self._worker.is_alive():
            self._inbox.put(None)
            self._worker.join()
            self._lib.llama_batch_free(self._batch)
            self._lib.llama_free(self._ctx)
            self._llama.close()

    async def aclose(self) -> None:
        """:meth:`close` off the event loop."""
        await asyncio.to_thread(self.close)

    # --- the decoding thread -----------------------------------------------------------------------------

    def _serve(self) -> None:
        active: list[_Request] = []
        free = list(range(self.n_seq))
        backlog: list[_Request] = []
        while True:
            incoming = [self._inbox.get()] if not active and not backlog else []
            while True:
                try:
                    incoming.append(self._inbox.get_nowait())
                except queue.Empty:
                    break
            if None in incoming:
                for request in active + backlog:
                    self._finish(request, free)
                return
            backlog += [r for r in incoming if r is not None]
            while backlog and free:
                request = backlog.pop(0)
                if self._admit(request, free.pop(0)):
                    active.append(request)
                else:
                    free.append(request.seq)
            for request in [r for r in active if r.stop.is_set()]:
                active.remove(request)
                self._finish(request, free)
            if active:
                active = self._step(active, free)

    def _admit(self, request: _Request, seq: int) -> bool:
        request.seq = seq
        try:
            request.prompt = self._prompt_tokens(request)
            request.fed = self._share_prefix(request)
        except Exception as error:  # a prompt that cannot fit ends that reply, not the engine
            with self._count_lock:
                self._waiting -= 1
            request.emit(error)
            request.emit(_END)
            return False
        return True

    def _share_prefix(self, request: _Request) -> int:
        """Copy the cached shared prefix into the request's sequence; the prompt tokens it covers."""
        if not self._prefix:
            self._cache_prefix(request.prompt)
        common = 0
        for mine, cached in zip(request.prompt[:-1], self._prefix, strict=False):
            if mine != cached:
                break
            common += 1
        if common:
            self._lib.llama_memory_seq_cp(self._memory, self._prefix_seq, request.seq, 0, common)
        return common

    def _cache_prefix(self, prompt: list[int]) -> None:
        """Evaluate the system prompt once into the prefix sequence (every reply's prompt starts with it)."""
        system = with_system_prompt([ChatMessage("user", "")], self.system_prompt)
        rendered: str = self._formatter(messages=[{"role": m.role, "content": m.content} for m in system]).prompt
        tokens = self._llama.tokenize(rendered.encode("utf-8"), add_bos=not rendered.startswith(self._bos),
                                      special=True)
        common = 0
        for mine, theirs in zip(prompt, tokens, strict=False):
            if mine != theirs:
                break
            common += 1
        prefix = prompt[:min(common, self._capacity)]
        for start in range(0, len(prefix), PROMPT_CHUNK):
            chunk = prefix[start:start + PROMPT_CHUNK]
            for offset, token in enumerate(chunk):
                self._put(offset, token, start + offset, self._prefix_seq, False)
            self._batch.n_tokens = len(chunk)
            if self._lib.llama_decode(self._ctx, self._batch) != 0:
                self._lib.llama_memory_seq_rm(self._memory, self._prefix_seq, -1, -1)
                return
        self._prefix = prefix

    def _step(self, active: list[_Request], free: list[int]) -> list[_Request]:
        """One ``llama_decode`` over every active sequence; returns those still generating."""
        batch = self._batch
        rows: list[tuple[_Request, int]] = []
        count = 0
        for request in active:
            if request.fed < len(request.prompt):
                take = min(PROMPT_CHUNK, len(request.prompt) - request.fed, self._capacity - count)
                for offset in range(take):
                    last = request.fed + offset == len(request.prompt) - 1
                    self._put(count, request.prompt[request.fed + offset], request.fed + offset, request.seq, last)
                    if last:
                        rows.append((request, count))
                    count += 1
                request.fed += take
            elif count < self._capacity:
                self._put(count, request.generated[-1], request.position - 1, request.seq, True)
                rows.append((request, count))
                count += 1
        batch.n_tokens = count
        if count == 0:
            return active
        self.steps += 1
        self.largest_batch = max(self.largest_batch, count)
        if self._lib.llama_decode(self._ctx, batch) != 0:
            error = RuntimeError(f"{self.name}: llama_decode failed on a batch of {count} tokens")
            for request in active:
                request.emit(error)
                self._finish(request, free)
            return []
        sampled = {id(request) for request, _row in rows}
        still = [r for r in active if id(r) not in sampled]
        for request, row in rows:
            if self._sample(request, row):
                still.append(request)
            else:
                self._finish(request, free)
        return still

    def _put(self, index: int, token: int, position: int, seq: int, logits: bool) -> None:
        batch = self._batch
        batch.token[index] = token
        batch.pos[index] = position
        batch.n_seq_id[index] = 1
        batch.seq_id[index][0] = seq
        batch.logits[index] = logits

    def _sample(self, request: _Request, row: int) -> bool:
        """Pick and send the next token; False when the reply is complete."""
        logits = np.ctypeslib.as_array(self._lib.llama_get_logits_ith(self._ctx, row), shape=(self._n_vocab,))
        base = self.sampling
        tools = request.options.tools
        calling = bool(tools) and (forced_tool(request.options) is not None
                                   or request.head.lstrip()[:1] in ("", "<", "{", "`"))
        # whether to call, and the call itself, greedily and without the repeat penalty (as llama_llm does)
        params = SamplingParams(temperature=0.0 if calling else request.options.temperature, top_k=base.top_k,
                                top_p=base.top_p, repeat_penalty=1.0 if calling else base.repeat_penalty,
                                repeat_window=base.repeat_window)
        recent = np.asarray(request.generated[-base.repeat_window:], dtype=np.intc)
        pick = llm_sampling.sample(logits, params, self._rng, recent)
        if pick.fell_back:
            self.nonfinite_fallbacks += 1
        if pick.token is None or self._lib.llama_vocab_is_eog(self._vocab, pick.token):
            return False
        request.generated.append(pick.token)
        text = request.decoder.decode(self._llama.detokenize([pick.token], special=bool(tools)))
        if text:
            request.head = request.head if len(request.head) >= 16 else request.head + text
            request.emit(text)
        return len(request.generated) < request.options.max_tokens

    def _finish(self, request: _Request, free: list[int]) -> None:
        if request.seq >= 0:
            self._lib.llama_memory_seq_rm(self._memory, request.seq, -1, -1)
            free.append(request.seq)
            request.seq = -1
        tail = request.decoder.decode(b"", final=True)
        if tail and not request.stop.is_set():
            request.emit(tail)
        with self._count_lock:
            self._waiting -= 1
        request.emit(_END)  # after the count, so a caller that sees the end sees the depth without it

    # --- prompts -----------------------------------------------------------------------------------------

    def _make_formatter(self) -> Any:
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        llama = self._llama
        template = llama.metadata.get("tokenizer.chat_template")
        if not template:
            raise RuntimeError(f"{self.name} has no chat template in its GGUF metadata")
        eos = llama.detokenize([llama.token_eos()], special=True).decode("utf-8", "replace")
        self._bos = llama.detokenize([llama.token_bos()], special=True).decode("utf-8", "replace") or "\0"
        return Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=self._bos)

    def _render_tokens(self, history: Sequence[ChatMessage], options: GenerationOptions) -> list[int]:
        prompt = render(self._formatter, history, options)
        tokens: list[int] = self._llama.tokenize(prompt.encode("utf-8"), add_bos=not prompt.startswith(self._bos),
                                                 special=True)
        return tokens

    def _message_tokens(self, message: ChatMessage) -> int:
        # its text plus the template's markers around it (a generous guess; the render has the last word)
        return len(self._llama.tokenize(message.content.encode("utf-8"), add_bos=False, special=False)) + 8

    def _prompt_tokens(self, request: _Request) -> list[int]:
        """The rendered prompt, oldest exchanges dropped until it and the reply fit the sequence's context
        (chosen by cached per-message counts: the history is rendered once or twice, not once per drop)."""
        if getattr(self, "_counts", None) is None:
            self._counts = TokenCounts(self._message_tokens)
        history = with_system_prompt(request.messages, self.system_prompt)
        budget = self.n_ctx_per_seq - request.options.max_tokens
        try:
            tokens = fit_history(history, self._counts, budget, lambda kept: self._render_tokens(kept, request.options),
                                 truncate=request.options.truncate, retention_ratio=request.options.retention_ratio)
        except HistoryTooLong as error:
            raise RuntimeError(str(error)) from None
        if len(tokens) >= self.n_ctx_per_seq:
            raise RuntimeError(f"the prompt ({len(tokens)} tokens) does not fit a sequence of "
                               f"{self.n_ctx_per_seq} tokens")
        room = self.n_ctx_per_seq - len(tokens)
        request.options = replace(request.options, max_tokens=min(request.options.max_tokens, room))
        return tokens


def load_batched_llama(name: str, **kwargs: Any) -> BatchedLlamaLanguageModel:
    """A packaged model by registry name (or a ``.gguf`` path), served with batched decoding."""
    from bargein.engines.think.llm_models import resolve_gguf

    return BatchedLlamaLanguageModel(resolve_gguf(name), name=name, **kwargs)
