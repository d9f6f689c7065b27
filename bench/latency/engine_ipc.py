"""What running Whisper and Kokoro in supervised worker processes costs: first audio and memory.

    python -m bench.latency.engine_ipc [--rounds 20] [--no-real]

1. *Pure IPC*: the fake recogniser and synthesiser (no model work), in process and in a worker, so the
   difference is the pipe, pickling (a 2 s clip one way, a 2 s chunk the other) and thread hand-offs alone.
2. *Real models*: Whisper tiny.en on a 2 s spoken clip (time to the final transcript) and Kokoro on one
   clause (time to its first chunk, which is what first audio waits for), each loaded once in this
   process and once in a worker, alternated round by round so both see the same machine load.
3. *Memory*: each worker's resident and unique memory next to what loading the same engine in this
   process added to it (the worker's extra is an interpreter with numpy and bargein's imports).

Medians, with the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import psutil

from bargein.audio.resample import resample
from bargein.engines.base import SpeechRecognizer, SpeechSynthesizer
from bargein.engines.fakes import FakeRecognizer, FakeSynthesizer
from bargein.engines.process.wire import WorkerSpec
from bargein.engines.speak.tts_process import ProcessSynthesizer
from bargein.engines.transcribe.asr_process import ProcessRecognizer
from bargein.values import CancelToken
from bench.latency.llm_ipc import load_average

CLAUSE = "Sure, the capital of France is Paris."
MB = 1024 * 1024


async def first_chunk(tts: SpeechSynthesizer) -> float:
    """Seconds to the first chunk of :data:`CLAUSE` (the rest is drained, so the engine is idle after)."""
    start = time.perf_counter()
    first: float | None = None
    async for _ in tts.synthesize(CLAUSE, voice=None, cancel=CancelToken()):
        first = first or time.perf_counter()
    assert first is not None, "no audio"
    return first - start


def recognition(asr: SpeechRecognizer, clip: np.ndarray) -> Callable[[], Awaitable[float]]:
    """A timed final transcription of ``clip``."""
    async def timed() -> float:
        start = time.perf_counter()
        await asr.transcribe(clip, language="en")
        return time.perf_counter() - start
    return timed


async def alternate(local: Callable[[], Awaitable[float]], remote: Callable[[], Awaitable[float]],
                    rounds: int) -> tuple[float, float]:
    """Medians of ``rounds`` alternated timings, in process and in the worker."""
    times: dict[str, list[float]] = {"local": [], "remote": []}
    for index in range(rounds):
        order = [("local", local), ("remote", remote)] if index % 2 == 0 else [("remote", remote), ("local", local)]
        for name, timed in order:
            times[name].append(await timed())
    return statistics.median(times["local"]), statistics.median(times["remote"])


def line(what: str, local: float, remote: float) -> str:
    """One comparison, in ms."""
    return (f"  {what:<34} in-process {1000 * local:8.2f} ms   worker {1000 * remote:8.2f} ms"
            f"   extra {1000 * (remote - local):+7.2f} ms")


def rss_mb(pid: int) -> tuple[float, float]:
    """Resident and unique (not shared with any other process) memory of ``pid``, in MB."""
    info = psutil.Process(pid).memory_full_info()
    return info.rss / MB, info.uss / MB


async def pure_ipc(rounds: int) -> None:
    """The fakes in process and in workers."""
    clip = np.zeros(32_000, np.float32)
    fake_tts = {"ms_per_char": 50, "chunk_ms": 60_000}
    asr = ProcessRecognizer(WorkerSpec("bargein.engines.fakes:FakeRecognizer", {}))
    tts = ProcessSynthesizer(WorkerSpec("bargein.engines.fakes:FakeSynthesizer", fake_tts))
    try:
        print(f"pure IPC (fakes, no model work; {rounds} rounds, {load_average()})")
        local, remote = await alternate(recognition(FakeRecognizer(), clip), recognition(asr, clip), rounds)
        print(line("ASR, 2 s clip to transcript", local, remote))
        local_tts = FakeSynthesizer(**fake_tts)
        local, remote = await alternate(lambda: first_chunk(local_tts), lambda: first_chunk(tts), rounds)
        print(line("TTS, clause to first chunk (2 s)", local, remote))
    finally:
        asr.close()
        tts.close()


async def real_models(rounds: int) -> None:
    """Whisper tiny.en and Kokoro, in process and in workers; then memory."""
    from bargein.engines.speak.kokoro_tts import load_kokoro
    from bargein.engines.transcribe.whisper_asr import load_whisper

    me = os.getpid()
    before_rss, before_uss = rss_mb(me)
    asr = ProcessRecognizer(WorkerSpec("bargein.engines.transcribe.whisper_asr:load_whisper", {"name": "tiny.en"}))
    tts = ProcessSynthesizer(WorkerSpec("bargein.engines.speak.kokoro_tts:load_kokoro", {}))
    workers_rss, _ = rss_mb(me)
    local_asr = await asyncio.to_thread(load_whisper, "tiny.en")
    after_asr = rss_mb(me)
    local_tts = await asyncio.to_thread(load_kokoro)
    after_tts = rss_mb(me)
    try:
        speech = np.concatenate([c.audio async for c in local_tts.synthesize(CLAUSE, voice=None,
                                                                             cancel=CancelToken())])
        clip = resample(speech, local_tts.sample_rate, 16_000)
        print(f"real models ({rounds} rounds, {load_average()})")
        local, remote = await alternate(recognition(local_asr, clip), recognition(asr, clip), rounds)
        print(line(f"Whisper tiny.en, {len(clip) / 16_000:.1f} s clip", local, remote))
        local, remote = await alternate(lambda: first_chunk(local_tts), lambda: first_chunk(tts), rounds)
        print(line("Kokoro, clause to first chunk", local, remote))
        print(f"memory (MB; unique = not shared with another process; {load_average()})")
        print(f"  server process before any engine: rss {before_rss:7.1f}   unique {before_uss:7.1f}"
              f"   (after starting both workers: rss {workers_rss:7.1f})")
        for name, pid, grown in (("Whisper tiny.en", asr.pid, after_asr[0] - workers_rss),
                                 ("Kokoro", tts.pid, after_tts[0] - after_asr[0])):
            assert pid is not None
            rss, uss = rss_mb(pid)
            print(f"  {name:<16} worker: rss {rss:7.1f}   unique {uss:7.1f}   "
                  f"| loaded in process instead: +{grown:7.1f} rss   | worker's extra ~{uss - grown:+7.1f}")
    finally:
        asr.close()
        tts.close()
        await local_asr.aclose()
        await local_tts.aclose()


async def main_async(args: argparse.Namespace) -> None:
    """Run the measurements."""
    await pure_ipc(args.rounds)
    if not args.no_real:
        await real_models(args.rounds)


def main() -> None:
    """Entry point."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--no-real", action="store_true", help="only the pure IPC measurement")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
