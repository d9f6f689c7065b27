"""The sampling guard: broken logits fall back to a sensible greedy token instead of garbage."""

from __future__ import annotations

import numpy as np
import pytest

from bargein.engines.think.llm_sampling import (
    SamplingParams,
    apply_repeat_penalty,
    greedy_fallback,
    is_usable,
    sample,
)


def _logits(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float32)


def test_nan_logits_fall_back_to_the_best_finite_token() -> None:
    logits = _logits(0.5, np.nan, 3.0, -1.0, np.nan)
    pick = sample(logits, SamplingParams(temperature=1.0), np.random.default_rng(0))
    assert pick.fell_back
    assert pick.token == 2


def test_positive_infinity_wins_the_fallback() -> None:
    logits = _logits(9.0, np.inf, np.nan, np.inf)
    pick = sample(logits, SamplingParams(), np.random.default_rng(0))
    assert pick == type(pick)(token=1, fell_back=True)


def test_all_nan_yields_no_token() -> None:
    logits = np.full(8, np.nan, dtype=np.float32)
    pick = sample(logits, SamplingParams(), np.random.default_rng(0))
    assert pick.fell_back
    assert pick.token is None


def test_masked_tokens_are_not_a_fault() -> None:
    # -inf is how tokens are masked; sampling must never choose them and the guard must stay quiet.
    logits = _logits(-np.inf, 1.0, -np.inf, 1.2)
    rng = np.random.default_rng(1)
    picks = [sample(logits, SamplingParams(temperature=1.0, top_p=1.0), rng) for _ in range(200)]
    assert not any(p.fell_back for p in picks)
    assert {p.token for p in picks} == {1, 3}


def test_all_negative_infinity_is_unusable() -> None:
    logits = np.full(4, -np.inf, dtype=np.float32)
    assert not is_usable(logits)
    assert greedy_fallback(logits) is None


def test_zero_temperature_is_greedy() -> None:
    logits = _logits(0.1, 0.2, 5.0, 0.3)
    pick = sample(logits, SamplingParams(temperature=0.0), np.random.default_rng(0))
    assert pick.token == 2
    assert not pick.fell_back


def test_top_k_one_always_takes_the_best() -> None:
    rng = np.random.default_rng(3)
    logits = rng.normal(size=1000).astype(np.float32)
    best = int(np.argmax(logits))
    params = SamplingParams(temperature=1.5, top_k=1)
    assert all(sample(logits, params, rng).token == best for _ in range(50))


def test_top_p_cuts_the_tail() -> None:
    # Token 0 holds ~88% of the mass at temperature 1, so top_p=0.5 leaves it alone.
    logits = _logits(4.0, 2.0, 1.0, 0.0)
    rng = np.random.default_rng(5)
    params = SamplingParams(temperature=1.0, top_p=0.5)
    assert {sample(logits, params, rng).token for _ in range(100)} == {0}


def test_sampling_follows_the_distribution() -> None:
    logits = np.log(np.array([0.7, 0.2, 0.1], dtype=np.float32))
    rng = np.random.default_rng(7)
    params = SamplingParams(temperature=1.0, top_p=1.0, repeat_penalty=1.0)
    counts = np.bincount([sample(logits, params, rng).token or 0 for _ in range(4000)], minlength=3)
    assert counts / counts.sum() == pytest.approx([0.7, 0.2, 0.1], abs=0.03)


def test_repeat_penalty_lowers_recent_tokens_only() -> None:
    logits = _logits(2.0, -2.0, 2.0)
    out = apply_repeat_penalty(logits, np.array([0, 1, 1], dtype=np.intc), 2.0)
    assert out.tolist() == [1.0, -4.0, 2.0]
    assert logits.tolist() == [2.0, -2.0, 2.0]


def test_the_answer_to_a_tool_result_is_sampled_cooler_than_other_replies() -> None:
    from bargein.engines.think.llama_jobs import TOOL_RESULT_TEMPERATURE, Job, reply_sampling
    from bargein.values import ChatMessage, GenerationOptions, ToolCall

    tool = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}
    options = GenerationOptions(tools=(tool,), temperature=0.8)
    asked = [ChatMessage("user", "Weather in Paris?")]
    answered = [*asked, ChatMessage("assistant", "", tool_calls=(ToolCall("get_weather", "c1", "{}"),)),
                ChatMessage("tool", "31 degrees", tool_call_id="c1")]
    base = SamplingParams()
    for messages, expected in ((asked, 0.8), (answered, TOOL_RESULT_TEMPERATURE)):
        job = Job(list(messages), options, emit=lambda item: None)
        assert reply_sampling(base, job).temperature == 0.0  # whether to call a tool: greedy
        job.head = "The weather"
        assert reply_sampling(base, job).temperature == expected
    cold = Job(list(answered), GenerationOptions(temperature=0.1), emit=lambda item: None)
    cold.head = "It is"
    assert reply_sampling(base, cold).temperature == 0.1  # never hotter than the client asked
