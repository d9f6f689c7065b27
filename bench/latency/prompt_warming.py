"""What prompt warming buys: the LLM's first token with and without the prompt of a partial transcript evaluated ahead.

    python -m bench.latency.prompt_warming [--rounds 2]

The default LLM in its worker process, warmed as the server warms it at start-up, with the default session's
instructions and built-in tools and a one-exchange history. For four LibriVox sentences (the clips of
``bench/latency/first_audio.py``), each round times the reply's first piece for the whole sentence twice: "cold"
(the history was evaluated just before, with another user message after it; the sentence was not) and
"warm" (the same, then a partial transcript of the sentence's first words handed to ``prefill`` a second
earlier, as a session does while the user speaks). Each measurement has a history of its own, so the
engine holds no cached state of the whole prompt.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bargein.config import Settings
from bargein.engines.base import Engines, LanguageModel
from bargein.engines.loaders import load_llm
from bargein.engines.think.tool_calls import reply_pieces
from bargein.protocol.session_config import SessionConfig
from bargein.server.warm_up import warm_first_turn
from bargein.session.reply_pipeline import generation_options
from bargein.session.tool_use import tool_setup
from bargein.tools.registry import default_registry
from bargein.values import CancelToken, ChatMessage, GenerationOptions

SENTENCES = [
    ("He was not an ill", "He was not an ill-disposed young man."),
    ("He might even have been", "He might even have been made amiable himself."),
    ("Had he married a more amiable woman, he might have",
     "Had he married a more amiable woman, he might have been made still more respectable than he was."),
    ("And Mr. John Dashwood had then leisure to consider how much",
     "And Mr. John Dashwood had then leisure to consider how much there might be prudently in his power to do "
     "for them."),
]
"""(what a partial transcript heard a second before the end, the whole sentence)."""
ELSEWHERE = "Something else entirely different."


async def first_piece_s(llm: LanguageModel, messages: list[ChatMessage], options: GenerationOptions) -> float:
    """Seconds to the reply's first piece (text or tool call)."""
    started = time.perf_counter()
    async for _piece in reply_pieces(llm, messages, cancel=CancelToken(), options=options):
        break
    return time.perf_counter() - started


async def run(rounds: int) -> None:
    """Time every sentence cold and warm, ``rounds`` times, and print the medians."""
    llm, what = load_llm(Settings(engines="default"), worker_process=True)
    print(f"llm: {what}; load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    config, registry = SessionConfig(), default_registry()
    await warm_first_turn(Engines(None, None, llm, None, None), registry)  # type: ignore[arg-type]
    options = generation_options(None, tool_setup(config, None, registry), config.truncation_options())
    def history(tag: str) -> list[ChatMessage]:
        # a history no earlier prompt had, so no cached state of the whole prompt exists (the engine keeps
        # snapshots of prompts it evaluated): only the prefill, if any, can help
        return [ChatMessage("system", config.instructions), ChatMessage("user", f"Hello there, {tag}."),
                ChatMessage("assistant", "Hello! How can I help you today?")]

    cold: list[float] = []
    warm: list[float] = []
    prefill = llm.prefill  # type: ignore[attr-defined]  # the embedded engine has it
    for round_index in range(rounds):
        for index, (partial, whole) in enumerate(SENTENCES):
            await first_piece_s(llm, [*history(f"cold {round_index} {index}"), ChatMessage("user", ELSEWHERE)],
                                options)
            cold.append(await first_piece_s(
                llm, [*history(f"cold {round_index} {index}"), ChatMessage("user", whole)], options))
            await first_piece_s(llm, [*history(f"warm {round_index} {index}"), ChatMessage("user", ELSEWHERE)],
                                options)
            prefill([*history(f"warm {round_index} {index}"), ChatMessage("user", partial)], options)
            await asyncio.sleep(1.0)
            warm.append(await first_piece_s(
                llm, [*history(f"warm {round_index} {index}"), ChatMessage("user", whole)], options))
            print(f"{len(whole):3d} chars: cold {1000 * cold[-1]:5.0f} ms, warmed {1000 * warm[-1]:5.0f} ms")
    print(f"median first piece: cold {1000 * statistics.median(cold):.0f} ms, warmed from the partial "
          f"{1000 * statistics.median(warm):.0f} ms ({len(cold)} each); load average "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}")


def main() -> None:
    """Parse the options and run."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    asyncio.run(run(parser.parse_args().rounds))


if __name__ == "__main__":
    main()
