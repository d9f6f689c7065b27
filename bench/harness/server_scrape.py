"""What a capacity step reads from the server's ``/metrics`` (summed over its workers) at the start and end
of its window: the event loop's lag histogram and how many end-of-turn scores ran or were shed."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ServerReading:
    """One scrape: cumulative lag bucket counts by upper bound (s), and score counts by outcome."""

    lag_buckets: dict[float, float] = field(default_factory=dict)
    scores: dict[str, float] = field(default_factory=dict)


def metrics_headers() -> dict[str, str]:
    """``Authorization`` for ``/metrics`` of a server with keys: ``BARGEIN_METRICS_KEY`` from the environment, if
    set (a local-only server answers loopback without one)."""
    key = os.environ.get("BARGEIN_METRICS_KEY")
    return {"Authorization": f"Bearer {key}"} if key else {}


def read_server(host_port: str) -> ServerReading:
    """Scrape ``/metrics`` once (an empty reading when the server does not answer)."""
    import httpx

    try:
        return parse_metrics(httpx.get(f"http://{host_port}/metrics", headers=metrics_headers(), timeout=5).text)
    except httpx.HTTPError:
        return ServerReading()


def parse_metrics(text: str) -> ServerReading:
    """The figures of one ``/metrics`` exposition (Prometheus text format)."""
    buckets: dict[float, float] = {}
    scores: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("bargein_event_loop_lag_seconds_bucket{"):
            bound = line.split('le="', 1)[1].split('"', 1)[0]
            buckets[math.inf if bound == "+Inf" else float(bound)] = float(line.rsplit(" ", 1)[1])
        elif line.startswith("bargein_turn_end_scores_total{"):
            outcome = line.split('outcome="', 1)[1].split('"', 1)[0]
            scores[outcome] = scores.get(outcome, 0.0) + float(line.rsplit(" ", 1)[1])
    return ServerReading(buckets, scores)


def lag_p99_ms(before: ServerReading, after: ServerReading) -> float:
    """Upper bucket bound (ms) holding the 99th percentile of the lag samples taken between two scrapes."""
    counts = sorted((bound, after.lag_buckets[bound] - before.lag_buckets.get(bound, 0.0))
                    for bound in after.lag_buckets)
    total = counts[-1][1] if counts else 0.0
    if total <= 0:
        return math.nan
    return next((bound * 1000 for bound, count in counts if count >= 0.99 * total), math.nan)


def scored_share(before: ServerReading, after: ServerReading) -> float:
    """The share of end-of-turn scores asked between two scrapes that ran (the rest were shed for want of
    CPU); NaN when none was asked (plain silence, or a server without the model)."""
    ran = after.scores.get("run", 0.0) - before.scores.get("run", 0.0)
    shed = after.scores.get("shed", 0.0) - before.scores.get("shed", 0.0)
    return ran / (ran + shed) if ran + shed > 0 else math.nan
