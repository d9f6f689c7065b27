"""Honest ``usage`` in ``response.done``: the model's own prompt count and KV-cache reuse, in process and across
the worker-process boundary, validating against the ``openai`` package's GA types."""

from __future__ import annotations

from openai.types.realtime import RealtimeResponseUsage

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.engines.process.wire import WorkerSpec
from bargein.engines.think.llm_process import ProcessLanguageModel
from bargein.metrics.cost_meter import request_usage
from bargein.protocol.server_events import usage_object
from bargein.values import CancelToken, ChatMessage
from tests.session.test_session import Harness
from tests.support.usage_llm import CACHED_TOKENS, PROMPT_TOKENS, UsageNotingLanguageModel

TALK = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "talk"}]}


def test_the_usage_object_is_the_ga_schema_with_cached_tokens_a_subset_of_the_input() -> None:
    usage = RealtimeResponseUsage.model_validate(usage_object(120, 7, cached_tokens=100), strict=True)
    assert usage.input_token_details is not None and usage.input_token_details.cached_tokens == 100
    assert usage.total_tokens == 127
    assert usage_object(10, 1, cached_tokens=50)["input_token_details"]["cached_tokens"] == 10


async def test_response_done_reports_the_model_prompt_and_cached_tokens() -> None:
    h = Harness(Engines(FakeVad(), FakeRecognizer(), UsageNotingLanguageModel(), FakeSynthesizer()))
    h.no_play_out_wait()
    await h.send(type="conversation.item.create", item=TALK)
    await h.send(type="response.create", response={"output_modalities": ["text"]})
    await h.drain(until="response.done")
    usage = RealtimeResponseUsage.model_validate(h.events[-1]["response"]["usage"])
    assert usage.input_tokens == PROMPT_TOKENS
    assert usage.input_token_details is not None and usage.input_token_details.cached_tokens == CACHED_TOKENS
    await h.session.close()


async def test_a_worker_model_usage_crosses_the_process_boundary_with_its_cost() -> None:
    llm = ProcessLanguageModel(WorkerSpec("tests.support.usage_llm:UsageNotingLanguageModel"))
    try:
        usage: dict[str, int] = {}
        request_usage.set(usage)
        pieces = [piece async for piece in llm.stream([ChatMessage("user", "hi")], cancel=CancelToken())]
        assert pieces
        assert usage == {"prompt_tokens": PROMPT_TOKENS, "cached_tokens": CACHED_TOKENS}
    finally:
        llm.close()
