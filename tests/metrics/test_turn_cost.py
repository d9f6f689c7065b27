"""The cost half of the turn ledger: CPU billed to the turn current when the work started, tokens and audio, and
the waste of a scripted barge-in, in ``bargein.turn.cost``, the session's totals and Prometheus."""

from __future__ import annotations

from typing import Any

from bargein.metrics.cost_meter import Speculative, speculating
from bargein.metrics.prometheus import ServerMetrics
from bargein.session.core import vocabulary as v
from bargein.session.turn_ledger import TurnLedgers


def sample(metrics: ServerMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_a_barge_in_wastes_the_unheard_audio_and_its_share_of_the_tokens() -> None:
    costs: list[dict[str, Any]] = []
    metrics = ServerMetrics()
    stream = [0.0]
    ledgers = TurnLedgers(lambda: stream[0], lambda status, summary: None, metrics=metrics, cost=costs.append)
    ledgers.on_action(v.SpeechStarted("item_1", 1000.0))
    vad_bill = ledgers.bill()
    ledgers.on_action(v.SpeechStopped("item_1", 2500.0))
    ledgers.on_action(v.CommitBuffer("item_1", 1000.0, 2500.0))
    asr_bill = ledgers.bill()
    ledgers.on_action(v.StartReply("resp_1", "turn_detected"))
    llm_bill = ledgers.bill()
    vad_bill("vad", 0.02)
    asr_bill("asr", 0.4)
    llm_bill("llm", 1.2)
    ledgers.on_reply_progress("resp_1", "prompt_tokens", 300)
    ledgers.on_reply_progress("resp_1", "cached_tokens", 240)
    ledgers.on_reply_progress("resp_1", "tokens", 40)
    stream[0] = 6000.0
    ledgers.on_action(v.SpeechStarted("item_2", 5800.0))  # the user cuts in
    ledgers.on_action(v.CancelReply("resp_1", "turn_detected"))
    late_bill = ledgers.bill()
    ledgers.on_reply_closed("resp_1", "cancelled", sent_ms=2000.0, heard_ms=500.0, output_queued=False)
    late_bill("tts", 0.3)  # work billed to the next turn: not this one's

    (cost,) = costs
    assert cost["response_id"] == "resp_1" and cost["item_id"] == "item_1"
    assert cost["cpu_s"] == {"vad": 0.02, "asr": 0.4, "llm": 1.2}
    assert cost["tokens"] == {"prompt": 300, "cached": 240, "generated": 40}
    assert cost["audio_in_s"] == 1.5 and cost["audio_out_s"] == 2.0
    # three quarters of the sent audio went unheard, so three quarters of the words did
    assert cost["waste"] == {"tokens": 30.0, "audio_s": 1.5, "speculative_cpu_s": 0.0, "speculative_tokens": 0.0}
    assert ledgers.session_cost.summary()["cpu_s"] == {"vad": 0.02, "asr": 0.4, "llm": 1.2, "tts": 0.3}
    assert ledgers.session_cost.summary()["wasted_tokens"] == 30.0
    assert sample(metrics, "bargein_wasted_tokens_total") == 30.0
    assert sample(metrics, "bargein_wasted_audio_seconds_total") == 1.5
    assert sample(metrics, "bargein_llm_kv_cache_hit_ratio") == 0.8


def test_a_reply_heard_to_its_end_wastes_nothing() -> None:
    costs: list[dict[str, Any]] = []
    ledgers = TurnLedgers(lambda: 0.0, lambda status, summary: None, cost=costs.append)
    ledgers.on_action(v.CommitBuffer("item_1", 0.0, 900.0))
    ledgers.on_action(v.StartReply("resp_1", "turn_detected"))
    ledgers.on_reply_progress("resp_1", "tokens", 12)
    ledgers.on_reply_closed("resp_1", "completed", sent_ms=1500.0, heard_ms=1500.0, output_queued=False)
    assert costs[0]["waste"] == {"tokens": 0.0, "audio_s": 0.0, "speculative_cpu_s": 0.0, "speculative_tokens": 0.0}
    assert costs[0]["audio_in_s"] is None  # a client's commit without speech marks


def test_stage_cpu_is_exported_by_stage() -> None:
    from bargein.metrics.cost_meter import STAGE_CPU

    metrics = ServerMetrics()
    before = sample(metrics, "bargein_cpu_seconds_total", stage="tts")
    STAGE_CPU.add("tts", 0.25, background_s=0.05)
    assert abs(sample(metrics, "bargein_cpu_seconds_total", stage="tts") - before - 0.3) < 1e-9


def test_speculative_work_thrown_away_is_waste_and_work_adopted_is_not() -> None:
    costs: list[dict[str, Any]] = []
    metrics = ServerMetrics()
    ledgers = TurnLedgers(lambda: 0.0, lambda status, summary: None, metrics=metrics, cost=costs.append)
    ledgers.on_action(v.SpeechStarted("item_1", 0.0))
    first_guess, second_guess, prefetch = Speculative(), Speculative(), Speculative()
    with speculating(first_guess):  # the user paused, then spoke on: this guess is thrown away
        ledgers.bill()("asr", 0.25)
    first_guess.discard()
    with speculating(second_guess):
        asr_bill = ledgers.bill()
    with speculating(prefetch):  # the prefetched reply made from the second guess is adopted
        llm_bill = ledgers.bill()
    asr_bill("asr", 0.2)
    llm_bill("llm", 0.9)
    thrown_reply = Speculative()
    with speculating(thrown_reply):
        ledgers.bill()("llm", 0.5)
    thrown_reply.discard(tokens=7)  # a prompt that came out different
    ledgers.on_action(v.CommitBuffer("item_1", 0.0, 1000.0))
    ledgers.on_action(v.StartReply("resp_1", "turn_detected"))
    ledgers.on_reply_closed("resp_1", "completed", sent_ms=1000.0, heard_ms=1000.0, output_queued=False)
    assert costs[0]["cpu_s"] == {"asr": 0.45, "llm": 1.4}
    assert costs[0]["waste"]["speculative_cpu_s"] == 0.75
    assert costs[0]["waste"]["speculative_tokens"] == 7.0
    assert sample(metrics, "bargein_wasted_speculative_cpu_seconds_total") == 0.75


def test_a_reply_cut_while_the_client_still_played_it_wastes_what_was_not_played() -> None:
    metrics = ServerMetrics()
    ledgers = TurnLedgers(lambda: 0.0, lambda status, summary: None, metrics=metrics, cost=lambda fields: None)
    ledgers.on_action(v.CommitBuffer("item_1", 0.0, 900.0))
    ledgers.on_action(v.StartReply("resp_1", "turn_detected"))
    ledgers.on_reply_progress("resp_1", "tokens", 20)
    ledgers.on_reply_closed("resp_1", "completed", sent_ms=4000.0, heard_ms=4000.0, output_queued=False,
                            playing=True)
    assert sample(metrics, "bargein_wasted_audio_seconds_total") == 0.0
    ledgers.on_reply_heard("resp_1", 1000.0)  # the user cut it a quarter of the way in
    assert sample(metrics, "bargein_wasted_audio_seconds_total") == 3.0
    assert sample(metrics, "bargein_wasted_tokens_total") == 15.0
    assert ledgers.session_cost.summary()["wasted_audio_s"] == 3.0
