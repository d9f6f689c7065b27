"""What offering the built-in tools costs the embedded model in time to first token.

    python -m bench.latency.tool_prompt first          # a fresh model's first default-session turn, tools offered
    python -m bench.latency.tool_prompt first --prime  # the same after the server's start-up prefill
    python -m bench.latency.tool_prompt warm           # warm, ten everyday questions with and without the tools

Each ``first`` run is a new process (a fresh model, as a server just started). The start-up prefill is given
20 s before the turn, as an idle server would have. Times are to the first streamed piece.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bargein.engines.think.llama_llm import LlamaLanguageModel, load_llama
from bargein.protocol.session_config import SessionConfig
from bargein.session.tool_use import prime_default_prompt, tool_setup
from bargein.tools.registry import default_registry
from bargein.values import CancelToken, ChatMessage, GenerationOptions
from bench.harness.llm_questions import QUESTIONS


async def first_piece_s(model: LlamaLanguageModel, question: str, options: GenerationOptions) -> float:
    """Seconds to the first piece of a default session's first turn on ``question``."""
    start = time.perf_counter()
    messages = [ChatMessage("system", SessionConfig().instructions), ChatMessage("user", question)]
    async for _piece in model.stream_reply(messages, cancel=CancelToken(), options=options):
        break
    return time.perf_counter() - start


def main() -> None:
    """Run one measurement and print it with the load average."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("mode", choices=["first", "warm"])
    parser.add_argument("--prime", action="store_true")
    args = parser.parse_args()
    model = load_llama(seed=1)
    registry = default_registry()
    with_tools = tool_setup(SessionConfig(), None, registry).apply(GenerationOptions(max_tokens=8))
    without = GenerationOptions(max_tokens=8)
    if args.mode == "first":
        if args.prime:
            prime_default_prompt(model, registry)
            time.sleep(20)
        seconds = asyncio.run(first_piece_s(model, "Why is the sky blue?", with_tools))
        print(f"first turn, tools offered, {'primed' if args.prime else 'not primed'}: {seconds * 1000:.0f} ms "
              f"to the first piece (1-minute load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
    else:
        times: dict[bool, list[float]] = {False: [], True: []}
        for question in QUESTIONS[:10]:
            for tools in (False, True):
                times[tools].append(asyncio.run(first_piece_s(model, question, with_tools if tools else without)))
        for tools, values in times.items():
            print(f"{'with' if tools else 'without'} tools: median {statistics.median(values) * 1000:.0f} ms "
                  f"to the first piece over {len(values)} questions")
        print(f"1-minute load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    model.close()


if __name__ == "__main__":
    main()
