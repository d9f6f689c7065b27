"""A soak of a real server process (instant engines): no growth in memory, descriptors or tasks.

Ten users talk and barge in for three minutes; the last minute and a half is measured. Resident memory
must not climb more than 1 MB/min after the warm-up (the server's memory upkeep, ``bargein.memory_upkeep``,
collects closed sessions' reference cycles every 15 s; without it this test measured about +2.5 MB/min).
``python -m bench.soak`` is the long version.
"""

from __future__ import annotations

import pytest

from bench.realtime_harness import ServerProcess
from bench.soak import soak, summarize

pytestmark = pytest.mark.slow


async def test_talking_and_barging_in_leaves_no_growth_after_warm_up() -> None:
    with ServerProcess("instant") as server:
        report = await soak(server.host_port, sessions=10, seconds=180, warmup_s=90, sample_s=5, barge_in=0.3,
                            turns_per_connection=10, verbose=False)
    print(summarize(report))
    counts = report.counts
    assert not counts.failures, counts.failures
    assert counts.turns >= 100 and counts.barge_ins >= 10 and counts.connections > 10
    assert counts.missing_replies <= counts.turns // 10
    steady = report.steady()
    assert len(steady) >= 15
    assert max(s.fds for s in steady) <= steady[0].fds + 2, "descriptors grow"
    # tasks come and go with replies; what matters is that they do not pile up
    first_half = [s.tasks for s in steady[: len(steady) // 2]]
    second_half = [s.tasks for s in steady[len(steady) // 2:]]
    assert max(second_half) <= max(first_half) + 20, summarize(report)
    assert report.slope_per_min("tasks") <= 10, summarize(report)
    assert report.slope_per_min("rss_mb") <= 1.0, summarize(report)
