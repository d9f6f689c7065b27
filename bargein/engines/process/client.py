"""What every engine served by a worker process shares: the supervisor, and the gauges read from it."""

from __future__ import annotations

import asyncio

from bargein.engines.process.supervisor import EngineProcess
from bargein.values import WorkerProcess


class ProcessClient:
    """Base of the engines whose work runs in an :class:`EngineProcess` (``self.process``)."""

    process: EngineProcess

    @property
    def pid(self) -> int | None:
        """The worker's process id (None while it restarts)."""
        return self.process.pid

    @property
    def restarts(self) -> int:
        """Workers started after the first (each one a crash survived)."""
        return self.process.restarts

    @property
    def worker(self) -> WorkerProcess:
        """The worker process: its pid and restarts (the per-stage worker gauges)."""
        return WorkerProcess(self.process.pid, self.process.restarts)

    @property
    def queue_depth(self) -> int:
        """Requests the worker is serving (the ``bargein_queue_depth`` gauge)."""
        return self.process.queue_depth

    def close(self) -> None:
        """Stop the worker (politely, then by force); closing twice is harmless."""
        self.process.close()

    async def aclose(self) -> None:
        """Close without blocking the event loop."""
        await asyncio.to_thread(self.close)
