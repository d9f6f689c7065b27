"""The storm guard: after N barge-ins within a window, the session switches into confirm mode.

It keeps the stream times of recent barge-ins (a sliding-window log, the exact form of "N per
window"; a continuous token bucket of 3 per 10 s would let an interruption every 3.4 s through
forever, which is precisely a storm). In confirm mode the session stops restarting replies eagerly:
it waits for a longer silence before answering and only a query-length segment may interrupt.
A calm period of ``window_ms`` with no barge-in restores normal mode. Pure: time is stream ms.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Literal

Mode = Literal["normal", "confirm"]


@dataclass
class StormGuard:
    """Barge-in rate limit (default 3 per 10 s) and the mode it implies."""

    capacity: int = 3
    window_ms: float = 10_000.0
    mode: Mode = "normal"
    _recent: deque[float] = field(default_factory=deque, init=False)

    @property
    def recent(self) -> int:
        """Barge-ins inside the current window."""
        return len(self._recent)

    def _forget(self, now_ms: float) -> None:
        while self._recent and now_ms - self._recent[0] >= self.window_ms:
            self._recent.popleft()

    def barge_in(self, now_ms: float) -> Mode | None:
        """A reply was cut by a query; returns the new mode if this changed it."""
        self._forget(now_ms)
        self._recent.append(now_ms)
        if self.mode == "normal" and len(self._recent) >= self.capacity:
            self.mode = "confirm"
            return "confirm"
        return None

    def tick(self, now_ms: float) -> Mode | None:
        """Time passed; returns ``"normal"`` when a calm period ends confirm mode."""
        if self.mode == "confirm" and self._recent and now_ms - self._recent[-1] >= self.window_ms:
            self.mode = "normal"
            self._recent.clear()
            return "normal"
        return None
