"""A real, throwaway PostgreSQL server for the memory tests that need one (Debian's ``postgresql``: ``initdb`` and
``pg_ctl`` on a unix socket in a temporary directory, as the ``postgres`` user when the tests run as root)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PG_BIN = next((str(path) for path in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)), None) \
    if Path("/usr/lib/postgresql").is_dir() else None
INITDB = shutil.which("initdb") or (f"{PG_BIN}/initdb" if PG_BIN else None)


def _as_owner(command: list[str]) -> list[str]:
    """Run as ``postgres`` when we are root (initdb refuses root), else as ourselves."""
    return ["su", "postgres", "-s", "/bin/sh", "-c", " ".join(command)] if os.geteuid() == 0 else command


@dataclass(frozen=True)
class PgCluster:
    """A running cluster: its connection URL, and a crash (immediate stop) and start again."""

    url: str
    data: str
    log: str
    options: str

    def crash_and_restart(self) -> None:
        """Stop the server without a checkpoint (as a power cut would) and start it again (it replays its WAL)."""
        pg_ctl = str(Path(str(INITDB)).with_name("pg_ctl"))
        subprocess.run(_as_owner([pg_ctl, "-D", self.data, "-m", "immediate", "stop"]), check=True,
                       capture_output=True)
        subprocess.run(_as_owner([pg_ctl, "-D", self.data, "-w", "-l", self.log, "-o", f'"{self.options}"', "start"]),
                       check=True, capture_output=True)


@pytest.fixture(scope="module")
def pg_cluster() -> Iterator[PgCluster]:
    """A new cluster listening only on a unix socket in a temporary directory; stopped and removed afterwards."""
    pytest.importorskip("psycopg", reason="psycopg 3 is missing (the memory-pg extra)")
    if INITDB is None or not os.path.exists(INITDB):
        pytest.skip("PostgreSQL's server binaries (initdb, pg_ctl) are absent: apt-get install postgresql")
    pg_ctl = str(Path(INITDB).with_name("pg_ctl"))
    root = tempfile.mkdtemp(prefix="bargein-pg-")
    os.chmod(root, 0o777)
    data, sockets = f"{root}/data", f"{root}/sockets"
    os.makedirs(sockets)
    os.chmod(sockets, 0o777)
    subprocess.run(_as_owner([INITDB, "-D", data, "-U", "bargein", "--auth=trust", "-E", "UTF8"]), check=True,
                   capture_output=True)
    options = f"-c listen_addresses='' -c unix_socket_directories={sockets} -c fsync=on"
    cluster = PgCluster(f"postgresql://bargein@/postgres?host={sockets}", data, f"{root}/log", options)
    subprocess.run(_as_owner([pg_ctl, "-D", data, "-w", "-l", cluster.log, "-o", f'"{options}"', "start"]),
                   check=True, capture_output=True)
    try:
        yield cluster
    finally:
        subprocess.run(_as_owner([pg_ctl, "-D", data, "-m", "immediate", "stop"]), capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def database_url(pg_cluster: PgCluster) -> str:
    """The throwaway cluster's URL."""
    return pg_cluster.url
