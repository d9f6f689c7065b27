"""A service for the cost-ledger tests: ``("burn", s)`` spins the CPU for ``s`` seconds of its own thread's CPU
time (stopping early on cancel), then yields how long it spun."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from bargein.engines.process.child import Service
from bargein.values import CancelToken


class BurnService(Service):
    """Spins the worker's CPU on request (see the module docstring)."""

    def describe(self) -> dict[str, Any]:
        """Sent with ``ready``."""
        return {"kind": "burn"}

    async def handle(self, request: tuple[Any, ...], cancel: CancelToken) -> AsyncIterator[Any]:
        """Spin in slices of 10 ms, yielding to the loop between them so a cancel is seen."""
        start = time.thread_time()
        while time.thread_time() - start < float(request[1]) and not cancel.cancelled:
            slice_end = time.thread_time() + 0.01
            while time.thread_time() < slice_end:
                pass
            await asyncio.sleep(0)
        yield time.thread_time() - start
