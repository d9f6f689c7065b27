"""Open sessions per client address, counted across every worker of one server.

With ``--workers N`` each worker would otherwise count only its own sessions, and one address could hold
``max_connections_per_client`` x N. The workers share a small SQLite table in the server's private runtime
directory (as they share client secrets): one row per address and worker process, so a worker that dies
leaves rows the others recognise (its process is gone) and drop. Each count is one short transaction, run in
a thread: the event loop never waits on another worker's lock, and a lock held past :data:`BUSY_TIMEOUT_S`
refuses the session for now (try again later) instead of stalling every session of the worker. A server of
one process counts in memory.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import threading
from typing import Protocol

from bargein.server.limits import AddressCounter

log = logging.getLogger(__name__)
COUNTS_FILE = "client-sessions.sqlite3"
BUSY_TIMEOUT_S = 0.5
"""How long a count waits for another worker's transaction (each takes microseconds)."""
RELEASE_TRIES = 10


class CountsBusy(Exception):
    """The shared counts could not be read in time (another worker held the table too long)."""


class SessionCounts(Protocol):
    """Open sessions per client address, with a cap."""

    per_address: int

    async def acquire(self, address: str) -> bool:
        """Count one more session from ``address``; False (nothing counted) over the cap; CountsBusy if unsure."""

    async def release(self, address: str) -> None:
        """One session from ``address`` ended."""


class LocalSessionCounts:
    """The counts of a server of one process, in memory (no thread, no file)."""

    def __init__(self, per_address: int) -> None:
        self.per_address = per_address
        self.counter = AddressCounter(per_address)

    async def acquire(self, address: str) -> bool:
        """See :class:`SessionCounts`."""
        return self.counter.acquire(address)

    async def release(self, address: str) -> None:
        """See :class:`SessionCounts`."""
        self.counter.release(address)


class SharedSessionCounts:
    """The counts of every worker of one server, in a SQLite file they all open (see the module docstring)."""

    def __init__(self, path: str, per_address: int, *, pid: int | None = None) -> None:
        self.per_address = per_address
        self.pid = os.getpid() if pid is None else pid
        self._lock = threading.Lock()  # one connection, used from the executor's threads in turn
        self._db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=OFF")  # counts die with the runtime directory
            self._db.execute("CREATE TABLE IF NOT EXISTS client_sessions (address TEXT NOT NULL, pid INTEGER NOT "
                             "NULL, open INTEGER NOT NULL, PRIMARY KEY (address, pid))")
            self._db.execute("DELETE FROM client_sessions WHERE pid = ?", (self.pid,))  # an earlier process's

    async def acquire(self, address: str) -> bool:
        """See :class:`SessionCounts`."""
        try:
            return await asyncio.to_thread(self.acquire_now, address)
        except sqlite3.OperationalError as error:
            raise CountsBusy(str(error)) from None

    async def release(self, address: str) -> None:
        """See :class:`SessionCounts`."""
        await asyncio.to_thread(self.release_now, address)

    def acquire_now(self, address: str) -> bool:
        """:meth:`acquire`, blocking (run it off the event loop)."""
        with self._lock, self._transaction():
            rows = self._db.execute("SELECT pid, open FROM client_sessions WHERE address = ?", (address,)).fetchall()
            dead = [pid for pid, _ in rows if pid != self.pid and not _alive(pid)]
            for pid in dead:  # a worker that died: none of its sessions are open any more
                self._db.execute("DELETE FROM client_sessions WHERE pid = ?", (pid,))
            if sum(count for pid, count in rows if pid not in dead) >= self.per_address:
                return False
            self._db.execute("INSERT INTO client_sessions (address, pid, open) VALUES (?, ?, 1) "
                             "ON CONFLICT (address, pid) DO UPDATE SET open = open + 1", (address, self.pid))
            return True

    def release_now(self, address: str) -> None:
        """:meth:`release`, blocking; retried while the table is busy, so a count is never left behind."""
        for attempt in range(RELEASE_TRIES):
            try:
                with self._lock, self._transaction():
                    self._db.execute("UPDATE client_sessions SET open = open - 1 WHERE address = ? AND pid = ?",
                                     (address, self.pid))
                    self._db.execute("DELETE FROM client_sessions WHERE open <= 0")
                return
            except sqlite3.OperationalError as error:
                if attempt == RELEASE_TRIES - 1:
                    log.error("could not count a session of %s as ended: %s", address, error)

    def open_sessions(self, address: str) -> int:
        """Sessions of ``address`` open on every worker (for tests and the abuse bench)."""
        with self._lock:
            (count,) = self._db.execute("SELECT coalesce(sum(open), 0) FROM client_sessions WHERE address = ?",
                                        (address,)).fetchone()
        return int(count)

    def close(self) -> None:
        """Close the database connection."""
        with self._lock:
            self._db.close()

    def _transaction(self) -> _Immediate:
        return _Immediate(self._db)


class _Immediate:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on an error): the write lock from the first read, so two
    workers never both see room for the last session."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, error: object, trace: object) -> None:
        self.db.execute("COMMIT" if error is None else "ROLLBACK")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def session_counts(runtime_directory: str | None, per_address: int) -> SessionCounts:
    """The shared counts in the workers' runtime directory, or in-memory ones for a server of one process."""
    if runtime_directory is None:
        return LocalSessionCounts(per_address)
    return SharedSessionCounts(os.path.join(runtime_directory, COUNTS_FILE), per_address)
