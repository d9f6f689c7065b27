"""Memory upkeep: collect closed sessions' reference cycles, and hand freed native pages back to the OS.

Two things make a long-running server's resident memory creep up while nothing leaks:

- **Cycles wait for a full collection.** A closed session is a web of reference cycles (tasks, observers,
  callbacks) that only the cycle collector frees, and its objects, having lived through the session,
  sit in the oldest generation. The server freezes the models' objects out of the collector at start-up
  (``gc.freeze()``) and most allocations die by reference counting, so the collector's own heuristic
  starts a full pass only every several minutes; meanwhile every closed session stays in memory.
  :func:`keep_memory_flat` runs a full pass every :data:`COLLECT_EVERY_S` seconds (the frozen models are
  not traversed: milliseconds with dozens of sessions, timed by ``bargein_gc_pause_seconds``).
- **Freed pages stay mapped.** glibc keeps the pages of freed chunks inside its heaps for reuse and only
  gives back the top of a heap; chunks still live above a freed region pin it. ``malloc_trim(0)``
  releases every whole free page of every arena (``MADV_DONTNEED``); it follows each full pass, in a
  worker thread. Elsewhere than glibc it is a no-op.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import gc
import logging
import sys
from collections.abc import Callable

log = logging.getLogger(__name__)
COLLECT_EVERY_S = 15.0


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none (musl, macOS)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int
    return function  # type: ignore[no-any-return]


def trim_native_heap() -> bool:
    """Release the free pages of every malloc arena now; True if any memory went back."""
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False


async def keep_memory_flat(every_s: float = COLLECT_EVERY_S,
                           after_pass: Callable[[], None] | None = None) -> None:
    """Every ``every_s`` seconds a full collection, then a trim off the loop; until cancelled.

    ``after_pass`` runs after each pass: resident memory read then is the settled figure a leak raises,
    without the garbage and free pages that come and go between passes."""
    if _malloc_trim() is None:
        log.info("no malloc_trim in this C library: freed native memory is left to the allocator")
    _run_after(after_pass)  # a first reading, so the figure is never an empty 0 before the first pass
    while True:
        await asyncio.sleep(every_s)
        gc.collect()
        if _malloc_trim() is not None:
            await asyncio.to_thread(trim_native_heap)
        _run_after(after_pass)


def _run_after(after_pass: Callable[[], None] | None) -> None:
    if after_pass is None:
        return
    try:
        after_pass()
    except Exception:  # a reading that fails must not end the upkeep itself
        log.exception("the reading after a memory upkeep pass failed")
