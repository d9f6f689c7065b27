"""How many threads the embedded LLM evaluates with: every core while the others are idle, half of them otherwise.

llama.cpp's threads meet at a spinning barrier after every layer. With a core to itself, a second thread nearly
halves a prompt's evaluation and cuts a decoded token by a third (Qwen 0.5B on 2 cores: 17 prompt tokens in 135
against 267 ms, a token in 29 against 47 ms). With that core busy elsewhere the same thread waits at every barrier
for a core the scheduler does not give it, and everything is 2 to 2.4 times *slower* than on one thread. So the
count follows what the machine is doing, decided before every evaluation call:

* **More threads** only when no other process's thread is runnable at that moment (``procs_running`` in
  ``/proc/stat``, less this process's own runnable threads: the reader, the event loop passing tokens on, and
  the model's OpenMP helpers, which spin for 5 to 10 ms after an evaluation on more than one thread). So the
  engine belongs in a process of its own (the server's default, ``llm_process``); in a process shared with the
  recogniser it sees the recogniser only through the pressure check below. It is an instant's view, and that
  is the point: the speculative reply starts the moment the recogniser's guess ends, and any average over the
  last tens of milliseconds would still see the recogniser. (Letting the helpers sleep at once instead, with
  ``OMP_WAIT_POLICY=passive``, made two threads as slow as one: llama.cpp's barriers need them awake.)
* **Back to fewer** as soon as an evaluation on more threads saw tasks waiting for a CPU for much of it (the
  kernel's CPU pressure, ``/proc/pressure/cpu``, "some", over the call's own interval), and then for
  :data:`HOLD_S` at least.

A machine without either file (not Linux, or pressure accounting off) keeps the fewer threads, as before.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

STALL_SHARE = 0.5
"""Share of an evaluation's wall time during which some task waited for a CPU that sends the count back down.
A machine's background (an event loop waking for each audio frame, the VAD) makes 0.1 to 0.2 while the model
holds both cores, and a token is still a third faster than on one thread then; a thread that really competes
(a recognition, a synthesis) keeps some task waiting nearly all the time."""
HOLD_S = 0.25
"""After a contended evaluation, how long the count stays down before an idle instant may raise it again."""


@dataclass(frozen=True)
class CpuReading:
    """The machine at one instant, as the kernel counts it."""

    others_running: int
    """Runnable threads of other processes."""
    stall_s: float
    """Total time some task has waited for a CPU since boot (seconds; only differences mean anything)."""


def read_proc(stat: Path = Path("/proc/stat"), pressure: Path = Path("/proc/pressure/cpu"),
              own_tasks: Path = Path("/proc/self/task")) -> CpuReading | None:
    """The reading from ``/proc``, or ``None`` where the kernel does not offer the files."""
    try:
        running = next(int(line.split()[1]) for line in stat.read_text().splitlines()
                       if line.startswith("procs_running"))
        some = pressure.read_text().splitlines()[0]
        total_us = int(some.rsplit("total=", 1)[1])
        own = sum(1 for task in own_tasks.iterdir() if _running(task / "stat"))
    except (OSError, StopIteration, IndexError, ValueError):
        return None
    return CpuReading(others_running=max(running - own, 0), stall_s=total_us / 1e6)


def _running(task_stat: Path) -> bool:
    try:  # "pid (name) state ...", and the name may hold spaces and brackets
        return task_stat.read_text().rsplit(")", 1)[1].split()[0] == "R"
    except (OSError, IndexError):  # the thread ended while being looked at
        return False


@dataclass
class ThreadGovernor:
    """Chooses the thread count for each evaluation (see the module's docstring); one per model thread."""

    fewer: int
    """The count on a busy machine (half the cores: the rest is left to recognition and synthesis)."""
    more: int
    """The count while the other cores are idle (every core)."""
    cores: int = field(default_factory=lambda: os.cpu_count() or 1)
    read: Callable[[], CpuReading | None] = read_proc
    clock: Callable[[], float] = time.monotonic
    threads: int = field(init=False)
    raised: int = field(default=0, init=False)
    """Evaluations run on :attr:`more` threads."""
    lowered: int = field(default=0, init=False)
    """Times contention sent the count back down."""
    _hold_until: float = field(default=float("-inf"), init=False)
    _started: tuple[float, float] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.fewer = max(1, self.fewer)
        self.more = max(self.fewer, self.more)
        self.threads = self.fewer
        if self.more > self.fewer and self.read() is None:
            self.more = self.fewer  # nothing to decide with: keep the safe count

    def before_eval(self) -> int:
        """The thread count for the evaluation about to run."""
        if self.more == self.fewer:
            return self.threads
        reading = self.read()
        now = self.clock()
        idle = reading is not None and reading.others_running <= self.cores - self.more
        self.threads = self.more if idle and now >= self._hold_until else self.fewer
        self._started = (now, reading.stall_s) if reading is not None and self.threads > self.fewer else None
        if self.threads > self.fewer:
            self.raised += 1
        return self.threads

    def after_eval(self) -> None:
        """Look at the evaluation that just ran: if it was contended, lower the count and hold it down."""
        if self._started is None:
            return
        started, stall_before = self._started
        self._started = None
        reading = self.read()
        now = self.clock()
        if reading is None or now <= started:
            return
        if (reading.stall_s - stall_before) / (now - started) > STALL_SHARE:
            self.threads = self.fewer
            self._hold_until = now + HOLD_S
            self.lowered += 1
