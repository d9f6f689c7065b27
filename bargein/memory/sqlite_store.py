"""The embedded memory store: one SQLite file (WAL, full-text search with FTS5) in the server's data directory.

Every call runs in a worker thread (never on the event loop) on one connection guarded by a lock, with a short
busy timeout: another process's write holds the file for microseconds, and one held longer answers
:class:`~bargein.memory.store.MemoryStoreError` rather than stall a session. Writes are committed with
``synchronous=FULL`` before they return, so a server killed right after loses nothing it acknowledged.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from bargein.memory.store import (
    Bounds,
    Memory,
    MemoryStoreError,
    clean_fact,
    search_terms,
    telling_terms,
)

BUSY_TIMEOUT_S = 1.0
MAX_PRESENT = 500
"""Ids one :meth:`SqliteMemoryStore.present` call looks up (SQLite's bound parameters are limited)."""
_T = TypeVar("_T")
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS memories (id INTEGER PRIMARY KEY AUTOINCREMENT, scope TEXT NOT NULL, "
    "topic TEXT NOT NULL, text TEXT NOT NULL, bytes INTEGER NOT NULL, updated_at REAL NOT NULL, "
    "UNIQUE (scope, topic))",
    "CREATE INDEX IF NOT EXISTS memories_age ON memories (scope, updated_at)",
    "CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts USING fts5(text, content='memories', content_rowid='id')",
    "CREATE TRIGGER IF NOT EXISTS memories_ai AFTER INSERT ON memories BEGIN "
    "INSERT INTO memories_fts(rowid, text) VALUES (new.id, new.text); END",
    "CREATE TRIGGER IF NOT EXISTS memories_ad AFTER DELETE ON memories BEGIN "
    "INSERT INTO memories_fts(memories_fts, rowid, text) VALUES ('delete', old.id, old.text); END",
    "CREATE TRIGGER IF NOT EXISTS memories_au AFTER UPDATE ON memories BEGIN "
    "INSERT INTO memories_fts(memories_fts, rowid, text) VALUES ('delete', old.id, old.text); "
    "INSERT INTO memories_fts(rowid, text) VALUES (new.id, new.text); END",
)
_COLUMNS = "m.id, m.topic, m.text, m.updated_at"


class SqliteMemoryStore:
    """The memories of every scope in one SQLite database file (``:memory:`` for a private one under test)."""

    def __init__(self, path: str, bounds: Bounds | None = None, *, clock: Callable[[], float] = time.time) -> None:
        self.bounds = bounds or Bounds()
        self._clock = clock
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("BEGIN IMMEDIATE")
            for statement in _SCHEMA:
                self._db.execute(statement)
            self._db.execute("COMMIT")

    async def remember(self, scope: str, topic: str, text: str) -> Memory:
        """Keep ``text`` under ``topic`` (replacing it), committed before it returns."""
        topic, text = clean_fact(topic, text)
        return await self._off_loop(self._remember, scope, topic, text)

    async def forget(self, scope: str, *, memory_id: int | None = None, topic: str | None = None,
                     matching: str | None = None) -> int:
        """Forget by id, topic or matching words; how many went."""
        return await self._off_loop(self._forget, scope, memory_id, topic, matching)

    async def recall(self, scope: str, query: str, limit: int, newest: int | None = None) -> list[Memory]:
        """The best-ranked memories for ``query``, then the newest, ``limit`` in all."""
        return await self._off_loop(self._recall, scope, query, limit, limit if newest is None else newest)

    async def entries(self, scope: str, limit: int = 2000) -> list[Memory]:
        """The scope's memories, newest first."""
        return await self._off_loop(self._rows, f"SELECT {_COLUMNS} FROM memories m WHERE m.scope = ? "
                                    "ORDER BY m.updated_at DESC, m.id DESC LIMIT ?", (scope, limit))

    async def present(self, scope: str, ids: Sequence[int]) -> list[Memory]:
        """The scope's memories among ``ids`` as they are now."""
        wanted = [int(i) for i in ids][:MAX_PRESENT]
        if not wanted:
            return []
        return await self._off_loop(self._rows, f"SELECT {_COLUMNS} FROM memories m WHERE m.scope = ? AND m.id IN "
                                    f"({', '.join('?' * len(wanted))})", (scope, *wanted))

    async def clear(self, scope: str) -> int:
        """Forget every memory of ``scope``."""
        return await self._off_loop(self._write, "DELETE FROM memories WHERE scope = ?", (scope,))

    async def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._db.close()

    # -- in the worker thread ----------------------------------------------------------------------

    async def _off_loop(self, call: Callable[..., _T], *args: Any) -> _T:
        try:
            return await asyncio.to_thread(self._locked, call, *args)
        except sqlite3.Error as error:
            raise MemoryStoreError(f"the memory store failed: {error}") from None

    def _locked(self, call: Callable[..., _T], *args: Any) -> _T:
        with self._lock:
            return call(*args)

    def _transaction(self, work: Callable[[], _T]) -> _T:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            result = work()
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
        return result

    def _remember(self, scope: str, topic: str, text: str) -> Memory:
        now = self._clock()

        def work() -> Memory:
            row = self._db.execute(
                "INSERT INTO memories (scope, topic, text, bytes, updated_at) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (scope, topic) DO UPDATE SET text = excluded.text, bytes = excluded.bytes, "
                "updated_at = excluded.updated_at RETURNING id",
                (scope, topic, text, len(text.encode()) + len(topic.encode()), now)).fetchone()
            self._enforce_bounds(scope)
            return Memory(int(row[0]), topic, text, now)

        return self._transaction(work)

    def _enforce_bounds(self, scope: str) -> None:
        """Forget the scope's oldest memories past its count and byte bounds (inside the write's transaction)."""
        self._db.execute("DELETE FROM memories WHERE id IN (SELECT id FROM memories WHERE scope = ? "
                         "ORDER BY updated_at DESC, id DESC LIMIT -1 OFFSET ?)", (scope, self.bounds.max_items))
        self._db.execute(
            "DELETE FROM memories WHERE id IN (SELECT id FROM (SELECT id, SUM(bytes) OVER (ORDER BY updated_at DESC, "
            "id DESC) AS running FROM memories WHERE scope = ?) WHERE running > ?)", (scope, self.bounds.max_bytes))

    def _forget(self, scope: str, memory_id: int | None, topic: str | None, matching: str | None) -> int:
        if memory_id is not None:
            return self._write("DELETE FROM memories WHERE scope = ? AND id = ?", (scope, memory_id))
        if topic is not None:
            return self._write("DELETE FROM memories WHERE scope = ? AND topic = ?", (scope, topic.lower()))
        terms = search_terms(matching or "")
        if not terms:
            return 0
        match = " AND ".join(f'"{term}"' for term in terms)
        return self._write("DELETE FROM memories WHERE scope = ? AND id IN "
                           "(SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?)", (scope, match))

    def _write(self, sql: str, params: tuple[Any, ...]) -> int:
        return self._transaction(lambda: self._db.execute(sql, params).rowcount)

    def _recall(self, scope: str, query: str, limit: int, newest_count: int) -> list[Memory]:
        terms = self._telling(scope, search_terms(query))
        ranked: list[Memory] = []
        if terms:
            ranked = self._rows(f"SELECT {_COLUMNS} FROM memories_fts f JOIN memories m ON m.id = f.rowid "
                                "WHERE memories_fts MATCH ? AND m.scope = ? ORDER BY bm25(memories_fts) LIMIT ?",
                                (" OR ".join(f'"{term}"' for term in terms), scope, limit))
        if len(ranked) >= limit:
            return ranked
        newest = self._rows(f"SELECT {_COLUMNS} FROM memories m WHERE m.scope = ? "
                            "ORDER BY m.updated_at DESC, m.id DESC LIMIT ?", (scope, newest_count))
        seen = {memory.id for memory in ranked}
        return (ranked + [memory for memory in newest if memory.id not in seen])[:limit]

    def _telling(self, scope: str, terms: list[str]) -> list[str]:
        """``terms`` less those common in the scope (:func:`~bargein.memory.store.telling_terms`), counted in one
        statement whatever the number of terms. CROSS JOIN keeps the full-text match the outer loop: left to
        itself the planner walks the scope's index and runs the match once a memory (at 1,000 memories a recall of
        a few sentences cost about 0.36 s of CPU, now about 1 ms), where the match's own rows are few."""
        if not terms:
            return terms
        holding = ", ".join(f"(SELECT count(*) FROM memories_fts f CROSS JOIN memories m ON m.id = f.rowid "
                            f"WHERE memories_fts MATCH ?{index + 2} AND m.scope = ?1)" for index in range(len(terms)))
        row = self._db.execute(f"SELECT (SELECT count(*) FROM memories WHERE scope = ?1), {holding}",
                               (scope, *(f'"{term}"' for term in terms))).fetchone()
        return telling_terms(terms, [int(count) for count in row[1:]], int(row[0]))

    def _rows(self, sql: str, params: tuple[Any, ...]) -> list[Memory]:
        return [Memory(int(r[0]), str(r[1]), str(r[2]), float(r[3])) for r in self._db.execute(sql, params)]
