"""The shared memory store for deployments with several machines: PostgreSQL (``--memory-url postgresql://...``).

Full-text ranking is PostgreSQL's own (a generated ``tsvector`` column with a GIN index, ``ts_rank``); each write
is one transaction committed before the call returns. Connections come from a small pool of psycopg 3's async
connections (the ``memory-pg`` extra), so no call blocks the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from bargein.memory.store import Bounds, Memory, MemoryStoreError, clean_fact, search_terms, telling_terms

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS bargein_memories (id BIGSERIAL PRIMARY KEY, scope TEXT NOT NULL, "
    "topic TEXT NOT NULL, text TEXT NOT NULL, bytes INTEGER NOT NULL, updated_at DOUBLE PRECISION NOT NULL, "
    "search tsvector GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED, UNIQUE (scope, topic))",
    "CREATE INDEX IF NOT EXISTS bargein_memories_search ON bargein_memories USING GIN (search)",
    "CREATE INDEX IF NOT EXISTS bargein_memories_age ON bargein_memories (scope, updated_at)",
)
_COLUMNS = "id, topic, text, updated_at"
CONNECT_TIMEOUT_S = 5


class _Pool:
    """A few autocommit connections taken in turn (psycopg's own pool is another package)."""

    def __init__(self, url: str, size: int) -> None:
        self.url = url
        self.idle: asyncio.Queue[Any] = asyncio.Queue()
        self.free = size

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Any]:
        import psycopg

        if self.idle.empty() and self.free > 0:
            self.free -= 1
            try:
                connection = await psycopg.AsyncConnection.connect(self.url, autocommit=True,
                                                                   connect_timeout=CONNECT_TIMEOUT_S)
            except psycopg.Error as error:
                self.free += 1
                raise MemoryStoreError(f"cannot reach the memory database: {error}") from None
        else:
            connection = await self.idle.get()
        try:
            yield connection
        except psycopg.Error as error:
            raise MemoryStoreError(f"the memory database failed: {error}") from None
        finally:
            if connection.closed:
                self.free += 1
            else:
                self.idle.put_nowait(connection)

    async def close(self) -> None:
        while not self.idle.empty():
            await self.idle.get_nowait().close()


def _memory(row: Any) -> Memory:
    return Memory(int(row[0]), str(row[1]), str(row[2]), float(row[3]))


class PostgresMemoryStore:
    """The memories of every scope in one PostgreSQL table; open with :meth:`open`."""

    def __init__(self, pool: _Pool, bounds: Bounds, clock: Callable[[], float]) -> None:
        self._pool = pool
        self.bounds = bounds
        self._clock = clock

    @classmethod
    async def open(cls, url: str, bounds: Bounds | None = None, *, clock: Callable[[], float] = time.time,
                   max_connections: int = 4) -> PostgresMemoryStore:
        """Connect to ``url`` and create the table if it is missing."""
        try:
            import psycopg  # noqa: F401
        except ImportError:  # pragma: no cover - the extra is missing
            raise MemoryStoreError("--memory-url postgresql://... needs the memory-pg extra "
                                   "(pip install 'bargein[memory-pg]')") from None
        pool = _Pool(url, max_connections)
        store = cls(pool, bounds or Bounds(), clock)
        async with pool.connection() as connection, connection.transaction():
            await connection.execute("SELECT pg_advisory_xact_lock(4600046)")  # one creator among many servers
            for statement in _SCHEMA:
                await connection.execute(statement)
        return store

    async def remember(self, scope: str, topic: str, text: str) -> Memory:
        """Keep ``text`` under ``topic`` (replacing it), committed before it returns."""
        topic, text = clean_fact(topic, text)
        now = self._clock()
        async with self._pool.connection() as connection, connection.transaction():
            cursor = await connection.execute(
                "INSERT INTO bargein_memories (scope, topic, text, bytes, updated_at) VALUES (%s, %s, %s, %s, %s) "
                "ON CONFLICT (scope, topic) DO UPDATE SET text = EXCLUDED.text, bytes = EXCLUDED.bytes, "
                "updated_at = EXCLUDED.updated_at RETURNING id",
                (scope, topic, text, len(text.encode()) + len(topic.encode()), now))
            row = await cursor.fetchone()
            await connection.execute(
                "DELETE FROM bargein_memories WHERE id IN (SELECT id FROM (SELECT id, "
                "ROW_NUMBER() OVER w AS place, SUM(bytes) OVER w AS running FROM bargein_memories WHERE scope = %s "
                "WINDOW w AS (ORDER BY updated_at DESC, id DESC)) ranked WHERE place > %s OR running > %s)",
                (scope, self.bounds.max_items, self.bounds.max_bytes))
        return Memory(int(row[0]), topic, text, now)

    async def forget(self, scope: str, *, memory_id: int | None = None, topic: str | None = None,
                     matching: str | None = None) -> int:
        """Forget by id, topic or matching words; how many went."""
        if memory_id is not None:
            return await self._write("DELETE FROM bargein_memories WHERE scope = %s AND id = %s", (scope, memory_id))
        if topic is not None:
            return await self._write("DELETE FROM bargein_memories WHERE scope = %s AND topic = %s",
                                     (scope, topic.lower()))
        terms = search_terms(matching or "")
        if not terms:
            return 0
        return await self._write("DELETE FROM bargein_memories WHERE scope = %s AND search @@ "
                                 "to_tsquery('simple', %s)", (scope, " & ".join(_lexeme(t) for t in terms)))

    async def recall(self, scope: str, query: str, limit: int, newest: int | None = None) -> list[Memory]:
        """The best-ranked memories for ``query`` (``ts_rank``), then the newest, ``limit`` in all."""
        terms = await self._telling(scope, search_terms(query))
        ranked: list[Memory] = []
        if terms:
            ranked = await self._rows(
                f"SELECT {_COLUMNS} FROM bargein_memories, to_tsquery('simple', %s) AS q WHERE scope = %s "
                "AND search @@ q ORDER BY ts_rank(search, q) DESC, updated_at DESC LIMIT %s",
                (" | ".join(_lexeme(t) for t in terms), scope, limit))
        if len(ranked) >= limit:
            return ranked
        seen = {memory.id for memory in ranked}
        latest = await self.entries(scope, limit if newest is None else newest)
        return (ranked + [memory for memory in latest if memory.id not in seen])[:limit]

    async def entries(self, scope: str, limit: int = 2000) -> list[Memory]:
        """The scope's memories, newest first."""
        return await self._rows(f"SELECT {_COLUMNS} FROM bargein_memories WHERE scope = %s "
                                "ORDER BY updated_at DESC, id DESC LIMIT %s", (scope, limit))

    async def present(self, scope: str, ids: Sequence[int]) -> list[Memory]:
        """The scope's memories among ``ids`` as they are now."""
        wanted = [int(i) for i in ids]
        if not wanted:
            return []
        return await self._rows(f"SELECT {_COLUMNS} FROM bargein_memories WHERE scope = %s AND id = ANY(%s)",
                                (scope, wanted))

    async def clear(self, scope: str) -> int:
        """Forget every memory of ``scope``."""
        return await self._write("DELETE FROM bargein_memories WHERE scope = %s", (scope,))

    async def close(self) -> None:
        """Close the pool."""
        await self._pool.close()

    async def _telling(self, scope: str, terms: list[str]) -> list[str]:
        """``terms`` less those common in the scope (:func:`~bargein.memory.store.telling_terms`)."""
        if not terms:
            return terms
        counts = ", ".join("count(*) FILTER (WHERE search @@ to_tsquery('simple', %s))" for _ in terms)
        async with self._pool.connection() as connection:
            cursor = await connection.execute(f"SELECT count(*), {counts} FROM bargein_memories WHERE scope = %s",
                                              (*(_lexeme(term) for term in terms), scope))
            row = await cursor.fetchone()
        return telling_terms(terms, [int(count) for count in row[1:]], int(row[0]))

    async def _write(self, sql: str, params: tuple[Any, ...]) -> int:
        async with self._pool.connection() as connection, connection.transaction():
            cursor = await connection.execute(sql, params)
            return int(cursor.rowcount)

    async def _rows(self, sql: str, params: tuple[Any, ...]) -> list[Memory]:
        async with self._pool.connection() as connection:
            cursor = await connection.execute(sql, params)
            return [_memory(row) for row in await cursor.fetchall()]


def _lexeme(term: str) -> str:
    """A search word as a quoted ``tsquery`` lexeme (no operator a user's words could smuggle in)."""
    return "'" + term.replace("'", "''").replace("\\", "") + "'"
