"""The SQLite memory store: topics replace, scopes are apart, bounds forget the oldest, writes survive kill -9."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from bargein.memory.sqlite_store import SqliteMemoryStore
from bargein.memory.store import Bounds, bound_scope, key_scope


def _ticks() -> itertools.count[float]:
    return itertools.count(1_000_000.0)


async def test_a_topic_remembered_again_replaces_the_old_fact(tmp_path: Path) -> None:
    store = SqliteMemoryStore(str(tmp_path / "m.sqlite3"))
    await store.remember("a", "name", "The user's name is Ana.")
    await store.remember("a", "name", "The user's name is Anna.")
    assert [m.text for m in await store.entries("a")] == ["The user's name is Anna."]
    assert [m.text for m in await store.recall("a", "what is my name", 5)] == ["The user's name is Anna."]
    await store.close()


async def test_recall_ranks_the_matching_fact_first_and_never_crosses_scopes(tmp_path: Path) -> None:
    store = SqliteMemoryStore(str(tmp_path / "m.sqlite3"))
    await store.remember("a", "allergy", "The user is allergic to peanuts.")
    for index in range(30):
        await store.remember("a", f"note {index}", f"Filler fact number {index}.")
    await store.remember("b", "allergy", "The user is allergic to shellfish.")
    found = await store.recall("a", "am I allergic to anything", 3)
    assert found[0].text == "The user is allergic to peanuts."
    assert all("shellfish" not in m.text for m in await store.recall("a", "shellfish allergic", 50))
    assert await store.forget("a", matching="shellfish") == 0
    assert [m.text for m in await store.entries("b")] == ["The user is allergic to shellfish."]
    assert await store.clear("a") == 31
    assert len(await store.entries("b")) == 1
    await store.close()


async def test_bounds_forget_the_oldest_first(tmp_path: Path) -> None:
    ticks = _ticks()
    store = SqliteMemoryStore(str(tmp_path / "m.sqlite3"), Bounds(max_items=3, max_bytes=10_000),
                              clock=lambda: next(ticks))
    for index in range(5):
        await store.remember("a", f"t{index}", f"fact {index}")
    assert [m.text for m in await store.entries("a")] == ["fact 4", "fact 3", "fact 2"]
    small = SqliteMemoryStore(str(tmp_path / "s.sqlite3"), Bounds(max_items=100, max_bytes=60),
                              clock=lambda: next(ticks))
    for index in range(5):
        await small.remember("a", f"t{index}", f"a fact of twenty b {index}")  # 22 + 2 bytes each
    assert [m.text for m in await small.entries("a")] == ["a fact of twenty b 4", "a fact of twenty b 3"]
    await store.close()
    await small.close()


async def test_forget_by_topic_id_and_words(tmp_path: Path) -> None:
    store = SqliteMemoryStore(str(tmp_path / "m.sqlite3"))
    home = await store.remember("a", "home", "The user lives in Lisbon.")
    await store.remember("a", "job", "The user works as a nurse.")
    await store.remember("a", "units", "The user prefers metric units.")
    assert await store.forget("b", memory_id=home.id) == 0  # another scope cannot touch it
    assert await store.forget("a", memory_id=home.id) == 1
    assert await store.forget("a", topic="job") == 1
    assert await store.forget("a", matching="metric units") == 1
    assert await store.entries("a") == []
    await store.close()


async def test_two_stores_on_one_file_writing_at_once_lose_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "m.sqlite3")
    first, second = SqliteMemoryStore(path), SqliteMemoryStore(path)
    await asyncio.gather(*(store.remember("a", f"{name}{index}", f"fact {name} {index}")
                           for index in range(60) for name, store in (("x", first), ("y", second))))
    assert len(await first.entries("a")) == 120
    await first.close()
    await second.close()


def test_acknowledged_writes_survive_kill_9(tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite3"
    writer = textwrap.dedent(f"""
        import asyncio, sys
        from bargein.memory.sqlite_store import SqliteMemoryStore
        async def main():
            store = SqliteMemoryStore({str(path)!r})
            index = 0
            while True:
                await store.remember("a", f"t{{index}}", f"fact {{index}}")
                print(index, flush=True)  # acknowledged: committed before remember returned
                index += 1
        asyncio.run(main())
    """)
    process = subprocess.Popen([sys.executable, "-c", writer], stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert process.stdout is not None
    acknowledged = -1
    for line in process.stdout:
        acknowledged = int(line)
        if acknowledged >= 40:
            break
    process.send_signal(signal.SIGKILL)
    process.wait()
    store = SqliteMemoryStore(str(path))
    kept = {m.topic for m in asyncio.run(store.entries("a"))}
    assert {f"t{index}" for index in range(acknowledged + 1)} <= kept
    asyncio.run(store.close())


def test_scopes_are_digests_never_keys() -> None:
    assert "secret-key" not in key_scope("secret-key")
    assert key_scope("k1") != key_scope("k2")
    assert bound_scope("tenant-7") != key_scope("tenant-7")


async def test_a_word_many_of_the_scopes_memories_hold_ranks_nothing(tmp_path: Path) -> None:
    store = SqliteMemoryStore(str(tmp_path / "m.sqlite3"))
    for index in range(3):
        await store.remember("small", f"note {index}", f"The user once mentioned the garden (note {index}).")
    assert len(await store.recall("small", "the garden", 8, newest=0)) == 3  # a small scope keeps every word
    for index in range(100):
        await store.remember("big", f"note {index}", f"The user once mentioned the garden (note {index}).")
    await store.remember("big", "allergy", "The user is allergic to peanuts.")
    found = await store.recall("big", "peanuts in the garden", 8, newest=0)
    assert [memory.topic for memory in found] == ["allergy"]  # "garden" is in 100 of 101: it tells nothing
    assert await store.recall("big", "the garden", 8, newest=0) == []
    await store.close()
