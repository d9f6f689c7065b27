"""The per-turn ledger's arithmetic on a scripted timeline, /metrics, the turn event and OTel spans."""

from __future__ import annotations

import json

import httpx
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from websockets.sync.client import connect

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.metrics import tracing
from bargein.session.turn_ledger import TurnLedger
from tests.support.realtime_client import validate_server_event
from tests.support.server import running_server


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def scripted_ledger() -> TurnLedger:
    clock = FakeClock()
    ledger = TurnLedger(item_id="item_1", response_id="resp_1", clock=clock)
    timeline = [("speech_start", 0.0, 1000.0), ("speech_end", 2.0, 3000.0), ("commit", 2.52, None),
                ("reply_start", 2.521, None), ("asr_final", 2.9, None), ("llm_first_token", 3.2, None),
                ("first_clause", 3.31, None), ("tts_first_audio", 3.35, None), ("first_delta_sent", 3.36, None),
                ("response_done", 6.0, None)]
    for stage, at, stream in timeline:
        clock.now = 100.0 + at
        ledger.mark(stage, stream_ms=stream)
    ledger.mark("commit")  # a second mark of a stage never moves it
    ledger.add("tokens", 12)
    ledger.add("tokens", 3)
    return ledger


def test_ledger_arithmetic_on_a_scripted_timeline() -> None:
    summary = scripted_ledger().summary()
    assert summary["speech_start_ms"] == 1000.0 and summary["speech_end_ms"] == 3000.0
    assert summary["endpoint_ms"] == 520.0
    assert summary["asr_final_ms"] == 380.0
    # the LLM could only start once the words were known (ASR finished after the reply started)
    assert summary["llm_first_token_ms"] == 300.0
    assert summary["tts_first_audio_ms"] == 150.0
    assert summary["first_clause_ms"] == 110.0 and summary["tts_synth_ms"] == 40.0  # its two parts
    assert summary["first_delta_sent_ms"] == 839.0
    assert summary["first_audio_ms"] == 1360.0
    assert summary["tokens"] == 15


def test_stages_that_did_not_happen_are_none() -> None:
    ledger = TurnLedger(clock=FakeClock())
    ledger.mark("reply_start")
    summary = ledger.summary()
    assert summary["first_audio_ms"] is None and summary["asr_final_ms"] is None


def test_turn_metrics_event_and_prometheus_histograms() -> None:
    engines = Engines(FakeVad(), FakeRecognizer(), FakeLanguageModel(), FakeSynthesizer(),
                      description={"vad": "fake vad", "llm": "fake llm"})
    with running_server(engines) as host:
        with connect(f"ws://{host}/v1/realtime?bargein_events=1") as ws:
            ws.recv(timeout=5)
            ws.send(json.dumps({"type": "conversation.item.create", "item": {
                "type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}}))
            ws.send(json.dumps({"type": "response.create"}))
            ws.send(json.dumps({"type": "input_audio_buffer.commit"}))  # an error, counted by code
            metrics_event = None
            while metrics_event is None:
                event = json.loads(ws.recv(timeout=10))
                validate_server_event(event)
                if event["type"] == "bargein.turn.metrics":
                    metrics_event = event
        text = httpx.get(f"http://{host}/metrics").text
    assert metrics_event["status"] == "completed"
    assert metrics_event["tokens"] == 3  # "You", " said:", " hi."
    assert metrics_event["audio_sent_s"] > 0 and metrics_event["audio_heard_s"] == metrics_event["audio_sent_s"]
    assert metrics_event["first_delta_sent_ms"] is not None
    assert 'bargein_stage_latency_seconds_bucket{le="0.005",stage="first_delta_sent"}' in text
    assert 'bargein_turns_total{status="completed"} 1.0' in text
    assert 'bargein_client_errors_total{code="input_audio_buffer_commit_empty"} 1.0' in text
    assert 'bargein_queue_depth{stage="outbound"} 0.0' in text
    assert "bargein_sessions 0.0" in text
    assert "bargein_event_loop_lag_seconds_count" in text
    assert 'bargein_engine{engine="fake llm",stage="llm"} 1.0' in text


def test_turns_become_spans_when_an_exporter_is_configured() -> None:
    exporter = InMemorySpanExporter()
    assert tracing.configure_tracing(span_exporter=exporter)
    try:
        ledger = scripted_ledger()
        tracing.export_turn(ledger, "completed", ledger.summary())
        tracing.flush_tracing()
    finally:
        tracing._tracer = None
    (span,) = exporter.get_finished_spans()
    assert span.name == "bargein.turn"
    assert [e.name for e in span.events][:3] == ["speech_start", "speech_end", "commit"]
    assert span.attributes is not None and span.attributes["bargein.first_audio_ms"] == 1360.0
    assert span.end_time is not None and span.start_time is not None
    assert abs((span.end_time - span.start_time) / 1e9 - 6.0) < 1e-3


@pytest.mark.slow  # the real Silero VAD
def test_queue_depth_is_read_from_any_engine_that_reports_one() -> None:
    from bargein.engines.listen.silero_vad import SileroVad
    from bargein.metrics.prometheus import ServerMetrics

    class Busy(FakeRecognizer):
        queue_depth = 3

    vad = SileroVad()
    metrics = ServerMetrics(lambda: {"vad": vad, "asr": Busy(), "tts": FakeSynthesizer()})  # that keeps no queue
    text = metrics.exposition().decode()
    assert 'bargein_queue_depth{stage="vad"} 0.0' in text
    assert 'bargein_queue_depth{stage="asr"} 3.0' in text
    assert 'stage="tts"' not in text
