"""A 60-second soak of a real server process (instant engines): no growth in memory, descriptors or tasks.

``python -m bench.soak`` is the long version (docs/benchmarks.md has its figures).
"""

from __future__ import annotations

import pytest

from bench.realtime_harness import ServerProcess
from bench.soak import soak, summarize

pytestmark = pytest.mark.slow


async def test_sixty_seconds_of_talking_and_barging_in_leaves_no_growth() -> None:
    with ServerProcess("instant") as server:
        report = await soak(server.host_port, sessions=10, seconds=90, warmup_s=30, sample_s=5, barge_in=0.3,
                            turns_per_connection=6, verbose=False)
    print(summarize(report))
    counts = report.counts
    assert not counts.failures, counts.failures
    assert counts.turns >= 50 and counts.barge_ins >= 5 and counts.connections > 10
    assert counts.missing_replies <= counts.turns // 10
    steady = report.steady()
    assert len(steady) >= 10
    assert report.slope_per_min("rss_mb") <= 1.0, summarize(report)
    assert max(s.fds for s in steady) <= steady[0].fds + 2, "descriptors grow"
    # tasks come and go with replies; what matters is that they do not pile up
    first_half = [s.tasks for s in steady[: len(steady) // 2]]
    second_half = [s.tasks for s in steady[len(steady) // 2:]]
    assert max(second_half) <= max(first_half) + 20, summarize(report)
    assert report.slope_per_min("tasks") <= 10, summarize(report)
