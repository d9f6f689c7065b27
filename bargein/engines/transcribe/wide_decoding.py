"""Whether a final transcript decodes on the encoder's threads, or on the decoder copy's one thread.

Whisper's decoder steps are small products, and whether a second thread speeds them up depends on the CPU: on
one machine tiny.en decoded a token in 5.0 ms on one thread and 6.6 ms on two, on another (an AMD EPYC without
AVX-512) the 21 tokens of a LibriVox sentence took 161 ms on one thread and 94 ms on two. So the choice is
measured once at start-up (:func:`measure_speed_up`), and a final takes the encoder's threads only where they
were faster by :data:`MIN_SPEED_UP`, only while no other thread wants a core (the speculative guess at a pause,
while the LLM waits for its words, is the case this is for: a second thread beside a busy core is slower than
one), and only while no other final holds them (:class:`WideDecoding`). Partials always stay on one thread: they
are not waited on.
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

Model = TypeVar("Model")


@dataclass
class WideDecoding(Generic[Model]):
    """Chooses, per final, between the decoder copy (``narrow``) and the encoder's model (``wide``, ``threads``
    threads); thread-safe."""

    narrow: Model
    wide: Model
    threads: int
    faster: bool
    """Whether the wide model decoded faster at start-up (:func:`measure_speed_up`); ``False``: never wide."""
    cores: int = field(default_factory=available_cores)
    read: Callable[[], CpuReading | None] = read_proc
    widened: int = field(default=0, init=False)
    """Finals decoded wide."""
    kept_narrow: int = field(default=0, init=False)
    """Finals that could have gone wide but found a core busy or the wide model taken."""
    _wide_free: threading.Lock = field(default_factory=threading.Lock, init=False)

    def __post_init__(self) -> None:
        if self.threads <= 1 or self.cores < self.threads:
            self.faster = False

    @contextmanager
    def decoder(self) -> Iterator[Model]:
        """The model one final decodes (and aligns its words) on, held for the block."""
        if not self.faster:
            yield self.narrow
            return
        if self._idle() and self._wide_free.acquire(blocking=False):
            try:
                self.widened += 1
                yield self.wide
            finally:
                self._wide_free.release()
            return
        self.kept_narrow += 1
        yield self.narrow

    def _idle(self) -> bool:
        reading = self.read()
        if reading is None:  # not Linux: nothing to decide with
            return False
        # the caller, and the encoder's threads that may still spin from the encoding just before
        own = min(reading.own_running, self.threads + 1)
        return reading.running - own <= self.cores - self.threads


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
