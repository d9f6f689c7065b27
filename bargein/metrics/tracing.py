"""OpenTelemetry spans for each turn, exported only when an exporter is configured.

``BARGEIN_OTEL_EXPORTER=console`` prints spans; ``otlp`` sends them to ``OTEL_EXPORTER_OTLP_ENDPOINT``
(needs ``opentelemetry-exporter-otlp``). Without either, nothing is set up and turns cost nothing.
A turn is one span from speech start (or commit) to ``response.done``, with one event per stage.
Spans are exported in batches from a background thread (a full queue drops spans, never waits).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from opentelemetry import trace

log = logging.getLogger(__name__)
_tracer: trace.Tracer | None = None
_provider: Any = None


def configure_tracing(exporter: str | None = None, *, span_exporter: Any = None) -> bool:
    """Install a tracer provider; returns whether spans will be exported."""
    global _tracer, _provider
    choice = exporter or os.environ.get("BARGEIN_OTEL_EXPORTER")
    if span_exporter is None and not choice:
        return False
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
        )
    except ImportError:
        log.warning("OpenTelemetry export asked for, but opentelemetry-sdk is not installed")
        return False
    if span_exporter is None:
        if choice == "console":
            span_exporter = ConsoleSpanExporter()
        elif choice == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            span_exporter = OTLPSpanExporter()
        else:
            log.warning("unknown BARGEIN_OTEL_EXPORTER %r (console or otlp)", choice)
            return False
    provider = TracerProvider(resource=Resource.create({"service.name": "bargein"}))
    # spans are queued and exported by the processor's own thread, never on the event loop
    provider.add_span_processor(BatchSpanProcessor(span_exporter, max_queue_size=2048, schedule_delay_millis=1000))
    _tracer = provider.get_tracer("bargein")
    _provider = provider
    return True


def flush_tracing(timeout_s: float = 5.0) -> None:
    """Export the spans still queued (blocking: call it off the event loop, or at shutdown)."""
    if _provider is not None:
        _provider.force_flush(int(timeout_s * 1000))


class StageMark(Protocol):
    """When one stage of a turn happened: wall clock (s) and stream position (ms, if it has one)."""

    @property
    def wall_s(self) -> float: ...

    @property
    def stream_ms(self) -> float | None: ...


class MarkedTurn(Protocol):
    """What a span is made of: a turn's stage marks and the clock they were read from (a turn ledger)."""

    @property
    def marks(self) -> Mapping[str, StageMark]: ...

    @property
    def clock(self) -> Callable[[], float]: ...


def export_turn(ledger: MarkedTurn, status: str, summary: dict[str, Any]) -> None:
    """Emit the turn as a span with its stage marks as events (no-op unless configured)."""
    if _tracer is None or not ledger.marks:
        return
    to_epoch_ns = time.time_ns() - int(ledger.clock() * 1e9)
    ordered = sorted(ledger.marks.items(), key=lambda pair: pair[1].wall_s)
    start_ns = int(ordered[0][1].wall_s * 1e9) + to_epoch_ns
    end_ns = int(ordered[-1][1].wall_s * 1e9) + to_epoch_ns
    attributes = {f"bargein.{key}": value for key, value in summary.items()
                  if isinstance(value, str | int | float) and not isinstance(value, bool)}
    attributes["bargein.status"] = status
    span = _tracer.start_span("bargein.turn", start_time=start_ns, attributes=attributes)
    for stage, mark in ordered:
        event_attributes = {"stream_ms": mark.stream_ms} if mark.stream_ms is not None else {}
        span.add_event(stage, attributes=event_attributes, timestamp=int(mark.wall_s * 1e9) + to_epoch_ns)
    span.end(end_time=max(end_ns, start_ns))
