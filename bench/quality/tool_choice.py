"""Score the embedded model with and without bargein's built-in tools.

    python -m bench.quality.tool_choice [--model NAME]

Two question sets, each question a fresh conversation with the default spoken-answer system prompt:
``bench/quality/tool_questions.py`` (time zones, clock, dates, arithmetic, units: scored against values
computed independently) and ``bench/harness/llm_questions.py`` (twenty everyday questions: counts how many
were wrongly turned into tool calls). With tools, the reply goes as a session's does: a call that rests on
the question's words is run by the built-in registry and the model is asked again with the result; one that
does not is dropped and the model answers without tools (the calls column lists the calls that were run).
Times are to the end of the final answer.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import statistics
import time
from dataclasses import dataclass

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bargein.engines.think.llama_llm import DEFAULT_LLM, LlamaLanguageModel, load_llama
from bargein.session.tool_use import reply_with_tools
from bargein.tools.registry import ToolOutcome, ToolRegistry, default_registry
from bargein.values import CancelToken, ChatMessage, GenerationOptions, ToolCall
from bench.harness.llm_questions import QUESTIONS
from bench.quality.tool_questions import TOOL_QUESTIONS, TUNING_QUESTIONS, ToolQuestion, is_correct


@dataclass(frozen=True)
class Answer:
    """A final spoken answer, the calls made on the way and the time it took."""

    text: str
    calls: list[str]
    seconds: float


async def answer(model: LlamaLanguageModel, registry: ToolRegistry | None, question: str,
                 max_tokens: int) -> Answer:
    """Ask once, as a session's reply does (:func:`~bargein.session.tool_use.reply_with_tools`): with a
    registry, a grounded call is run and the model asked again with its result, an ungrounded one is not
    run and the model answers without tools."""
    start = time.perf_counter()
    options = GenerationOptions(max_tokens=max_tokens,
                                tools=tuple(registry.definitions()) if registry else ())
    ran: list[str] = []

    def report(call: ToolCall, outcome: ToolOutcome) -> None:
        ran.append(f"{call.name}({call.arguments})" if not call.refused else f"refused: {call.refused}")

    pieces = [p async for p in reply_with_tools(model, [ChatMessage("user", question)], cancel=CancelToken(),
                                                options=options, server_side=registry, report=report)]
    text = "".join(p for p in pieces if isinstance(p, str))
    return Answer(" ".join(text.split()), ran, time.perf_counter() - start)


def cell(text: str) -> str:
    """Text fit for one markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


async def run(name: str, max_tokens: int, questions: tuple[ToolQuestion, ...], *, everyday: bool) -> None:
    """Print both tables and the summary."""
    model = await asyncio.to_thread(load_llama, name, seed=1)
    registry = default_registry()
    load_before = os.getloadavg()[0]
    try:
        print(f"### {name}: tool questions\n")
        print("| # | question | without tools | ok | with tools (calls) | ok |")
        print("|---|---|---|---|---|---|")
        scores = {False: 0, True: 0}
        times: dict[bool, list[float]] = {False: [], True: []}
        for i, question in enumerate(questions, start=1):
            row = [str(i), cell(question.text)]
            for with_tools in (False, True):
                result = await answer(model, registry if with_tools else None, question.text, max_tokens)
                ok = is_correct(result.text, question.accepted(dt.datetime.now(dt.UTC)))
                scores[with_tools] += ok
                times[with_tools].append(result.seconds)
                calls = f" ({cell('; '.join(result.calls))})" if result.calls else ""
                row += [cell(result.text) + calls, "yes" if ok else "no"]
            print("| " + " | ".join(row) + " |")
        print(f"\n### {name}: everyday questions with tools offered\n")
        print("| # | question | reply with tools (calls) |")
        print("|---|---|---|")
        spurious = 0
        for i, text in enumerate(QUESTIONS if everyday else (), start=1):
            result = await answer(model, registry, text, max_tokens)
            spurious += bool(result.calls)
            calls = f" ({cell('; '.join(result.calls))})" if result.calls else ""
            print(f"| {i} | {cell(text)} | {cell(result.text)}{calls} |")
        n = len(questions)
        print(f"\n1-minute load average before/after: {load_before:.1f} / {os.getloadavg()[0]:.1f} "
              f"on {os.cpu_count()} CPUs\n")
        print("| model | correct without tools | correct with tools | median s without | median s with "
              "| everyday questions turned into calls |")
        print("|---|---|---|---|---|---|")
        print(f"| {name} | {scores[False]}/{n} | {scores[True]}/{n} | {statistics.median(times[False]):.1f} "
              f"| {statistics.median(times[True]):.1f} | {spurious}/{len(QUESTIONS)} |")
    finally:
        await model.aclose()


def main() -> None:
    """Parse arguments and run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--model", default=DEFAULT_LLM)
    parser.add_argument("--max-tokens", type=int, default=80)
    parser.add_argument("--tuning", action="store_true",
                        help="ask the questions the prompts were tuned on instead of the held-out ones")
    args = parser.parse_args()
    asyncio.run(run(args.model, args.max_tokens, TUNING_QUESTIONS if args.tuning else TOOL_QUESTIONS,
                    everyday=not args.tuning))


if __name__ == "__main__":
    main()
