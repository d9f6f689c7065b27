"""Ask every packaged language model the twenty everyday questions and print the replies as markdown.

    python -m bench.quality.llm_choice [MODEL ...] > replies.md

Each question is a fresh conversation (a new session's first turn) with the default spoken-answer
system prompt, default temperature and a fixed seed. Timings are warm: the model is loaded and
warmed first, as :func:`bargein.engines.think.llama_llm.load_llama` leaves it for a server.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics

from bargein.engines.think.llama_llm import load_llama
from bargein.engines.think.llm_models import standard_models
from bargein.values import GenerationOptions
from bench.harness.llm_questions import QUESTIONS
from bench.harness.llm_replies import Reply, timed_reply, user

os.environ.setdefault("HF_HUB_OFFLINE", "1")


async def ask_all(name: str, max_tokens: int) -> list[Reply]:
    """The model's replies to every question, in order."""
    model = await asyncio.to_thread(load_llama, name, seed=1)
    options = GenerationOptions(max_tokens=max_tokens)
    try:
        return [await timed_reply(model, [user(q)], options) for q in QUESTIONS]
    finally:
        await model.aclose()


def cell(text: str) -> str:
    """Text fit for one markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def main() -> None:
    """Run the models and print one table per model plus a summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("models", nargs="*", default=standard_models(),
                        help="default: every packaged model that is not opt-in")
    parser.add_argument("--max-tokens", type=int, default=80)
    args = parser.parse_args()
    summary: list[str] = []
    for name in args.models:
        load_before = os.getloadavg()[0]
        replies = asyncio.run(ask_all(name, args.max_tokens))
        print(f"\n### {name}\n")
        print(f"1-minute load average before/after: {load_before:.1f} / {os.getloadavg()[0]:.1f} "
              f"on {os.cpu_count()} CPUs\n")
        print("| # | question | reply | TTFT ms | tokens | tok/s |")
        print("|---|---|---|---|---|---|")
        for i, (question, reply) in enumerate(zip(QUESTIONS, replies, strict=True), start=1):
            cut = f" [cut at {args.max_tokens} tokens]" if reply.tokens >= args.max_tokens else ""
            print(f"| {i} | {cell(question)} | {cell(reply.text)}{cut} | {reply.ttft_s * 1000:.0f} "
                  f"| {reply.tokens} | {reply.decode_tps:.1f} |")
        ttfts = [r.ttft_s * 1000 for r in replies]
        summary.append(
            f"| {name} | {statistics.median(ttfts):.0f} | {max(ttfts):.0f} "
            f"| {statistics.median(r.decode_tps for r in replies):.1f} "
            f"| {statistics.mean(r.tokens for r in replies):.0f} "
            f"| {sum(r.tokens >= args.max_tokens for r in replies)} |")
    print("\n| model | TTFT median ms | TTFT max ms | decode tok/s (median) | mean reply tokens | cut |")
    print("|---|---|---|---|---|---|")
    print("\n".join(summary))


if __name__ == "__main__":
    main()
