"""The batched embedded LLM on the packaged SmolLM2: concurrent replies, cancel frees a sequence."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from bargein.engines.base import CancelToken, ChatMessage, GenerationOptions, LanguageModel
from bargein.engines.think.llama_batched import BatchedLlamaLanguageModel, load_batched_llama

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def llm() -> Iterator[BatchedLlamaLanguageModel]:
    model = load_batched_llama("smollm2-135m", n_seq=2, n_ctx_per_seq=1024)
    yield model
    model.close()


async def reply(llm: LanguageModel, question: str, tokens: int = 24, cancel: CancelToken | None = None) -> str:
    pieces = []
    async for piece in llm.stream([ChatMessage("user", question)], cancel=cancel or CancelToken(),
                                  options=GenerationOptions(tokens, 0.0)):
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


async def test_two_spoken_sessions_at_once_through_the_server_with_batched_decoding() -> None:
    from bargein.config import Settings
    from bargein.engines.factory import load_engines
    from tests.support.server import running_server
    from tests.support.spoken_turn import assert_heard_answered_and_spoken, spoken_turn

    engines = await asyncio.to_thread(load_engines, Settings(llm_model="smollm2-135m", llm_sequences=2))
    assert "2 sequences batched" in engines.description["llm"]
    try:
        with running_server(engines) as host:
            results = await asyncio.gather(spoken_turn(host, "0880"), spoken_turn(host, "0930"))
    finally:
        await engines.aclose()
    for (log, done), clip in zip(results, ("0880", "0930"), strict=True):
        assert_heard_answered_and_spoken(log, done, clip)
