"""Fitting a long history into the embedded model's context: re-rendering per dropped message vs cached counts.

    python -m bench.latency.prompt_fit                 # the default model, 100 / 200 / 400 items of 500 characters

The histories fit into the default model's 4,096-token context, 256 tokens left for the reply.
Before issue 12 the LLM worker dropped the oldest message and re-rendered and re-tokenised the whole
history, once per dropped message (quadratic); now each message's token count is computed once and
cached, and the history is rendered once or twice. Both run here on the same model and histories, in
turn, and the time each takes is printed (median of ``--repeats``), with the load average. The second
turn of a conversation (the history again plus one message) shows the cache at work.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable, Sequence

from bargein.engines.think.llama_context import LlamaPrompt
from bargein.engines.think.llm_models import resolve_gguf
from bargein.engines.think.llm_prompt import with_system_prompt
from bargein.values import ChatMessage, GenerationOptions

OPTIONS = GenerationOptions(max_tokens=256)


def history(items: int) -> list[ChatMessage]:
    """``items`` alternating messages of 500 characters, then a question."""
    messages = [ChatMessage("user" if i % 2 == 0 else "assistant", f"{i} " + "lorem ipsum dolor sit amet " * 18)
                for i in range(items)]
    return [*messages, ChatMessage("user", "What did we talk about?")]


def per_drop(prompt: LlamaPrompt, messages: Sequence[ChatMessage], max_tokens: int) -> list[int]:
    """The old way: drop one message, render everything again, until it fits."""
    kept = with_system_prompt(messages, prompt.system_prompt)
    budget = int(prompt.llama.n_ctx()) - max_tokens
    tokens = prompt.render(kept, OPTIONS)
    while len(tokens) > budget:
        droppable = [i for i, m in enumerate(kept[:-1]) if m.role != "system"]
        if not droppable:
            break
        del kept[droppable[0]]
        tokens = prompt.render(kept, OPTIONS)
    return tokens


def timed(run: Callable[[], list[int]], repeats: int) -> tuple[float, int]:
    """Median seconds of ``repeats`` runs, and the prompt length."""
    times, length = [], 0
    for _ in range(repeats):
        began = time.perf_counter()
        length = len(run())
        times.append(time.perf_counter() - began)
    return statistics.median(times), length


def row(llama: object, size: int, repeats: int) -> str:
    """One line of the table: the old way, the new way cold, the new way on the next turn."""
    messages = history(size)
    old, old_len = timed(lambda: per_drop(LlamaPrompt(llama, None), messages, 256), 1 if size > 200 else repeats)
    fresh, new_len = timed(lambda: LlamaPrompt(llama, None).fit(messages, OPTIONS), repeats)
    warm_prompt = LlamaPrompt(llama, None)
    warm_prompt.fit(messages, OPTIONS)
    follow = [*messages, ChatMessage("assistant", "We talked about lorem ipsum."), ChatMessage("user", "And?")]
    warm, _ = timed(lambda: warm_prompt.fit(follow, OPTIONS), repeats)
    return f"{size:5d} {old:10.2f} {fresh:13.3f} {warm:19.3f} {new_len:7d} (old {old_len})"


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--sizes", default="100,200,400")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import llama_cpp

    llama = llama_cpp.Llama(model_path=str(resolve_gguf(args.model)), n_ctx=4096, vocab_only=False, verbose=False)
    print(f"model {args.model}, n_ctx 4096, reply budget 256; load average {os.getloadavg()[0]:.2f}")
    print(f"{'items':>5s} {'per drop s':>10s} {'cached, 1st s':>13s} {'cached, next turn s':>19s} {'tokens':>7s}")
    for size in (int(s) for s in args.sizes.split(",")):
        print(row(llama, size, args.repeats), flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
