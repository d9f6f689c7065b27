"""Edges of the micro-batcher (fakes only, no models): a failed delivery, a close with a batch in hand."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field

import pytest

from bargein.engines.batching import MicroBatcher


@dataclass
class _Req:
    value: int
    future: asyncio.Future[int] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class _Doubler(MicroBatcher[_Req]):
    """Doubles each value; the first delivery raises (a bug, or a model answering the wrong count)."""

    name = "doubler"

    def __init__(self, *, fail_delivery: int = 0, gate: asyncio.Event | None = None) -> None:
        super().__init__()
        self.fail_delivery = fail_delivery
        self.gate = gate

    async def ask(self, value: int) -> int:
        self._loop()
        request = _Req(value)
        self._enqueue(request)
        return await request.future

    def _infer(self, batch: list[_Req]) -> list[int]:
        return [item.value * 2 for item in batch]

    def _deliver(self, batch: list[_Req], results: list[int]) -> None:
        if self.fail_delivery:
            self.fail_delivery -= 1
            raise ValueError("wrong number of results")
        for item, result in zip(batch, results, strict=True):
            item.future.set_result(result)


async def test_a_failed_delivery_fails_its_callers_and_the_batcher_goes_on() -> None:
    batcher = _Doubler(fail_delivery=1)
    try:
        with pytest.raises(ValueError, match="wrong number"):
            await asyncio.wait_for(batcher.ask(1), 5)
        # the worker survived: a later request is served by the same worker
        worker = batcher._worker
        assert await asyncio.wait_for(batcher.ask(2), 5) == 4
        assert batcher._worker is worker
    finally:
        await batcher.aclose()


class _Stuck(_Doubler):
    """A batch that runs until released (a slow model)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def _infer(self, batch: list[_Req]) -> list[int]:
        self.release.wait(10)
        return super()._infer(batch)


async def test_closing_the_batcher_fails_the_batch_in_hand_and_the_queue() -> None:
    batcher = _Stuck()
    running = asyncio.ensure_future(batcher.ask(1))
    await asyncio.sleep(0.05)  # the first batch is in the thread
    queued = asyncio.ensure_future(batcher.ask(2))
    await asyncio.sleep(0)
    try:
        await batcher.aclose()
        done, _ = await asyncio.wait((running, queued), timeout=5)
        assert done == {running, queued}
        for task in (running, queued):
            with pytest.raises(RuntimeError, match="closed"):
                task.result()
    finally:
        batcher.release.set()
