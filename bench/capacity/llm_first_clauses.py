"""First clauses of several sessions asking the embedded LLM at once, as the server asks it.

    python -m bench.capacity.llm_first_clauses                      # default model, 4 sessions, 8 rounds
    python -m bench.capacity.llm_first_clauses --sessions 2 --rounds 4

Each session is a conversation of its own (its fair-queue owner set as the server sets it), offered the
built-in tools with the default instructions, so prompts, prefix reuse and tool calls are the server's.
Every round, one session asks alone, then all of them ask at the same moment; per reply, the time until
its text holds a whole first clause (cut as the session's speech cuts it): what first audio waits for.
Round 0 evaluates every cold prompt and is left out of the summary. Prints each round, then the medians
of one alone and of the slowest of all, their ratio and the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from typing import Any

from bargein.engines.fair import current_owner
from bargein.engines.speak.clauses import FIRST_CLAUSE_WORDS, ClauseSplitter
from bargein.engines.think.llama_llm import DEFAULT_LLM, load_llama
from bargein.protocol.session_config import SessionConfig
from bargein.session.tool_use import tool_setup
from bargein.tools.registry import default_registry
from bargein.values import CancelToken, ChatMessage, GenerationOptions

QUESTIONS = ("Why did the family leave Norland Park?", "What is a good name for a dog?",
             "How do I make a cup of tea?", "What should I read next?", "Why is the sea salty?",
             "Who was Jane Austen?", "How tall is a giraffe?", "Tell me about English country houses.")


async def first_clause(llm: Any, owner: str, history: list[ChatMessage], question: str,
                       options: GenerationOptions) -> float:
    """Ask ``question`` as ``owner``; seconds until the reply's first clause is whole (or the reply ends)."""
    current_owner.set(owner)
    history.append(ChatMessage("user", question))
    started, first, text = time.perf_counter(), None, ""
    splitter = ClauseSplitter(first_max_words=FIRST_CLAUSE_WORDS)
    async for piece in llm.stream_reply(list(history), cancel=CancelToken(), options=options):
        if isinstance(piece, str):
            text += piece
            if first is None and splitter.feed(piece):
                first = time.perf_counter() - started
    history.append(ChatMessage("assistant", text or "Okay."))
    return first if first is not None else time.perf_counter() - started


async def ask_together(llm: Any, histories: list[list[ChatMessage]], offset: int,
                       options: GenerationOptions) -> list[float]:
    """Every session asks a different question at the same moment; their first clause times, sorted."""
    return sorted(await asyncio.gather(*(
        first_clause(llm, f"session-{index}", history, QUESTIONS[(offset + index) % len(QUESTIONS)], options)
        for index, history in enumerate(histories))))


def main() -> None:
    """Load the model and run the rounds."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=DEFAULT_LLM)
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=8, help="measured rounds (after one cold round)")
    args = parser.parse_args()
    config = SessionConfig()
    options = tool_setup(config, None, default_registry()).apply(GenerationOptions(max_tokens=40))
    llm = load_llama(args.model)
    histories = [[ChatMessage("system", config.instructions)] for _ in range(args.sessions)]
    alone: list[float] = []
    slowest: list[float] = []
    try:
        for round_ in range(args.rounds + 1):
            one = asyncio.run(ask_together(llm, histories[:1], round_ * args.sessions, options))
            together = asyncio.run(ask_together(llm, histories, round_ * args.sessions, options))
            print(f"round {round_}{' (cold)' if not round_ else ''}, load average {os.getloadavg()[0]:.1f}: "
                  f"alone {1000 * one[0]:.0f} ms; {args.sessions} at once "
                  + ", ".join(f"{1000 * value:.0f}" for value in together) + " ms", flush=True)
            if round_:
                alone.append(one[0])
                slowest.append(together[-1])
    finally:
        llm.close()
    print(f"first clause: alone median {1000 * statistics.median(alone):.0f} ms; slowest of {args.sessions} "
          f"median {1000 * statistics.median(slowest):.0f} ms "
          f"({statistics.median(slowest) / statistics.median(alone):.1f}x); "
          f"load average {' '.join(f'{value:.2f}' for value in os.getloadavg())}")


if __name__ == "__main__":
    main()
