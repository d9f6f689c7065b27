"""The PostgreSQL memory store against a real, throwaway server (Debian's ``postgresql``: ``initdb``/``pg_ctl`` on
a unix socket in a temporary directory, as the ``postgres`` user when the tests run as root)."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from bargein.memory.store import Bounds

pytest.importorskip("psycopg", reason="psycopg 3 is missing (the memory-pg extra)")
PG_BIN = next((str(path) for path in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)), None) \
    if Path("/usr/lib/postgresql").is_dir() else None
INITDB = shutil.which("initdb") or (f"{PG_BIN}/initdb" if PG_BIN else None)
if INITDB is None or not os.path.exists(INITDB):
    pytest.skip("PostgreSQL's server binaries (initdb, pg_ctl) are absent: apt-get install postgresql",
                allow_module_level=True)
PG_CTL = str(Path(INITDB).with_name("pg_ctl"))


def _as_owner(command: list[str]) -> list[str]:
    """Run as ``postgres`` when we are root (initdb refuses root), else as ourselves."""
    return ["su", "postgres", "-s", "/bin/sh", "-c", " ".join(command)] if os.geteuid() == 0 else command


@pytest.fixture(scope="module")
def database_url() -> Iterator[str]:
    """A new cluster listening only on a unix socket in a temporary directory; stopped and removed afterwards."""
    root = tempfile.mkdtemp(prefix="bargein-pg-")
    os.chmod(root, 0o777)
    data, sockets = f"{root}/data", f"{root}/sockets"
    os.makedirs(sockets)
    os.chmod(sockets, 0o777)
    subprocess.run(_as_owner([INITDB, "-D", data, "-U", "bargein", "--auth=trust", "-E", "UTF8"]), check=True,
                   capture_output=True)
    options = f"-c listen_addresses='' -c unix_socket_directories={sockets} -c fsync=on"
    subprocess.run(_as_owner([PG_CTL, "-D", data, "-w", "-l", f"{root}/log", "-o", f'"{options}"', "start"]),
                   check=True, capture_output=True)
    try:
        yield f"postgresql://bargein@/postgres?host={sockets}"
    finally:
        subprocess.run(_as_owner([PG_CTL, "-D", data, "-m", "immediate", "stop"]), capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


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
