"""Several sessions asking the embedded LLM at the same moment: one sequence at a time against batched.

    python -m bench.capacity.llm_concurrency                         # the default model, 4 questions at once
    python -m bench.capacity.llm_concurrency --model smollm2-135m --sessions 4 --tokens 40

For each engine (``llama_llm``: one reply at a time, interleaved 16 tokens per turn; ``llama_batched``:
up to N replies in one llama.cpp batch per step, the system prompt's KV shared), after one warm-up
question: the time to the first token and to the end of one question alone, then of N questions asked
together (greedy decoding, ``--tokens`` at most). Time to first token is what first audio waits for.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from typing import Any

from bargein.engines.think.llama_batched import load_batched_llama
from bargein.engines.think.llama_llm import DEFAULT_LLM, load_llama
from bargein.values import CancelToken, ChatMessage, GenerationOptions

QUESTIONS = ("What is the capital of France?", "How do I boil an egg?", "Tell me a fun fact about cats.",
             "Why is the sky blue?", "How far away is the moon?", "What should I cook tonight?",
             "Name three rivers in Europe.", "How do plants make food?")


async def ask(llm: Any, question: str, started: float, tokens: int) -> tuple[float, float]:
    """Seconds from ``started`` to the first token and to the end of the reply."""
    first = None
    async for _piece in llm.stream([ChatMessage("user", question)], cancel=CancelToken(),
                                   options=GenerationOptions(tokens, 0.0)):
        if first is None:
            first = time.perf_counter() - started
    end = time.perf_counter() - started
    return (first if first is not None else end), end


async def measure(label: str, llm: Any, sessions: int, tokens: int) -> None:
    """One question alone, then ``sessions`` together."""
    await ask(llm, "Hi!", time.perf_counter(), 4)
    alone = await ask(llm, QUESTIONS[0], time.perf_counter(), tokens)
    started = time.perf_counter()
    together = await asyncio.gather(*(ask(llm, QUESTIONS[i % len(QUESTIONS)], started, tokens)
                                      for i in range(sessions)))
    firsts = sorted(first for first, _end in together)
    print(f"{label:34s} alone: first token {alone[0]:5.2f} s, done {alone[1]:5.2f} s | {sessions} at once: first "
          f"tokens {' '.join(f'{f:.2f}' for f in firsts)} s (slowest {firsts[-1] / alone[0]:.1f}x alone), "
          f"all done {max(end for _f, end in together):.2f} s", flush=True)


async def main_async(args: argparse.Namespace) -> None:
    """Both engines, one after the other."""
    print(f"model {args.model}; load average {os.getloadavg()[0]:.1f}")
    single = load_llama(args.model)
    await measure("one sequence at a time (llama_llm)", single, args.sessions, args.tokens)
    single.close()
    batched = load_batched_llama(args.model, n_seq=args.sessions)
    await measure(f"{args.sessions} sequences batched", batched, args.sessions, args.tokens)
    await batched.aclose()
    print(f"load average {os.getloadavg()[0]:.1f}")


def main() -> None:
    """Parse flags and run."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=DEFAULT_LLM)
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=40)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
