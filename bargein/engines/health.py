"""Each engine stage's health: ok, degraded (recent failures, still tried) or down (skipped, retried).

A stage goes *degraded* at its first failure and *down* after ``down_after`` failures in a row. While
down, a background probe retries it with exponential backoff (``first_backoff_s`` doubling up to
``max_backoff_s``); the first probe that succeeds brings it back to ok. ``ok_after`` successes in a row
clear *degraded*. ``/healthz`` and ``/metrics`` read :class:`Health`.

**Busy is not broken.** A call's deadline counts from when the session asked, so it includes the wait in
a shared engine's queue (the fair queues, the micro-batchers, a worker process's queue). A call that
missed its deadline before its first result (:meth:`StageHealth.record_miss`) therefore counts as a
failure only when the stage delivered nothing to any other call while it waited: an engine that answered
others meanwhile is serving, and the miss was the queue's (counted in ``queue_misses``, neither a
failure nor a success). An engine that is stuck, or too slow for any call, delivers nothing and still
goes down after ``down_after`` misses; errors the engine raises, and a stall after a call's first
result (it was being served), always count. The caller's deadline is unchanged: the user gets the
stage's fallback at the same moment either way.

**Refused is not broken either.** A shared engine whose queue is full (in all, or for one session: a
worker process's in-flight caps, the recogniser's waiting lanes) refuses a call at once
(:class:`~bargein.engines.fair.EngineBusy` and its kin: :func:`~bargein.engines.fair.refused`). That call
fails for its caller as before, but :meth:`StageHealth.record_refusal` counts it apart (``refusals``), as
neither a failure nor a success: one session that fills its own share must not take the stage down for
every session, and a refusal between failures neither breaks nor lengthens their run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

log = logging.getLogger(__name__)
State = Literal["ok", "degraded", "down"]
STATES: tuple[State, ...] = ("ok", "degraded", "down")


@dataclass
class StageHealth:
    """One stage's state, counts and background retry."""

    name: str
    down_after: int = 3
    first_backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    ok_after: int = 3
    """Successes in a row that clear *degraded* back to *ok*."""
    probe: Callable[[], Awaitable[None]] | None = None
    """A cheap call that proves the engine works again (retried in the background while down)."""
    state: State = "ok"
    failures: int = 0
    successes: int = 0
    consecutive_failures: int = 0
    consecutive_successes: int = 0
    last_error: str | None = None
    deliveries: int = 0
    """Results the stage delivered (a transcript, a token, a chunk): read by :meth:`record_miss`."""
    queue_misses: int = 0
    """Deadlines missed while the stage was delivering to other calls: its queue's, not held against it."""
    refusals: int = 0
    """Calls the engine refused for load (a full queue): not held against it."""
    changed_at: float = field(default_factory=time.time)
    _retry: asyncio.Task[None] | None = None

    def _set(self, state: State) -> None:
        if state != self.state:
            log.warning("stage %s: %s -> %s (%s)", self.name, self.state, state, self.last_error or "recovered")
            self.state, self.changed_at = state, time.time()

    def record_ok(self) -> None:
        """A call succeeded."""
        self.deliveries += 1
        self.successes += 1
        self.consecutive_failures = 0
        self.consecutive_successes += 1
        if self.state == "down" or (self.state == "degraded" and self.consecutive_successes >= self.ok_after):
            self._set("ok")

    def record_progress(self) -> None:
        """A call that is still going delivered a result (a token, an audio chunk): the engine is serving."""
        self.deliveries += 1

    def record_miss(self, error: str, *, since: int) -> bool:
        """A call missed its deadline before its first result; ``since`` is :attr:`deliveries` when it
        started waiting. A failure (returns True) unless the stage delivered to other calls meanwhile (the
        wait was in a busy engine's queue: module docstring)."""
        if self.deliveries > since:
            self.queue_misses += 1
            log.info("stage %s: a call missed its deadline in a busy queue (%s); not held against the engine",
                     self.name, error)
            return False
        self.record_failure(error)
        return True

    def record_refusal(self, error: str) -> None:
        """A call the engine refused because a queue was full: counted, but neither a failure nor a success
        (module docstring), so the state and the runs of failures and successes are left as they are."""
        self.refusals += 1
        # debug, not info: under load there may be many a second, and the count says how many
        log.debug("stage %s: a call was refused for load (%s); not held against the engine", self.name, error)

    def record_failure(self, error: BaseException | str) -> None:
        """A call failed or timed out; enough in a row take the stage down and start the retries."""
        self.failures += 1
        self.consecutive_successes = 0
        self.consecutive_failures += 1
        self.last_error = error if isinstance(error, str) else f"{type(error).__name__}: {error}"[:300]
        if self.consecutive_failures >= self.down_after:
            self._set("down")
            self._start_retry()
        elif self.state == "ok":
            self._set("degraded")

    @property
    def down(self) -> bool:
        """True while calls skip this stage."""
        return self.state == "down"

    def _start_retry(self) -> None:
        if self.probe is None or (self._retry is not None and not self._retry.done()):
            return
        with contextlib.suppress(RuntimeError):  # no running loop: nothing to retry on
            self._retry = asyncio.get_running_loop().create_task(self._retry_loop(), name=f"retry-{self.name}")

    async def _retry_loop(self) -> None:
        assert self.probe is not None
        backoff = self.first_backoff_s
        while self.state == "down":
            await asyncio.sleep(backoff)
            try:
                await self.probe()
            except Exception as error:
                self.last_error = f"retry: {type(error).__name__}: {error}"[:300]
                backoff = min(self.max_backoff_s, backoff * 2)
                continue
            self.consecutive_failures = 0
            self._set("ok")

    def snapshot(self) -> dict[str, Any]:
        """The JSON view for ``/healthz``."""
        return {"state": self.state, "failures": self.failures, "consecutive_failures": self.consecutive_failures,
                "queue_misses": self.queue_misses, "refusals": self.refusals, "last_error": self.last_error,
                "since": int(self.changed_at)}

    def close(self) -> None:
        """Stop the background retry."""
        if self._retry is not None:
            self._retry.cancel()


class Health:
    """Every stage's health, by stage name (vad, asr, llm, tts)."""

    def __init__(self, stages: Sequence[str] = ("vad", "asr", "llm", "tts"), **settings: Any) -> None:
        self.stages = {name: StageHealth(name, **settings) for name in stages}

    def __getitem__(self, stage: str) -> StageHealth:
        return self.stages[stage]

    @property
    def overall(self) -> State:
        """The worst stage state."""
        return max((s.state for s in self.stages.values()), key=STATES.index, default="ok")

    def snapshot(self) -> dict[str, Any]:
        """Every stage's JSON view."""
        return {name: stage.snapshot() for name, stage in self.stages.items()}

    def close(self) -> None:
        """Stop every background retry."""
        for stage in self.stages.values():
            stage.close()
