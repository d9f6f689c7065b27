"""Several sessions' first clauses synthesised at the same moment: Kokoro with one worker thread or more.

    python -m bench.capacity.tts_concurrency                  # 4 clauses at once, 1 then 2 workers
    python -m bench.capacity.tts_concurrency --sessions 4 --workers 1 2 --rounds 5

Four talkers' replies reach the speech engine together when they asked together; with one worker
thread the fourth first clause waits for three others. For each worker count, after a warm-up: the time
from the call to the first chunk of one clause alone, then of ``--sessions`` clauses started together
(median over ``--rounds`` rounds of the slowest and of all), with the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bargein.engines.base import SpeechSynthesizer
from bargein.values import CancelToken

CLAUSES = ("The capital of France is Paris.", "To boil an egg, put it in boiling water.",
           "Cats sleep for most of the day.", "The sky looks blue because air scatters blue light.",
           "The moon is about four hundred thousand kilometres away.", "How about a simple pasta tonight?")


async def first_chunk(tts: SpeechSynthesizer, text: str, started: float) -> float:
    """Seconds from ``started`` to the first chunk of ``text``."""
    async for _chunk in tts.synthesize(text, voice=None, cancel=CancelToken()):
        return time.perf_counter() - started
    return time.perf_counter() - started


async def measure(tts: SpeechSynthesizer, sessions: int, rounds: int) -> tuple[float, float, float]:
    """Alone, then the slowest and the median of ``sessions`` together (medians over rounds)."""
    alone = statistics.median([await first_chunk(tts, CLAUSES[i % len(CLAUSES)], time.perf_counter())
                               for i in range(rounds)])
    slowest, typical = [], []
    for index in range(rounds):
        started = time.perf_counter()
        times = await asyncio.gather(*(first_chunk(tts, CLAUSES[(index + i) % len(CLAUSES)], started)
                                       for i in range(sessions)))
        slowest.append(max(times))
        typical.append(statistics.median(times))
    return alone, statistics.median(slowest), statistics.median(typical)


def main() -> None:
    """Each worker count in turn, one synthesiser each."""
    from bargein.engines.speak.kokoro_tts import load_kokoro

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    for workers in args.workers:
        tts = load_kokoro(workers=workers)
        alone, slowest, typical = asyncio.run(measure(tts, args.sessions, args.rounds))
        asyncio.run(tts.aclose())
        print(f"kokoro, {workers} worker thread(s): first chunk alone {1000 * alone:5.0f} ms; {args.sessions} at once: "
              f"median {1000 * typical:5.0f} ms, slowest {1000 * slowest:5.0f} ms ({slowest / alone:.1f}x alone); "
              f"load average {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
