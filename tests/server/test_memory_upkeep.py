"""Memory upkeep: glibc's ``malloc_trim``, the LLM's KV snapshots under their budget, closed sessions collected."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

_RSS = """
def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20
"""


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", _RSS + textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc")
def test_trimming_returns_freed_pages_that_a_live_chunk_above_them_pins() -> None:
    out = _run("""
        from bargein.memory_upkeep import trim_native_heap
        del_me = bytearray(8 * 2**20); del del_me  # glibc now serves chunks under 8 MB from its heap
        chunks = [bytearray(2**20) for _ in range(48)]
        pin = bytearray(2**20)  # allocated last: sits above the others, so free() cannot shrink the heap
        del chunks
        before = rss_mb()
        trim_native_heap()
        print(before - rss_mb())
    """)
    assert float(out) > 32, f"only {out.strip()} MB went back"


def test_kv_snapshots_evicted_past_their_budget_do_not_stay_resident() -> None:
    """Snapshots of growing conversations come and go under a 64 MB budget; the process stays near it."""
    out = _run("""
        import random
        import numpy as np
        from bargein.engines.think.llama_kv import KvSnapshot, KvSnapshots

        base = rss_mb()
        cache = KvSnapshots(64 * 2**20)
        rng = random.Random(0)
        lengths = {}
        peak = 0.0
        for _ in range(1500):
            conversation = rng.randrange(30)
            n = lengths.get(conversation, rng.randint(50, 150)) + rng.randint(10, 40)
            lengths[conversation] = n if n < 500 else rng.randint(50, 150)
            tokens = np.concatenate([[conversation], np.arange(lengths[conversation] - 1)]).astype(np.intc)
            cache.add(KvSnapshot(tokens, bytes(lengths[conversation] * 8 * 1024)))
            peak = max(peak, rss_mb() - base)
        print(peak, cache.nbytes / 2**20)
    """)
    peak, held = (float(x) for x in out.split())
    assert held <= 64
    assert peak < 64 * 1.35, f"{peak:.0f} MB resident for a 64 MB budget"


async def test_upkeep_frees_reference_cycles_the_collector_has_not_got_to() -> None:
    import asyncio
    import contextlib
    import gc
    import weakref

    from bargein.memory_upkeep import keep_memory_flat

    class Session:
        """Stands for a closed session: only a cycle keeps it."""

    gc.disable()  # the collector's own schedule must not be what frees it
    try:
        session = Session()
        session.self = session  # type: ignore[attr-defined]
        closed = weakref.ref(session)
        del session
        await asyncio.sleep(0.05)
        assert closed() is not None
        upkeep = asyncio.create_task(keep_memory_flat(every_s=0.01))
        for _ in range(100):
            await asyncio.sleep(0.01)
            if closed() is None:
                break
        upkeep.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await upkeep
    finally:
        gc.enable()
    assert closed() is None


async def test_the_reading_after_each_pass_starts_at_once_and_a_failing_one_does_not_stop_the_upkeep() -> None:
    import asyncio
    import contextlib

    from bargein.memory_upkeep import keep_memory_flat

    readings: list[int] = []

    def read() -> None:
        readings.append(len(readings))
        if len(readings) == 2:
            raise RuntimeError("a broken reading")

    upkeep = asyncio.create_task(keep_memory_flat(every_s=0.01, after_pass=read))
    await asyncio.sleep(0)
    assert readings == [0], "read before the first pass, so the gauge is never an empty 0"
    for _ in range(200):
        await asyncio.sleep(0.01)
        if len(readings) >= 4:
            break
    upkeep.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await upkeep
    assert len(readings) >= 4, "the upkeep went on after the failing reading"
