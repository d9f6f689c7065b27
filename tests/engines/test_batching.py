"""Edges of the micro-batcher and the Ray Serve clients (fakes only, no models, no Ray cluster)."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from bargein.engines.batching import MicroBatcher
from bargein.engines.remote.clients import RemoteEngineFailure, RemoteRecognizer, RemoteVad


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


class _Response:
    """A Serve DeploymentResponse whose replica never answers; records ``cancel()``."""

    def __init__(self) -> None:
        self.cancelled = False

    def __await__(self) -> Any:
        return asyncio.get_running_loop().create_future().__await__()  # never resolved

    def cancel(self) -> None:
        self.cancelled = True


class _Method:
    def __init__(self) -> None:
        self.responses: list[_Response] = []

    def remote(self, *_: Any) -> _Response:
        self.responses.append(_Response())
        return self.responses[-1]


class _Handle:
    def __init__(self) -> None:
        self.transcribe = _Method()
        self.step = _Method()


async def test_a_remote_asr_call_past_its_deadline_is_cancelled_on_the_replica() -> None:
    handle = _Handle()
    asr = RemoteRecognizer(handle, timeout_s=0.05)
    with pytest.raises(RemoteEngineFailure, match="TimeoutError"):
        await asr.transcribe(np.zeros(1600, np.float32))
    assert handle.transcribe.responses[0].cancelled
    assert asr.queue_depth == 0


async def test_a_remote_asr_call_whose_caller_gives_up_is_cancelled_on_the_replica() -> None:
    """The stage's own deadline (shorter than ``ray_timeout_s``) or a closed session cancels the caller."""
    handle = _Handle()
    asr = RemoteRecognizer(handle, timeout_s=3600)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await asr.transcribe(np.zeros(1600, np.float32))
    assert handle.transcribe.responses[0].cancelled
    assert asr.queue_depth == 0


async def test_a_lost_remote_vad_frame_is_cancelled_on_the_replica() -> None:
    handle = _Handle()
    vad = RemoteVad(handle, timeout_s=0.05)
    stream = vad.open_stream()
    assert await stream.probability(np.zeros(vad.frame_samples, np.float32)) == 0.0
    assert handle.step.responses[0].cancelled and vad.failures == 1
