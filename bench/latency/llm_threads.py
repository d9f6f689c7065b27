"""The embedded LLM's thread count: the old fixed count (half the cores) against the governed one, idle and busy.

``python -m bench.latency.llm_threads [--model qwen2.5-coder-0.5b] [--rounds 2]`` asks eight short questions per round
(new each time, so the prompt's tail is evaluated as a turn's would be) and prints the median time to the first
piece and to the eighth token; the two counts alternate ``--repeat`` times, so that drift on a shared machine
falls on both. "busy" runs a process that keeps one core spinning beside the model, as a
recognition or a synthesis would: the governed count must then cost nothing against one thread. The model's
own counters say how many evaluations ran on every core and how often contention sent the count back down.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import statistics
import time

from bargein.engines.think.llama_llm import DEFAULT_LLM, LlamaLanguageModel, default_threads, load_llama
from bargein.values import CancelToken, ChatMessage, GenerationOptions

QUESTIONS = ("What is the capital of France?", "How do I boil an egg?", "Why is the sky blue?",
             "What should I cook tonight?", "Tell me a joke about cats.", "How far away is the moon?",
             "Is it going to rain tomorrow?", "What is a good name for a dog?")


def _spin() -> None:
    while True:
        pass


async def _measure(llm: LlamaLanguageModel, rounds: int) -> tuple[float, float]:
    options = GenerationOptions(max_tokens=8, temperature=0.0)
    first: list[float] = []
    eighth: list[float] = []
    for round_ in range(rounds):
        for question in QUESTIONS:
            start = time.perf_counter()
            pieces = 0
            async for _piece in llm.stream([ChatMessage(role="user", content=f"{question} ({round_})")],
                                           cancel=CancelToken(), options=options):
                pieces += 1
                if pieces == 1:
                    first.append(time.perf_counter() - start)
            eighth.append(time.perf_counter() - start)
    return statistics.median(first) * 1000, statistics.median(eighth) * 1000


def main() -> None:
    """Run the four cases and print their medians."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default=DEFAULT_LLM)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2, help="alternations of the two counts per machine state")
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores, 1-minute load average {os.getloadavg()[0]:.2f}")
    print(f"{'machine':8s} {'threads':10s} {'first piece':>12s} {'8 tokens':>10s}  evaluations on every core")
    for busy in (False, True):
        spinner = multiprocessing.Process(target=_spin, daemon=True) if busy else None
        if spinner is not None:
            spinner.start()
        try:
            for fixed in (default_threads(), None) * args.repeat:
                llm = load_llama(args.model, n_threads=fixed)
                first, eighth = asyncio.run(_measure(llm, args.rounds))
                governor = llm.threads
                print(f"{'busy' if busy else 'idle':8s} {str(fixed) if fixed else 'governed':10s} {first:10.0f} ms "
                      f"{eighth:7.0f} ms  {governor.raised} (lowered {governor.lowered} times)")
                llm.close()
        finally:
            if spinner is not None:
                spinner.terminate()
    print(f"1-minute load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
