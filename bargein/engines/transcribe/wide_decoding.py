"""Whether a final transcript decodes on the encoder's threads, or on the decoder copy's one thread.

Whisper's decoder steps are small products, and whether a second thread speeds them up depends on the CPU: on
one machine tiny.en decoded a token in 5.0 ms on one thread and 6.6 ms on two, on another (an AMD EPYC without
AVX-512) the 21 tokens of a LibriVox sentence took 161 ms on one thread and 94 ms on two. So the choice is
measured once at start-up (:func:`measure_speed_up`), and a final takes the encoder's threads only where they
were faster by :data:`MIN_SPEED_UP`, only where the clip's encoding, on those same threads just before, hardly
waited for a CPU (the speculative guess at a pause, while the LLM waits for its words, is the case this is for:
a second thread beside a busy core is slower than one), and only while no other recognition of this process
runs (:class:`Occupancy`). Partials always stay on one thread: nobody waits on them.

Why the encoding's wait and not the machine at that instant: at a pause some other thread is nearly always
runnable for a moment (the server's event loop taking a frame, a client, the LLM's helpers), and an instant's
count kept 18 of 20 guesses on one thread in a live run. The encoding's ~100 ms on both cores say whether
a second core was really free.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from bargein.engines.cpu_reading import CpuReading, available_cores, read_proc

MIN_SPEED_UP = 1.2
"""How much faster the encoder's threads must have decoded at start-up to be used (timings swing ~10 %)."""
WAIT_SHARE = 0.6
"""Run-queue wait of this process's threads per second of the encoding above which the decoding stays on one
thread. A thread competing for the whole encoding makes its two threads wait about 0.67 together. Measured at
the pauses of a live run (tiny.en, 2 cores): 0.1 to 0.34 with nothing else running, 0.45 to 0.6 while the
server scored the end of the turn for part of it, 0.64 to 0.96 while the LLM evaluated a prompt (which is when
a second decoding thread would slow both down)."""

Model = TypeVar("Model")


class Occupancy:
    """What this process's recognitions are running right now, so that a decoding on several threads starts only
    while nothing else runs (what starts after it is not held back: a partial's encoding then waits for the
    encoder's model, whose one worker the wide decoding holds). Shared by every model of the process (two
    models' finals compete for the same cores); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._working = 0
        self._wide = False

    def try_wide(self) -> bool:
        """Take the cores for one wide decoding, unless anything else runs; :meth:`release_wide` after."""
        with self._lock:
            if self._wide or self._working:
                return False
            self._wide = True
            return True

    def release_wide(self) -> None:
        """The wide decoding ended."""
        with self._lock:
            self._wide = False

    @contextmanager
    def working(self) -> Iterator[None]:
        """Around any other work: a decoding on one thread, or an encoding (whose threads a wide decoding
        would wait for)."""
        with self._lock:
            self._working += 1
        try:
            yield
        finally:
            with self._lock:
                self._working -= 1


PROCESS_OCCUPANCY = Occupancy()
"""The one :class:`Occupancy` of this process."""


@dataclass
class Contention:
    """How much this process's threads waited for a CPU over one stretch of work (:meth:`WideDecoding.watch`)."""

    wait_share: float | None = None
    """Run-queue wait per second of the stretch; ``None``: not measured (not Linux, or still running)."""


@dataclass
class WideDecoding(Generic[Model]):
    """Chooses, per decoding, between the decoder copy (:attr:`narrow`) and the encoder's model (:attr:`wide`);
    thread-safe."""

    narrow: Model
    """The decoder copy, on its own threads (one by default)."""
    wide: Model
    """The encoder's model, on :attr:`threads` threads."""
    threads: int
    """The encoder's thread count."""
    faster: bool = False
    """Whether the wide model decoded faster at start-up (:meth:`set_measured`); ``False``: never wide."""
    cores: int = field(default_factory=available_cores)
    """The cores this process may run on: a wide decoding needs :attr:`threads` of them free."""
    read: Callable[[], CpuReading | None] = read_proc
    """Where readings of the machine come from (``/proc``; scripted in tests)."""
    clock: Callable[[], float] = time.monotonic
    """The clock an encoding is timed by (scripted in tests)."""
    occupancy: Occupancy = PROCESS_OCCUPANCY
    """What else of this process is running."""
    widened: int = field(default=0, init=False)
    """Finals decoded wide."""

    def __post_init__(self) -> None:
        self.set_measured(MIN_SPEED_UP if self.faster else 1.0)

    def set_measured(self, speed_up: float) -> None:
        """Go wide from now on (when uncontended) if the start-up timing found the wide model ``speed_up`` times as
        fast, at least :data:`MIN_SPEED_UP`, the machine has the cores for it, and its run queues can be read
        (without them no encoding's wait is known, and nothing would ever go wide)."""
        self.faster = speed_up >= MIN_SPEED_UP and 1 < self.threads <= self.cores and self.read() is not None

    @contextmanager
    def watch(self, *, widens: bool = True) -> Iterator[Contention]:
        """Around the encoding before a decoding: how much it waited for a CPU, once the block is over. Not
        measured where the decoding cannot widen (``widens=False``: a partial), which keeps it on one thread."""
        contention = Contention()
        before, started = (self.read(), self.clock()) if widens and self.faster else (None, 0.0)
        yield contention
        after, ended = (self.read(), self.clock()) if before is not None else (None, 0.0)
        if before is not None and after is not None and ended > started:
            contention.wait_share = max(0.0, after.own_wait_s - before.own_wait_s) / (ended - started)

    @contextmanager
    def decoder(self, encoding: Contention | None) -> Iterator[Model]:
        """The model one decoding (with its word alignment) runs on, held for the block: wide if ``encoding``
        (its clip's, :meth:`watch`) was measured and hardly waited."""
        share = encoding.wait_share if encoding is not None else None
        if self.faster and share is not None and share <= WAIT_SHARE and self.occupancy.try_wide():
            self.widened += 1  # one wide decoding at a time: nobody else counts meanwhile
            try:
                yield self.wide
            finally:
                self.occupancy.release_wide()
            return
        with self.occupancy.working():
            yield self.narrow


def measure_speed_up(decode_narrow: Callable[[], object], decode_wide: Callable[[], object], *,
                     rounds: int = 3, clock: Callable[[], float] = time.perf_counter) -> float:
    """How many times faster ``decode_wide`` ran than ``decode_narrow``: the medians of ``rounds`` alternating
    calls of each (blocking; at start-up, once the models are warm)."""
    narrow: list[float] = []
    wide: list[float] = []
    for _ in range(max(1, rounds)):
        for run, times in ((decode_narrow, narrow), (decode_wide, wide)):
            started = clock()
            run()
            times.append(clock() - started)
    wide_s = statistics.median(wide)
    return statistics.median(narrow) / wide_s if wide_s > 0 else 1.0
