"""The PostgreSQL memory store against a real, throwaway server (``tests/memory/conftest.py``'s ``database_url``:
Debian's ``postgresql`` on a unix socket in a temporary directory)."""

from __future__ import annotations

import asyncio

import pytest

from bargein.memory.store import Bounds

pytest.importorskip("psycopg", reason="psycopg 3 is missing (the memory-pg extra)")


async def test_remember_replace_rank_bound_and_isolate(database_url: str) -> None:
    from bargein.memory.pg_store import PostgresMemoryStore

    ticks = iter(range(1_000_000, 2_000_000))
    store = await PostgresMemoryStore.open(database_url, Bounds(max_items=20), clock=lambda: float(next(ticks)))
    await store.clear("a")
    await store.clear("b")
    await store.remember("a", "name", "The user's name is Ana.")
    await store.remember("a", "name", "The user's name is Anna.")
    await store.remember("a", "allergy", "The user is allergic to peanuts.")
    await store.remember("b", "allergy", "The user is allergic to shellfish.")
    for index in range(25):
        await store.remember("a", f"filler {index}", f"Filler fact number {index}.")
    texts = [m.text for m in await store.entries("a")]
    assert len(texts) == 20 and "The user's name is Anna." not in texts  # the oldest went first
    await store.remember("a", "allergy", "The user is allergic to peanuts and cashews.")
    assert (await store.recall("a", "am I allergic to anything?", 3))[0].text.startswith("The user is allergic")
    assert all("shellfish" not in m.text for m in await store.recall("a", "shellfish", 30))
    assert await store.forget("a", matching="shellfish") == 0
    assert await store.forget("a", matching="peanuts cashews") == 1
    assert [m.text for m in await store.entries("b")] == ["The user is allergic to shellfish."]
    await store.close()


async def test_concurrent_writers_lose_nothing(database_url: str) -> None:
    from bargein.memory.pg_store import PostgresMemoryStore

    first = await PostgresMemoryStore.open(database_url)
    second = await PostgresMemoryStore.open(database_url)
    await first.clear("c")
    await asyncio.gather(*(store.remember("c", f"{name}{index}", f"fact {name} {index}")
                           for index in range(50) for name, store in (("x", first), ("y", second))))
    assert len(await second.entries("c")) == 100
    await first.close()
    await second.close()


async def test_a_word_many_of_the_scopes_memories_hold_ranks_nothing(database_url: str) -> None:
    from bargein.memory.pg_store import PostgresMemoryStore

    store = await PostgresMemoryStore.open(database_url)
    await store.clear("common")
    for index in range(100):
        await store.remember("common", f"note {index}", f"The user once mentioned the garden (note {index}).")
    await store.remember("common", "allergy", "The user is allergic to peanuts.")
    found = await store.recall("common", "peanuts in the garden", 8, newest=0)
    assert [memory.topic for memory in found] == ["allergy"]
    assert await store.recall("common", "the garden", 8, newest=0) == []
    await store.close()
