"""The capacity planner's queueing arithmetic and its command, and the remote engines' failure rules."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bargein.capacity_plan import StageCosts, Traffic, _wait_p95_s, load_costs, plan
from bargein.engines.remote.clients import RemoteEngineFailure, RemoteLanguageModel, RemoteRecognizer, RemoteVad
from bargein.values import CancelToken, ChatMessage


def test_one_server_queue_matches_m_m_1() -> None:
    # M/M/1 at load 0.5, service 1 s: P(wait) = 0.5, P(W > t) = 0.5 exp(-0.5 t) = 0.05 at t = 2 ln 10
    assert _wait_p95_s(1, 0.5, 1.0) == pytest.approx(2 * math.log(10))
    assert _wait_p95_s(1, 1.0, 1.0) == math.inf
    assert _wait_p95_s(4, 0.1, 1.0) == 0.0  # almost nobody waits


def test_pools_grow_with_sessions_and_meet_the_budget() -> None:
    small, _ = plan(1_000, 1500, StageCosts(), Traffic())
    large, first_audio = plan(100_000, 1500, StageCosts(), Traffic())
    for few, many in zip(small, large, strict=True):
        assert few.stage == many.stage and many.replicas > few.replicas
        assert many.utilisation <= 0.7 + 1e-9
    assert first_audio <= 1500
    sessions = next(p for p in large if p.stage == "session workers")
    assert sessions.cores == pytest.approx(100_000 * 380 / 20_000 / 0.7, rel=0.01)


def test_an_unreachable_target_is_said_and_exits_1(tmp_path: Path) -> None:
    _plans, first_audio = plan(1_000, 800, StageCosts(), Traffic())
    assert first_audio > 800  # the endpoint silence and the LLM's first clause alone take longer
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps({"llm_us_per_token": 2000, "llm_first_token_ms": 100, "other": 1}))
    assert load_costs(str(costs)).llm_us_per_token == 2000
    command = [sys.executable, "-m", "bargein", "capacity", "--sessions", "1000", "--p95-first-audio"]
    slow = subprocess.run([*command, "800"], capture_output=True, text=True, timeout=60)
    fast = subprocess.run([*command, "800", "--costs", str(costs)], capture_output=True, text=True, timeout=60)
    assert slow.returncode == 1 and "cannot be met" in slow.stdout
    assert fast.returncode == 0 and "llm" in fast.stdout and "machines" in fast.stdout


class _Call:
    def __init__(self, result: Any = None, error: Exception | None = None) -> None:
        self.result, self.error = result, error

    def __await__(self) -> Any:
        async def answer() -> Any:
            if self.error is not None:
                raise self.error
            return self.result
        return answer().__await__()


class _Method:
    def __init__(self, call: Any) -> None:
        self.call = call

    def remote(self, *args: Any) -> Any:
        return self.call(*args)


class _Generator:
    def __init__(self, items: list[object], fail_after: int | None = None) -> None:
        self.items, self.fail_after, self.cancelled = items, fail_after, False

    def __aiter__(self) -> AsyncIterator[object]:
        return self._run()

    async def _run(self) -> AsyncIterator[object]:
        for index, item in enumerate(self.items):
            if self.fail_after is not None and index == self.fail_after:
                raise ConnectionError("replica died")
            await asyncio.sleep(0)
            yield item

    def cancel(self) -> None:
        self.cancelled = True


class _Handle:
    def __init__(self, **methods: Any) -> None:
        for name, call in methods.items():
            setattr(self, name, _Method(call))

    def options(self, **_: Any) -> _Handle:
        return self


async def test_a_failing_remote_vad_frame_counts_as_silence_and_keeps_state() -> None:
    vad = RemoteVad(_Handle(step=lambda _request: _Call(error=ConnectionError("gone"))), timeout_s=1.0)
    stream = vad.open_stream()
    assert await stream.probability(np.ones(512, np.float32)) == 0.0
    assert vad.failures == 1 and vad.queue_depth == 0
    ok = RemoteVad(_Handle(step=lambda request: _Call((0.9, request[2] + 1))), timeout_s=1.0)
    stream = ok.open_stream()
    assert await stream.probability(np.ones(512, np.float32)) == pytest.approx(0.9)
    assert await stream.probability(np.ones(512, np.float32)) == pytest.approx(0.9)
    assert float(stream.state[0, 0]) == 2.0  # type: ignore[attr-defined]  # the state travels with each frame


async def test_a_remote_failure_costs_the_call_and_cancel_stops_the_remote_stream() -> None:
    asr = RemoteRecognizer(_Handle(transcribe=lambda *_: _Call(error=ConnectionError("replica died"))), 1.0)
    with pytest.raises(RemoteEngineFailure, match="remote ASR: ConnectionError"):
        await asr.transcribe(np.zeros(16_000, np.float32))
    dying = _Generator(["a", "b", "c"], fail_after=2)
    llm = RemoteLanguageModel(_Handle(stream=lambda *_: dying), 1.0)
    seen: list[str] = []
    with pytest.raises(RemoteEngineFailure, match="remote LLM"):
        async for token in llm.stream([ChatMessage("user", "hi")], cancel=CancelToken()):
            seen.append(token)
    assert seen == ["a", "b"] and dying.cancelled and llm.queue_depth == 0
    endless = _Generator(["x"] * 100)
    llm = RemoteLanguageModel(_Handle(stream=lambda *_: endless), 1.0)
    cancel = CancelToken()
    async for _token in llm.stream([ChatMessage("user", "hi")], cancel=cancel):
        cancel.cancel()
    assert endless.cancelled
