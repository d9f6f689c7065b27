"""Print the embedded language models' warm time to first token and decode speed.

    python -m bench.latency.llm_speed [MODEL ...]      (default: the packaged models that are not opt-in)

For each model: loads and warms it, asks a few one-turn questions (time to the first token and to the first
clause the reply pipeline would hand to the TTS; each a fresh conversation, as a
new session would), then a two-turn conversation twice: once with the first turn's KV cache reused,
once after another conversation evicted it and the snapshots were dropped (only the shared system
prompt is reused then). Times are measured on the event loop, through the streaming API a session uses.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bargein.engines.think.llama_llm import load_llama
from bargein.engines.think.llm_models import standard_models
from bargein.values import ChatMessage, GenerationOptions
from bench.harness.llm_questions import QUESTIONS
from bench.harness.llm_replies import timed_reply, user


async def measure(name: str, rounds: int) -> None:
    """Print the figures of one model."""
    started = time.perf_counter()
    model = await asyncio.to_thread(load_llama, name, seed=1)
    print(f"\n== {name}: loaded and warmed in {time.perf_counter() - started:.1f} s "
          f"(1-minute load average {os.getloadavg()[0]:.1f})")
    replies = [await timed_reply(model, [user(q)]) for q in QUESTIONS[:rounds]]
    ttfts = [r.ttft_s * 1000 for r in replies]
    clauses = [r.first_clause_s * 1000 for r in replies]
    print(f"one-turn warm TTFT over {rounds}: median {statistics.median(ttfts):.0f} ms, "
          f"max {max(ttfts):.0f} ms; first clause median {statistics.median(clauses):.0f} ms, "
          f"max {max(clauses):.0f} ms; decode median {statistics.median(r.decode_tps for r in replies):.1f} tok/s")

    first_q, second_q = "What's a good name for a goldfish?", "Why would that suit it?"
    turn1 = await timed_reply(model, [user(first_q)], GenerationOptions(max_tokens=40))
    history = [user(first_q), ChatMessage(role="assistant", content=turn1.text), user(second_q)]
    reused = await timed_reply(model, history, GenerationOptions(max_tokens=8))
    # Evict the conversation: another one takes the context, then the saved snapshots are dropped.
    await timed_reply(model, [user("Tell me something about volcanoes.")], GenerationOptions(max_tokens=40))
    model.snapshots.clear()
    cold = await timed_reply(model, history, GenerationOptions(max_tokens=8))
    print(f"turn 2 TTFT with prefix reuse: {reused.ttft_s * 1000:.0f} ms "
          f"({reused.reused_tokens}/{reused.prompt_tokens} prompt tokens reused); "
          f"without: {cold.ttft_s * 1000:.0f} ms ({cold.reused_tokens}/{cold.prompt_tokens} reused)")
    await model.aclose()


def main() -> None:
    """Parse arguments and measure each model."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("models", nargs="*", help="default: every packaged model that is not opt-in",
                        default=standard_models())
    parser.add_argument("--rounds", type=int, default=8, help="one-turn questions per model")
    args = parser.parse_args()
    print(f"CPU threads: {os.cpu_count()}")
    for name in args.models:
        asyncio.run(measure(name, args.rounds))


if __name__ == "__main__":
    main()
