"""A child process for the durability test: two writers of one scope remember facts as fast as the store takes
them, and each acknowledged write is printed (``writer index``) only once ``remember`` has returned.

    python -m tests.memory.durability_writer sqlite PATH
    python -m tests.memory.durability_writer postgres URL
"""

from __future__ import annotations

import asyncio
import sys

from bargein.memory.store import Bounds, MemoryStore

SCOPE = "durable"
BOUNDS = Bounds(max_items=1_000_000, max_bytes=1 << 30)


def fact(writer: int, index: int) -> tuple[str, str]:
    """The topic and text of writer ``writer``'s ``index``-th fact (the test checks them back)."""
    return f"fact {writer} {index}", f"Writer {writer} told fact number {index}."


async def _open(kind: str, where: str) -> MemoryStore:
    if kind == "sqlite":
        from bargein.memory.sqlite_store import SqliteMemoryStore

        return SqliteMemoryStore(where, BOUNDS)
    from bargein.memory.pg_store import PostgresMemoryStore

    return await PostgresMemoryStore.open(where, BOUNDS)


async def _write(store: MemoryStore, writer: int) -> None:
    index = 0
    while True:
        topic, text = fact(writer, index)
        await store.remember(SCOPE, topic, text)
        sys.stdout.write(f"{writer} {index}\n")
        sys.stdout.flush()
        index += 1


async def main(kind: str, where: str) -> None:
    """Write until killed."""
    store = await _open(kind, where)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    await asyncio.gather(_write(store, 0), _write(store, 1))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
