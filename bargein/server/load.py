"""How loaded this worker is, and whether it may take one more session.

A worker that is already late on its audio makes every session on it worse with each session it
adds, so it refuses new ones while it is behind (and tells the client to retry elsewhere) instead of
degrading everyone. The same snapshot is what ``/metrics`` and ``/healthz`` report per worker.
"""

from __future__ import annotations

import math
import os
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field

from bargein.metrics.prometheus import StageSource, queue_depths

LAG_WINDOW = 100
"""Loop-lag samples kept: 5 s at the watcher's 50 ms period."""
CLIENT_PACED = frozenset({"outbound"})
"""Queues that wait on the clients, not on this worker (events a client has not read yet): reported, but
never a reason to refuse a session (one client that stops reading would otherwise turn everyone away)."""


@dataclass(frozen=True)
class LoadLimits:
    """Above any of these a worker refuses new sessions."""

    max_sessions: int = 256
    max_loop_lag_ms: float = 200.0
    """p95 of how late the event loop woke over the last 5 s."""
    max_queue_depth: int = 512
    """Work waiting in any one stage's queue (VAD frames, ASR clips, LLM or TTS requests)."""


@dataclass(frozen=True)
class LoadSnapshot:
    """One worker's load at one moment."""

    pid: int
    sessions: int
    loop_lag_p95_ms: float
    loop_lag_p99_ms: float
    queue_depths: dict[str, float] = field(default_factory=dict)
    at: float = 0.0
    """Wall-clock time (``time.time()``) the snapshot was taken."""

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form (``/healthz``, the per-worker snapshot files)."""
        return asdict(self)


class LoadMonitor:
    """Keeps the recent loop-lag samples and decides admission against :class:`LoadLimits`."""

    def __init__(self, limits: LoadLimits, sessions: Callable[[], int],
                 queues: Callable[[], Mapping[str, StageSource]]) -> None:
        self.limits = limits
        self._sessions = sessions
        self._queues = queues
        self._lags: deque[float] = deque(maxlen=LAG_WINDOW)
        self.refused = 0

    def observe_lag(self, seconds: float) -> None:
        """One sample of the event loop's lateness (fed by the loop-lag watcher)."""
        self._lags.append(seconds * 1000.0)

    def snapshot(self) -> LoadSnapshot:
        """Sessions, loop lag p95/p99 over the window and each stage's queue depth, now."""
        lags = sorted(self._lags)
        return LoadSnapshot(os.getpid(), self._sessions(), _quantile(lags, 0.95), _quantile(lags, 0.99),
                            queue_depths(self._queues()), time.time())

    def refusal(self) -> str | None:
        """Why a new session must be refused now, or ``None`` to admit it."""
        snap = self.snapshot()
        reason: str | None = None
        if snap.sessions >= self.limits.max_sessions:
            reason = f"this worker already serves {snap.sessions} sessions (max_sessions {self.limits.max_sessions})"
        elif snap.sessions and snap.loop_lag_p95_ms > self.limits.max_loop_lag_ms:
            # with no session there is no audio to be late on: the lag is start-up's or another process's
            reason = (f"this worker is {snap.loop_lag_p95_ms:.0f} ms behind its audio (p95 over 5 s; "
                      f"max_loop_lag_ms {self.limits.max_loop_lag_ms:.0f})")
        else:
            deepest = max(((stage, depth) for stage, depth in snap.queue_depths.items() if stage not in CLIENT_PACED),
                          key=lambda kv: kv[1], default=None)
            if deepest is not None and deepest[1] > self.limits.max_queue_depth:
                reason = (f"the {deepest[0]} queue holds {deepest[1]:.0f} items "
                          f"(max_queue_depth {self.limits.max_queue_depth})")
        if reason is not None:
            self.refused += 1
        return reason


def _quantile(ordered: list[float], q: float) -> float:
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]
