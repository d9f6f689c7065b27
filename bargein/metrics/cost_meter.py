"""CPU seconds measured where the work ran, and carried to the turn that asked for it.

Two measures, each chosen for what it can honestly see:

- **A worker process** (:mod:`bargein.engines.process.child`) reads its own process CPU time
  (``time.process_time()``: every thread of the process, the native pools of llama.cpp, CTranslate2 and
  onnxruntime included) at each request's start and end, and splits the CPU spent between two readings equally
  among the requests in flight over that interval (:class:`RequestMeter`). One request at a time, the split is
  exact; several at once share a batch, and an equal split of a shared batch is the fairest account the kernel's
  figures allow. CPU spent while no request was in flight (a prefill hint warming the KV cache, the engine's own
  housekeeping) is nobody's request: it travels with the next request's cost as ``background_cpu_s`` and counts
  in the stage's totals, never in a turn.
- **In the server process** (VAD, end-of-turn model, engines run in process) the work runs on one thread per
  call, so the calling thread's CPU time (``time.thread_time()``) around the call is its cost (:func:`measured`).

A session puts its meter in :data:`current_meter` (a context variable: every task it starts inherits it); an
engine call takes a :data:`Bill` from it when it starts (:func:`bill_now`), bound to the turn current then, and
charges it when the cost is known. Every charge also reaches the process-wide per-stage totals
(:data:`STAGE_CPU`: ``bargein_cpu_seconds_total{stage}`` and the ledger export).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

STAGES = ("vad", "turn_end", "asr", "llm", "tts", "see", "session")
"""The stages whose CPU the ledger counts (``session``: the session's own steps on the server's event loop,
:mod:`bargein.metrics.loop_cpu`)."""

Bill = Callable[[str, float], None]
"""Charges ``cpu_s`` of a stage to the turn the bill was taken for (called on the session's loop)."""


class CostMeter(Protocol):
    """What a session's ledger offers engine calls: a bill bound to the turn current now."""

    def bill(self) -> Bill:
        """A bill for work starting now."""
        ...


current_meter: contextvars.ContextVar[CostMeter | None] = contextvars.ContextVar("bargein_meter", default=None)


request_usage: contextvars.ContextVar[dict[str, int] | None] = contextvars.ContextVar("bargein_usage", default=None)
"""Where an engine call notes what it used (``prompt_tokens``, ``cached_tokens``): a reply's task sets a dict of
its own, and so does a worker's request task, whose dict travels back in the request's ``cost`` message."""


def note_usage(counts: Mapping[str, int]) -> None:
    """Add what an engine call used to the current task's usage (none noted outside one)."""
    usage = request_usage.get()
    if usage is not None:
        for name, count in counts.items():
            usage[name] = usage.get(name, 0) + int(count)


@dataclass
class Speculative:
    """One speculative job (a guessed recognition, a prefetched reply): the CPU its engine calls were charged, and,
    once it is thrown away, the tokens it had generated."""

    cpu_s: float = 0.0
    discarded: bool = False
    tokens: int = 0

    def discard(self, tokens: int = 0) -> None:
        """Its result was thrown away: all its CPU (and ``tokens``) were wasted."""
        self.discarded, self.tokens = True, tokens


speculation: contextvars.ContextVar[Speculative | None] = contextvars.ContextVar("bargein_speculation", default=None)
"""Set in the task of a speculative job: the bills taken there charge its :class:`Speculative` too."""


@contextlib.contextmanager
def speculating(work: Speculative) -> Iterator[None]:
    """Tasks created in the block run ``work``'s job (they copy the context when created)."""
    token = speculation.set(work)
    try:
        yield
    finally:
        speculation.reset(token)


def bill_now() -> Bill | None:
    """The current session's bill for work starting now (None outside a session)."""
    meter = current_meter.get()
    return None if meter is None else meter.bill()


class StageCpu:
    """CPU seconds per stage in this process's sessions, since it started: attributed to requests, and the
    workers' background (work no request was in flight for). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.attributed: dict[str, float] = {}
        self.background: dict[str, float] = {}
        self.requests: dict[str, int] = {}

    def add(self, stage: str, cpu_s: float, background_s: float = 0.0) -> None:
        """Count one request's cost (and the background its worker reported with it)."""
        with self._lock:
            self.attributed[stage] = self.attributed.get(stage, 0.0) + max(0.0, cpu_s)
            self.background[stage] = self.background.get(stage, 0.0) + max(0.0, background_s)
            self.requests[stage] = self.requests.get(stage, 0) + 1

    def snapshot(self) -> dict[str, dict[str, float]]:
        """``{stage: {"cpu_s", "background_cpu_s", "requests"}}`` as they stand."""
        with self._lock:
            return {stage: {"cpu_s": round(self.attributed[stage], 6),
                            "background_cpu_s": round(self.background.get(stage, 0.0), 6),
                            "requests": self.requests.get(stage, 0)} for stage in self.attributed}

    def total(self, stage: str) -> float:
        """A stage's CPU seconds, background included."""
        with self._lock:
            return self.attributed.get(stage, 0.0) + self.background.get(stage, 0.0)


STAGE_CPU = StageCpu()


def charge(stage: str, bill: Bill | None, cpu_s: float, background_s: float = 0.0, *,
           loop: asyncio.AbstractEventLoop | None = None) -> None:
    """Count a cost in the stage's totals and on ``bill`` (through ``loop`` when called off the session's loop).
    Work outside any session (the start-up warm-up, which takes no bill) is no session's cost: not counted."""
    if bill is None:
        return
    STAGE_CPU.add(stage, cpu_s, background_s)
    if loop is None:
        bill(stage, cpu_s)
    else:
        with contextlib.suppress(RuntimeError):  # the session's loop is gone: nobody listens
            loop.call_soon_threadsafe(bill, stage, cpu_s)


class _ThreadClaims(threading.local):
    """CPU seconds this thread measured and charged to a stage of their own, so that a session's metered step
    around them (:mod:`bargein.metrics.loop_cpu`) leaves them out."""

    cpu_s = 0.0


thread_claims = _ThreadClaims()


@contextlib.contextmanager
def measured(stage: str, bill: Bill | None) -> Iterator[None]:
    """Charge the calling thread's CPU time over the block to ``stage`` (work that runs on that one thread)."""
    start = time.thread_time()
    try:
        yield
    finally:
        spent = time.thread_time() - start
        thread_claims.cpu_s += spent
        charge(stage, bill, spent)


class RequestMeter:
    """A worker's process CPU split among the requests in flight (module docstring). Used on one thread."""

    def __init__(self, clock: Callable[[], float] = time.process_time) -> None:
        self.clock = clock
        self._last = clock()
        self._shares: dict[int, float] = {}
        self._background = 0.0

    def _advance(self) -> None:
        now = self.clock()
        spent, self._last = max(0.0, now - self._last), now
        if self._shares:
            each = spent / len(self._shares)
            for request_id in self._shares:
                self._shares[request_id] += each
        else:
            self._background += spent

    def __contains__(self, request_id: int) -> bool:
        return request_id in self._shares

    def start(self, request_id: int) -> None:
        """A request begins: from now it shares the process's CPU."""
        self._advance()
        self._shares[request_id] = 0.0

    def finish(self, request_id: int) -> dict[str, Any]:
        """A request ends: its CPU seconds, and the background spent since the last finish."""
        self._advance()
        cpu_s = self._shares.pop(request_id, 0.0)
        background, self._background = self._background, 0.0
        return {"cpu_s": cpu_s, "background_cpu_s": background}
