"""Where memory's first-audio cost comes from, counted exactly and free of machine load: the prompt tokens the
embedded model must evaluate after the user stops speaking, per turn, with memory on and off.

A six-turn conversation over a scope of 1,000 memories (``bench/quality/memory_latency.py``'s fillers, which match
everyday words) is rendered with the default model's own tokenizer and chat template. For each turn it counts, as
the model's KV cache sees them: the tokens a prompt warmed from the partial transcript (the first half of the
user's words) must evaluate while the user still speaks, and the tokens the final prompt must evaluate after that
(the critical path). Three ways are compared: memory off; the notes after the user's message, recalled anew each
turn (how memory was first built); and the notes given once where they were recalled (how it is now).

    python -m bench.quality.memory_prompt_tokens
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from bargein.memory.recall import memory_context, note_tokens
from bargein.memory.session_memory import SessionMemory
from bargein.memory.sqlite_store import SqliteMemoryStore
from bargein.memory.store import LOCAL_SCOPE
from bargein.protocol.session_config import SessionConfig
from bargein.values import ChatMessage, GenerationOptions
from bench.quality.memory_latency import fill

TURNS = (
    ("I walked along the river this morning and the water was high.", "It must have been a lovely walk."),
    ("My old friend from the office called me about the garden.", "How nice that you two keep in touch."),
    ("We talked about music lessons and the market on Saturday.", "Saturday markets are great for that."),
    ("Then I went to the library to find a book about the coast.", "Did you find a good one?"),
    ("Yes, and I had a late breakfast by the old house.", "That sounds like a relaxed morning."),
    ("Tomorrow I want to take a long walk with a neighbour.", "Enjoy it, and take some water."),
)
Prompt = Callable[[list[ChatMessage]], list[ChatMessage]]


def _shared(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _old_placement(memory: SessionMemory) -> Prompt:
    """The notes recalled for this turn after the last user message (as memory was first built)."""
    def prompt(messages: list[ChatMessage]) -> list[ChatMessage]:
        last = max(i for i, m in enumerate(messages) if m.role == "user")
        changed = list(messages)
        changed[last] = replace(changed[last], content=memory_context(changed[last].content, memory.notes))
        return changed
    return prompt


async def _walk(render: Callable[[list[ChatMessage]], list[int]], tokenize: Callable[[str], list[int]],
                way: str, store_path: Path) -> list[tuple[int, int]]:
    """(warmed while speaking, evaluated after the user stops) per turn for one way of carrying the notes."""
    instructions = SessionConfig().instructions
    history: list[ChatMessage] = []
    memory = SessionMemory(SqliteMemoryStore(str(store_path)), LOCAL_SCOPE, lambda: list(history))
    prompt: Prompt = {"off": lambda m: m, "after": _old_placement(memory), "given": memory.prompt}[way]
    await memory.refresh()
    cached: list[int] = []
    counts: list[tuple[int, int]] = []
    for said, answer in TURNS:
        words = said.split()
        partial = " ".join(words[: len(words) // 2])
        warm = render(prompt([ChatMessage("system", instructions), *history, ChatMessage("user", partial)]))
        final = render(prompt([ChatMessage("system", instructions), *history, ChatMessage("user", said)]))
        warmed = len(warm) - _shared(warm, cached)
        after = len(final) - max(_shared(final, warm), _shared(final, cached))
        counts.append((warmed, after))
        cached = final + tokenize(answer)
        history += [ChatMessage("user", said), ChatMessage("assistant", answer)]
        memory.on_reply_closed("r", "completed", 0.0, 0.0)
        await memory.settled()
    await memory.store.close()
    return counts


async def _estimate(store_path: Path, tokenize: Callable[[str], list[int]]) -> None:
    """The token budget's estimate of the newest notes against the model's own count of their quoted lines."""
    store = SqliteMemoryStore(str(store_path))
    notes = await store.entries(LOCAL_SCOPE, limit=50)
    await store.close()
    estimated = sum(note_tokens(note) for note in notes)
    counted = sum(len(tokenize(json.dumps(line) + ", ")) for line in
                  (f"{dt.datetime.fromtimestamp(n.updated_at, dt.UTC):%Y-%m-%d}: {n.text}" for n in notes))
    print(f"token budget: {len(notes)} notes estimated at {estimated} tokens, the tokenizer counts {counted}")


def _model() -> Any:
    import llama_cpp

    from bargein.engines.think.llama_context import LlamaPrompt
    from bargein.engines.think.llama_llm import DEFAULT_LLM
    from bargein.engines.think.llm_models import resolve_gguf

    llama = llama_cpp.Llama(model_path=str(resolve_gguf(DEFAULT_LLM)), vocab_only=True, verbose=False)
    return llama, LlamaPrompt(llama, None, n_ctx=4096)


async def main() -> None:
    """Print each way's per-turn counts and medians."""
    llama, prompts = _model()

    def render(messages: list[ChatMessage]) -> list[int]:
        return prompts.render(messages, GenerationOptions())

    def tokenize(text: str) -> list[int]:
        return list(llama.tokenize(text.encode(), add_bos=False, special=False))

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "memory.sqlite3"
        await fill(path)
        await _estimate(path, tokenize)
        for way, title in (("off", "memory off"), ("after", "notes after the question, recalled anew each turn"),
                           ("given", "notes given once where recalled (now)")):
            counts = await _walk(render, tokenize, way, path)
            print(f"{title}: warmed while speaking {[w for w, _ in counts]}, evaluated after the user stops "
                  f"{[a for _, a in counts]}; p50 after {statistics.median(a for _, a in counts):.0f} tokens")


if __name__ == "__main__":
    asyncio.run(main())
