"""How many threads the embedded LLM evaluates with: every core while the others are idle, half of them otherwise.

llama.cpp's threads meet at a spinning barrier after every layer. With a core to itself, a second thread nearly
halves a prompt's evaluation and cuts a decoded token by a third (Qwen 0.5B on 2 cores: 17 prompt tokens in 135
against 267 ms, a token in 29 against 47 ms). With that core busy elsewhere the same thread waits at every barrier
for a core the scheduler does not give it, and everything is 2 to 2.4 times *slower* than on one thread. So the
count follows what the machine is doing, decided before every evaluation call:

* **More threads** only when no other thread is runnable at that moment (the running count of
  ``/proc/loadavg``, less this process's own runnable threads: the reader, the model's OpenMP helpers, which
  spin for 5 to 10 ms after an evaluation on more than one thread, and one more, the thread passing tokens
  on; a process's threads beyond those, such as a recogniser sharing the process, count as others). It is an
  instant's view, and that is the point: the speculative reply starts the moment the recogniser's guess ends,
  and any average over the last tens of milliseconds would still see the recogniser. (Letting the helpers
  sleep at once instead, with ``OMP_WAIT_POLICY=passive``, made two threads as slow as one: llama.cpp's
  barriers need them awake.)
* **Back to fewer** as soon as an evaluation on more threads found this process's threads waiting for a CPU
  for much of it (their run-queue wait in ``/proc/self/task/*/schedstat``, over the call's own interval), and
  then for :data:`HOLD_S`, doubled for every contended evaluation in a row (up to :data:`MAX_HOLD_S`), so a
  competitor that comes and goes costs one slow evaluation in seconds, not one in every hold.

A machine without those files (not Linux, or scheduler statistics off) keeps the fewer threads, as before. In a
container whose ``/proc/loadavg`` counts the host's threads, the count rarely rises: as before, not worse.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from bargein.engines.cpu_reading import CpuReading, available_cores, read_proc

WAIT_SHARE = 0.3
"""Run-queue wait of this process's threads, per second of an evaluation, that sends the count back down. With
both cores held by the model's two threads, one competing thread makes each of them wait about a third of the
time (0.67 together); an event loop waking for each audio frame makes a few hundredths."""
HOLD_S = 0.25
"""After a contended evaluation, how long the count stays down before an idle instant may raise it again."""
MAX_HOLD_S = 4.0
"""The longest hold, reached after five contended evaluations in a row."""


@dataclass
class ThreadGovernor:
    """Chooses the thread count for each evaluation (see the module's docstring); one per model thread."""

    fewer: int
    """The count on a busy machine (half the cores: the rest is left to recognition and synthesis)."""
    more: int
    """The count while the other cores are idle (every core)."""
    cores: int = field(default_factory=available_cores)
    """The cores the machine gives this process: ``more`` threads need ``more`` of them free."""
    read: Callable[[], CpuReading | None] = read_proc
    """Where readings come from (``/proc``; scripted in tests)."""
    clock: Callable[[], float] = time.monotonic
    threads: int = field(init=False)
    """The count chosen for the evaluation running or last run."""
    raised: int = field(default=0, init=False)
    """Evaluations run on :attr:`more` threads."""
    lowered: int = field(default=0, init=False)
    """Times contention sent the count back down."""
    _hold_until: float = field(default=float("-inf"), init=False)
    _contended_in_a_row: int = field(default=0, init=False)
    _started: tuple[float, float] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.fewer = max(1, self.fewer)
        self.more = max(self.fewer, self.more)
        self.threads = self.fewer
        if self.more > self.fewer and self.read() is None:
            self.more = self.fewer  # nothing to decide with: keep the safe count

    @contextmanager
    def evaluation(self, apply: Callable[[int], None]) -> Iterator[int]:
        """Around one evaluation: choose its count, ``apply`` it to the model's context when it differs from the
        count of the evaluation before (the context keeps a count until told another), and look at the call
        once it is over, whether it succeeded or not."""
        previous = self.threads
        threads = self.before_eval()
        if threads != previous:
            apply(threads)
        try:
            yield threads
        finally:
            self.after_eval()

    def before_eval(self) -> int:
        """The thread count for the evaluation about to run."""
        if self.more == self.fewer:
            return self.threads
        reading = self.read()
        now = self.clock()
        idle = False
        if reading is not None:
            # the reader, the helpers still spinning from the last call, and the thread passing tokens on
            own = min(reading.own_running, self.threads + 1)
            idle = reading.running - own <= self.cores - self.more
        self.threads = self.more if idle and now >= self._hold_until else self.fewer
        self._started = (now, reading.own_wait_s) if reading is not None and self.threads > self.fewer else None
        if self.threads > self.fewer:
            self.raised += 1
        return self.threads

    def after_eval(self) -> None:
        """Look at the evaluation that just ran on more threads: if it was contended, hold the count down."""
        if self._started is None:
            return
        started, wait_before = self._started
        self._started = None
        reading = self.read()
        now = self.clock()
        if reading is None or now <= started:
            return
        if (reading.own_wait_s - wait_before) / (now - started) > WAIT_SHARE:
            self._contended_in_a_row += 1
            self._hold_until = now + min(HOLD_S * 2 ** (self._contended_in_a_row - 1), MAX_HOLD_S)
            self.lowered += 1
        else:
            self._contended_in_a_row = 0
