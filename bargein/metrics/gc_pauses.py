"""Garbage-collector pauses as a histogram: a full collection stops every session on the worker.

The models' objects are frozen out of the collector once loaded (``gc.freeze()`` at start-up), which
cut a generation-2 pass under 16 sessions from ~90 ms to ~15 ms; this keeps measuring what is left, so
a lagging worker's ``/metrics`` says whether the collector is the reason.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from prometheus_client import Histogram


class GcPauseWatch:
    """Times every collection through ``gc.callbacks`` while installed."""

    def __init__(self, histogram: Histogram) -> None:
        self.histogram = histogram
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        """The ``gc.callbacks`` hook: ``start`` and ``stop`` of each collection."""
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started:
            self.histogram.labels(str(info.get("generation", "?"))).observe(time.perf_counter() - self._started)
            self._started = 0.0

    def install(self) -> None:
        """Start timing collections."""
        if self not in gc.callbacks:
            gc.callbacks.append(self)

    def remove(self) -> None:
        """Stop timing collections."""
        if self in gc.callbacks:
            gc.callbacks.remove(self)
