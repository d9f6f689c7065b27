"""The SQLite store's relevance floor counts every query word in one statement, with the full-text match as the
outer loop, and keeps exactly the words the old one-count-per-word method kept."""

from __future__ import annotations

import itertools
import random
import sqlite3
from pathlib import Path

from bargein.memory.sqlite_store import SqliteMemoryStore
from bargein.memory.store import search_terms, telling_terms

_VOCABULARY = ("garden", "river", "coast", "piano", "café", "cafe", "naïve", "sister", "peanuts", "office",
               "market", "library", "walk", "breakfast", "neighbour", "music", "house", "friend", "trip", "dog",
               "rain", "book", "snake_case", "o'clock", "x1", "2024", "Zürich", "zurich", "tea", "bread")


def _reference_telling(db: sqlite3.Connection, scope: str, terms: list[str]) -> list[str]:
    """The relevance floor as it was counted before: one ``count(*)`` a word, the join left to the planner."""
    if not terms:
        return terms
    total = int(db.execute("SELECT count(*) FROM memories WHERE scope = ?", (scope,)).fetchone()[0])
    holding = [int(db.execute("SELECT count(*) FROM memories_fts f JOIN memories m ON m.id = f.rowid "
                              "WHERE memories_fts MATCH ? AND m.scope = ?", (f'"{term}"', scope)).fetchone()[0])
               for term in terms]
    return telling_terms(terms, holding, total)


def _sentence(chance: random.Random) -> str:
    # skewed choice: the first words are in many memories (past the floor), the last in few
    words = chance.choices(_VOCABULARY, weights=[1.0 / (rank + 1) for rank in range(len(_VOCABULARY))],
                           k=chance.randint(2, 7))
    return "The user said " + " ".join(words) + "."


class _PerWordStore(SqliteMemoryStore):
    """The store with the relevance floor counted the old way."""

    def _telling(self, scope: str, terms: list[str]) -> list[str]:
        return _reference_telling(self._db, scope, terms)


async def _fill(store: SqliteMemoryStore, chance: random.Random) -> None:
    for _ in range(chance.randint(150, 400)):
        await store.remember(chance.choice(("a", "b")), f"note {chance.randint(0, 300)}", _sentence(chance))


async def test_the_words_kept_and_the_memories_recalled_match_the_per_word_counts(tmp_path: Path) -> None:
    for seed in range(3):
        chance = random.Random(seed)
        store = SqliteMemoryStore(str(tmp_path / f"{seed}.sqlite3"), clock=itertools.count(1_000_000.0).__next__)
        await _fill(store, chance)
        reference = _PerWordStore(str(tmp_path / f"{seed}.sqlite3"))  # the same file
        kept_some = dropped_some = False
        for _ in range(60):
            scope, terms = chance.choice(("a", "b", "c")), search_terms(_sentence(chance) + " anything else")
            expected = _reference_telling(store._db, scope, terms)
            assert store._telling(scope, terms) == expected
            kept_some, dropped_some = kept_some or bool(expected), dropped_some or len(expected) < len(terms)
            query = " ".join(terms)
            assert await store.recall(scope, query, 8, newest=3) == await reference.recall(scope, query, 8, newest=3)
        assert kept_some and dropped_some  # the floor was crossed both ways
        await store.close()
        await reference.close()


async def _statements_of_recall(store: SqliteMemoryStore, query: str) -> tuple[int, int]:
    """Top-level statements and all statements (FTS5's own reads of its index included) one recall runs."""
    traced: list[str] = []
    store._db.set_trace_callback(traced.append)
    await store.recall("a", query, 1000, newest=0)  # more than the scope holds: the top-up runs too
    store._db.set_trace_callback(None)
    return sum(not sql.startswith("--") for sql in traced), len(traced)


async def test_a_recall_runs_as_many_statements_for_twenty_words_as_for_one(tmp_path: Path) -> None:
    store = SqliteMemoryStore(str(tmp_path / "m.sqlite3"))
    for index in range(50):
        await store.remember("a", f"note {index}", f"The user mentioned {_VOCABULARY[index % 20]} once.")
    one, _ = await _statements_of_recall(store, "garden")
    twenty, _ = await _statements_of_recall(store, " ".join(_VOCABULARY[:20]))
    assert one == twenty == 3  # the floor's counts, the ranked matches, the newest (none asked)
    await store.close()


async def test_counting_a_rare_word_does_not_run_the_match_once_a_memory(tmp_path: Path) -> None:
    store = SqliteMemoryStore(str(tmp_path / "m.sqlite3"))
    for index in range(400):
        await store.remember("a", f"note {index}", f"The user mentioned the garden (note {index}).")
    await store.remember("a", "allergy", "The user is allergic to peanuts.")
    _, statements = await _statements_of_recall(store, "peanuts")
    # the planner's own choice walked the scope's 401 memories and read the index for each (thousands)
    assert statements < 100
    assert [m.topic for m in await store.recall("a", "peanuts", 8, newest=0)] == ["allergy"]
    await store.close()
