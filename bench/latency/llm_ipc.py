"""What running the LLM in a supervised worker process costs on first audio (the first token) and per token.

    python -m bench.latency.llm_ipc [--model smollm2-135m] [--rounds 20] [--no-real]

Two measurements, each alternating in-process and worker-process replies in one run (so both see the
same machine load), medians reported with the load average:

1. *Pure IPC*: the fake LLM (no model work at all), so the difference is the pipe, pickling and
   thread hand-offs alone.
2. *Real model*: the same GGUF loaded twice, once in this process and once in a worker; each round
   asks both the same fresh one-turn question.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bargein.engines.base import LanguageModel
from bargein.engines.fakes import FakeLanguageModel
from bargein.engines.think.llm_process import ProcessLanguageModel, WorkerSpec
from bargein.values import CancelToken, ChatMessage, GenerationOptions
from bench.harness.llm_questions import QUESTIONS


def load_average() -> str:
    """The 1/5/15-minute load average, for quoting beside every figure."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


async def timed(model: LanguageModel, messages: Sequence[ChatMessage], max_tokens: int) -> tuple[float, float]:
    """Seconds to the first piece, and seconds per piece after it."""
    start = time.perf_counter()
    first: float | None = None
    count = 0
    async for _ in model.stream(messages, cancel=CancelToken(), options=GenerationOptions(max_tokens=max_tokens)):
        count += 1
        if first is None:
            first = time.perf_counter()
    end = time.perf_counter()
    assert first is not None, "no token"
    return first - start, (end - first) / max(1, count - 1)


async def compare(local: LanguageModel, remote: LanguageModel, prompts: Sequence[list[ChatMessage]],
                  max_tokens: int) -> dict[str, list[float]]:
    """Alternate the two models over the prompts; first-token and per-token times of each."""
    times: dict[str, list[float]] = {"local_first": [], "remote_first": [], "local_token": [], "remote_token": []}
    for index, messages in enumerate(prompts):
        order = [("local", local), ("remote", remote)] if index % 2 == 0 else [("remote", remote), ("local", local)]
        for name, model in order:
            first, per_token = await timed(model, messages, max_tokens)
            times[f"{name}_first"].append(first)
            times[f"{name}_token"].append(per_token)
    return times


def report(title: str, times: dict[str, list[float]]) -> None:
    """Print medians and the worker's extra cost."""
    med = {key: statistics.median(values) for key, values in times.items()}
    print(f"{title} ({len(times['local_first'])} rounds, {load_average()})")
    print(f"  first token: in-process {1000 * med['local_first']:8.2f} ms   worker {1000 * med['remote_first']:8.2f} ms"
          f"   extra {1000 * (med['remote_first'] - med['local_first']):+7.2f} ms")
    print(f"  per token:   in-process {1000 * med['local_token']:8.3f} ms   worker {1000 * med['remote_token']:8.3f} ms"
          f"   extra {1000 * (med['remote_token'] - med['local_token']):+7.3f} ms")


async def main_async(args: argparse.Namespace) -> None:
    """Run both measurements."""
    fake_spec = WorkerSpec("bargein.engines.fakes:FakeLanguageModel", {"filler": "one two three four five six"})
    remote_fake = ProcessLanguageModel(fake_spec, name="fake")
    try:
        prompts = [[ChatMessage("user", f"question {i}")] for i in range(max(args.rounds, 50))]
        report("pure IPC (fake LLM, no model work)", await compare(
            FakeLanguageModel(filler="one two three four five six"), remote_fake, prompts, 64))
    finally:
        remote_fake.close()
    if args.no_real:
        return
    from bargein.engines.think.llama_llm import load_llama

    local = load_llama(args.model)
    remote = ProcessLanguageModel(WorkerSpec("bargein.engines.think.llama_llm:load_llama", {"name": args.model}),
                                  name=args.model)
    try:
        prompts = [[ChatMessage("user", QUESTIONS[i % len(QUESTIONS)])] for i in range(args.rounds)]
        report(f"real model ({args.model})", await compare(local, remote, prompts, args.max_tokens))
    finally:
        remote.close()
        local.close()


def main() -> None:
    """Entry point."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m", help="packaged GGUF name (default smollm2-135m)")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--no-real", action="store_true", help="only the pure IPC measurement")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
