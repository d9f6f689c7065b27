"""What the machine's CPUs are doing at one instant, as Linux's ``/proc`` tells it.

Models that could run on more threads read it: the embedded LLM before each evaluation, Whisper around the
encoding before a final's decoding. A second thread helps only while a core is free for it, and hurts while
another thread holds that core.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity), at least one."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class CpuReading:
    """The machine and this process at one instant, as the kernel counts them."""

    running: int
    """Runnable threads on the machine, the reader included."""
    own_running: int
    """Of those, this process's."""
    own_wait_s: float
    """Time this process's threads have spent waiting on a run queue (seconds; only differences mean anything;
    a thread that ended takes its share with it, which can only make a wait look shorter)."""


def read_proc(loadavg: Path = Path("/proc/loadavg"), own_tasks: Path = Path("/proc/self/task")) -> CpuReading | None:
    """The reading from ``/proc``, or ``None`` where the kernel does not offer the files. The machine's count is
    read before the process's threads, so a thread of ours that starts running in between can hide another's."""
    try:
        running = int(loadavg.read_text().split()[3].split("/")[0])
        own_running = 0
        wait_ns = 0
        for task in own_tasks.iterdir():
            state, waited = _task(task)
            own_running += state == "R"
            wait_ns += waited
    except (OSError, IndexError, ValueError):
        return None
    return CpuReading(running=running, own_running=own_running, own_wait_s=wait_ns / 1e9)


def _task(task: Path) -> tuple[str, int]:
    """A thread's state letter and its run-queue wait in ns; ``("", 0)`` if it ended while being looked at."""
    try:  # stat: "pid (name) state ...", and the name may hold spaces and brackets; schedstat: "run wait slices"
        state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
        return state, int((task / "schedstat").read_text().split()[1])
    except FileNotFoundError:
        return "", 0
