"""The batched embedded LLM on the packaged SmolLM2: concurrent replies, cancel frees a sequence, a conversation's
KV cache kept between its turns (in its sequence, or in host memory once other sessions took the sequences)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from bargein.engines.base import LanguageModel
from bargein.engines.think.llama_batched import BatchedLlamaLanguageModel, load_batched_llama
from bargein.values import CancelToken, ChatMessage, GenerationOptions

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def llm() -> Iterator[BatchedLlamaLanguageModel]:
    model = load_batched_llama("smollm2-135m", n_seq=2, n_ctx_per_seq=1024)
    yield model
    model.close()


async def reply(llm: LanguageModel, question: str | list[ChatMessage], tokens: int = 24,
                cancel: CancelToken | None = None) -> str:
    messages = [ChatMessage("user", question)] if isinstance(question, str) else question
    pieces = []
    async for piece in llm.stream(messages, cancel=cancel or CancelToken(), options=GenerationOptions(tokens, 0.0)):
        pieces.append(piece)
    return "".join(pieces)


async def test_replies_decoded_together_are_each_whole_and_more_than_the_sequences_wait(
        llm: BatchedLlamaLanguageModel) -> None:
    assert isinstance(llm, LanguageModel)
    alone = await reply(llm, "What is the capital of France?")
    questions = ["What is the capital of France?", "How do I boil an egg?", "Name a colour."]
    together = await asyncio.gather(*(reply(llm, q) for q in questions))  # three requests, two sequences
    assert all(len(text.split()) >= 2 for text in together), together
    assert together[0].split()[:2] == alone.split()[:2]  # greedy: the same start, batched or not
    assert llm.largest_batch >= 2 and llm.queue_depth == 0


async def test_a_cancelled_reply_frees_its_sequence(llm: BatchedLlamaLanguageModel) -> None:
    cancels = [CancelToken(), CancelToken()]

    async def cut(cancel: CancelToken) -> str:
        text = ""
        async for piece in llm.stream([ChatMessage("user", "Tell me a long story about a dragon.")],
                                      cancel=cancel, options=GenerationOptions(400, 0.7)):
            text += piece
            cancel.cancel()
        return text

    cut_texts = await asyncio.gather(*(cut(c) for c in cancels))
    assert all(len(text) > 0 for text in cut_texts)
    # both sequences were taken and cancelled: a new request must still be served at once
    answer = await asyncio.wait_for(reply(llm, "Say hello."), timeout=120)
    assert answer.strip() and llm.queue_depth == 0


async def test_a_conversation_keeps_its_cache_between_turns_even_after_others_took_every_sequence(
        llm: BatchedLlamaLanguageModel) -> None:
    history = [ChatMessage("user", "My name is Ada. What is the capital of France?")]
    history.append(ChatMessage("assistant", await reply(llm, history)))
    first = llm.last_stats
    assert first is not None
    history.append(ChatMessage("user", "And what is my name?"))
    history.append(ChatMessage("assistant", await reply(llm, history)))
    second = llm.last_stats
    assert second is not None and not second.restored_snapshot
    assert second.reused_tokens >= first.prompt_tokens  # only the new turn was evaluated
    # three other long conversations take both sequences (two at a time), pushing Ada's out
    await asyncio.gather(*(reply(llm, f"Tell me a long story about a {animal} in many words.", tokens=40)
                           for animal in ("cat", "dog", "horse")))
    history.append(ChatMessage("user", "Thanks. Say goodbye."))
    await reply(llm, history)
    third = llm.last_stats
    assert third is not None and third.restored_snapshot and third.reused_tokens >= second.prompt_tokens


async def test_a_prefilled_prompt_is_not_evaluated_again(llm: BatchedLlamaLanguageModel) -> None:
    history = [ChatMessage("system", "You answer in French."), ChatMessage("user", "Say hello to my friend Bob.")]
    llm.prefill(history)
    await asyncio.to_thread(wait_idle, llm)
    await reply(llm, history)
    stats = llm.last_stats
    assert stats is not None and stats.reused_tokens == stats.prompt_tokens - 1  # all but the last, for logits


async def test_a_session_waiting_with_no_reply_goes_before_a_session_already_decoding(
        llm: BatchedLlamaLanguageModel) -> None:
    from bargein.engines.fair import current_owner

    started: list[str] = []

    async def ask(session: str, label: str, tokens: int) -> None:
        current_owner.set(session)  # this task's own context
        async for _piece in llm.stream([ChatMessage("user", f"Count slowly from one to fifty ({label}).")],
                                       cancel=CancelToken(), options=GenerationOptions(tokens, 0.0)):
            if label not in started:
                started.append(label)

    # session a takes both sequences (a0 short, a1 long) and queues a2; then b asks
    flood = [asyncio.ensure_future(ask("a", f"a{i}", tokens)) for i, tokens in enumerate((8, 80, 8))]
    await asyncio.sleep(0.05)
    late = asyncio.ensure_future(ask("b", "b", 8))
    await asyncio.gather(*flood, late)
    assert started.index("b") < started.index("a2"), started  # a0's sequence went to b, a still had a1


def wait_idle(llm: BatchedLlamaLanguageModel) -> None:
    while llm.queue_depth:
        time.sleep(0.01)


async def test_two_spoken_sessions_at_once_through_the_server_with_batched_decoding() -> None:
    from bargein.config import Settings
    from bargein.engines.factory import load_engines
    from tests.support.server import running_server
    from tests.support.spoken_turn import assert_heard_answered_and_spoken, spoken_turn

    engines = await asyncio.to_thread(load_engines, Settings(llm_model="smollm2-135m", llm_sequences=2))
    assert "2 sequences batched, in a supervised worker process" in engines.description["llm"]
    try:
        with running_server(engines) as host:
            results = await asyncio.gather(spoken_turn(host, "0880"), spoken_turn(host, "0930"))
    finally:
        await engines.aclose()
    for (log, done), clip in zip(results, ("0880", "0930"), strict=True):
        assert_heard_answered_and_spoken(log, done, clip)


async def test_a_prompt_too_long_is_an_error_and_the_other_sequences_go_on(llm: BatchedLlamaLanguageModel,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from bargein.engines.think import llm_sampling
    from bargein.engines.think.llama_jobs import LanguageModelError

    real_sample = llm_sampling.sample
    poisoned = 0

    def sample(logits: Any, params: Any, rng: Any, recent: Any = None) -> Any:
        nonlocal poisoned
        if poisoned == 0:
            logits = logits.copy()
            logits[::2] = np.nan
        poisoned += 1
        return real_sample(logits, params, rng, recent)

    monkeypatch.setattr(llm_sampling, "sample", sample)
    before = llm.nonfinite_fallbacks

    async def without_truncation(question: str) -> str:
        options = GenerationOptions(24, 0.0, truncate=False)
        return "".join([piece async for piece in llm.stream([ChatMessage("user", question)], cancel=CancelToken(),
                                                             options=options)])

    too_long = without_truncation("word " * 2000)
    fine = reply(llm, "Say something nice.")
    results = await asyncio.gather(too_long, fine, return_exceptions=True)
    assert isinstance(results[0], LanguageModelError) and "does not fit" in str(results[0])
    assert isinstance(results[1], str) and results[1].strip()  # the reply went on after the fallback
    assert llm.nonfinite_fallbacks == before + 1 and llm.queue_depth == 0


async def test_in_the_worker_process_a_crash_fails_every_batched_reply_and_the_next_one_is_answered() -> None:
    import os
    import signal

    from bargein.engines.think.llm_process import ProcessLanguageModel, WorkerDied, WorkerSpec

    model = ProcessLanguageModel(WorkerSpec("bargein.engines.think.llama_batched:load_batched_llama",
                                            {"name": "smollm2-135m", "n_seq": 2, "n_ctx_per_seq": 1024}))
    try:
        doomed = model.pid
        assert doomed is not None
        streams = [asyncio.ensure_future(reply(model, f"Tell me a long story about a {animal}.", tokens=400))
                   for animal in ("dragon", "knight")]
        await asyncio.to_thread(wait_busy, model, 2)
        await asyncio.sleep(0.3)  # both are decoding
        os.kill(doomed, signal.SIGKILL)
        results = await asyncio.gather(*streams, return_exceptions=True)
        assert all(isinstance(result, WorkerDied) for result in results), results
        answer = await asyncio.wait_for(reply(model, "What is the capital of France?"), timeout=120)
        assert answer.strip() and model.restarts == 1 and model.pid not in (None, doomed)
    finally:
        model.close()


def wait_busy(model: LanguageModel, replies: int) -> None:
    deadline = time.monotonic() + 60
    while getattr(model, "queue_depth", 0) < replies and time.monotonic() < deadline:
        time.sleep(0.01)
