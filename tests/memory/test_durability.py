"""A store killed mid-write loses nothing it acknowledged: a child process writes memories from two writers of one
scope as fast as the store takes them and is killed with SIGKILL mid-stream; every write it acknowledged is there
afterwards (SQLite in WAL with ``synchronous=FULL``; PostgreSQL, whose server is then crashed and restarted too)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bargein.memory.store import MemoryStore
from tests.memory.conftest import PgCluster
from tests.memory.durability_writer import SCOPE, fact

ACKNOWLEDGED = 120
"""Writes to see acknowledged before the kill (the child is mid-way through the next ones)."""
DEADLINE_S = 15.0


def _write_then_kill(kind: str, where: str) -> list[tuple[int, int]]:
    """Run the writer child, SIGKILL it once ``ACKNOWLEDGED`` writes came back; every write it acknowledged."""
    child = subprocess.Popen([sys.executable, "-m", "tests.memory.durability_writer", kind, where],
                             stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert child.stdout is not None
    acknowledged: list[tuple[int, int]] = []
    started = time.monotonic()
    try:
        assert child.stdout.readline().strip() == "ready"
        while len(acknowledged) < ACKNOWLEDGED and time.monotonic() - started < DEADLINE_S:
            line = child.stdout.readline()
            if not line:
                break
            writer, index = line.split()
            acknowledged.append((int(writer), int(index)))
        child.send_signal(signal.SIGKILL)
        acknowledged += [(int(w), int(i)) for w, i in (line.split() for line in child.stdout.read().splitlines())]
    finally:
        child.kill()
        child.wait(10)
    assert child.returncode == -signal.SIGKILL, "the writer stopped before the kill"
    assert len(acknowledged) >= ACKNOWLEDGED // 2 and {w for w, _ in acknowledged} == {0, 1}
    return acknowledged


async def _assert_kept(store: MemoryStore, acknowledged: list[tuple[int, int]]) -> None:
    kept = {(memory.topic, memory.text) for memory in await store.entries(SCOPE, limit=100_000)}
    lost = [fact(writer, index) for writer, index in acknowledged if fact(writer, index) not in kept]
    assert lost == [], f"{len(lost)} acknowledged writes lost"
    await store.close()


@pytest.mark.slow
async def test_sqlite_killed_mid_write_loses_nothing_it_acknowledged(tmp_path: Path) -> None:
    from bargein.memory.sqlite_store import SqliteMemoryStore

    path = str(tmp_path / "memory.sqlite3")
    acknowledged = _write_then_kill("sqlite", path)
    await _assert_kept(SqliteMemoryStore(path), acknowledged)


@pytest.mark.slow
async def test_postgres_killed_mid_write_loses_nothing_it_acknowledged(pg_cluster: PgCluster) -> None:
    from bargein.memory.pg_store import PostgresMemoryStore

    store = await PostgresMemoryStore.open(pg_cluster.url)
    await store.clear(SCOPE)
    await store.close()
    acknowledged = _write_then_kill("postgres", pg_cluster.url)
    pg_cluster.crash_and_restart()  # what was committed is in the server's WAL, not only in its memory
    await _assert_kept(await PostgresMemoryStore.open(pg_cluster.url), acknowledged)
