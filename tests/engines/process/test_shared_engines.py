"""One engine worker shared by several clients through a hub: routing, owners, bounds, death and reconnect.

The engine is a real worker process running the echo service; the clients are
:class:`EngineProcess` objects whose launch connects to the hub (as a session worker's engines do).
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bargein.engines.fair import current_owner
from bargein.engines.process.shared import SHARED_DIR_ENV, EngineHub, shared_socket, socket_path
from bargein.engines.process.spawn import Launch, python_worker
from bargein.engines.process.supervisor import EngineProcess
from bargein.engines.process.wire import WorkerBusy, WorkerDied, WorkerSpec
from bargein.values import CancelToken

ECHO = WorkerSpec("tests.support.echo_service:EchoService")


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[EngineHub]:
    engine = EngineProcess(python_worker(ECHO, "echo"), name="echo", restart_backoff_s=0.1, stable_s=0.0)
    shared = EngineHub(engine, socket_path(str(tmp_path), "echo"), max_per_client=2)
    try:
        yield shared
    finally:
        shared.close()
        engine.close()


def client(hub: EngineHub) -> EngineProcess:
    return EngineProcess(Launch(("unused",), connect=hub.path), name="echo-client", restart_backoff_s=0.1,
                         stable_s=0.0, ready_wait_s=30)


async def ask(process: EngineProcess, *request: Any) -> list[Any]:
    return [item async for item in process.stream(request, CancelToken())]


async def test_two_clients_share_one_worker_and_each_gets_its_own_items(hub: EngineHub) -> None:
    first, second = client(hub), client(hub)
    try:
        assert first.pid == second.pid == hub.process.pid  # one engine process, not one per client
        assert first.info == {"kind": "echo"} and hub.clients == 2
        replies = await asyncio.gather(ask(first, "echo", 3), ask(second, "echo", 5), ask(first, "echo", 1))
        assert replies == [[0, 1, 2], [0, 1, 2, 3, 4], [0]]
    finally:
        first.close()
        second.close()


async def test_the_engine_sees_each_clients_sessions_apart(hub: EngineHub) -> None:
    first, second = client(hub), client(hub)
    session = object()

    async def as_session(process: EngineProcess) -> list[Any]:
        current_owner.set(session)
        return await ask(process, "owner")

    try:
        (one,), (two,) = await asyncio.gather(asyncio.create_task(as_session(first)),
                                              asyncio.create_task(as_session(second)))
        assert one != two and one[1] == two[1] == id(session)  # (client, session): the fair queue's owner
    finally:
        first.close()
        second.close()


async def test_a_hint_keeps_its_clients_session_through_the_hub(hub: EngineHub) -> None:
    process = client(hub)
    session = object()

    async def as_session() -> list[Any]:
        current_owner.set(session)
        process.notify("warm this")
        return await ask(process, "owner")

    try:
        (key,) = await asyncio.create_task(as_session())
        (hinted,) = await ask(process, "hinted")
        assert hinted == [("warm this", key)] and key[1] == id(session)  # the same owner as its requests
    finally:
        process.close()


async def test_a_client_is_bounded_and_a_cancel_reaches_the_worker(hub: EngineHub) -> None:
    process = client(hub)
    try:
        sleepers = [asyncio.create_task(ask(process, "sleep", 0.8)) for _ in range(2)]
        await asyncio.sleep(0.2)
        with pytest.raises(WorkerBusy, match="WorkerBusy"):  # a refusal for load, typed again on this side
            await ask(process, "echo", 1)  # the hub's cap on this client's requests in flight
        assert await asyncio.gather(*sleepers) == [["slept"], ["slept"]]
        cancel = CancelToken()
        asyncio.get_running_loop().call_later(0.3, cancel.cancel)
        assert [item async for item in process.stream(("sleep", 30), cancel)] == []
        await asyncio.sleep(0.3)
        assert await ask(process, "cancelled") == [1]
    finally:
        process.close()


async def test_an_engine_killed_mid_request_fails_every_clients_request_then_both_reconnect(hub: EngineHub) -> None:
    first, second = client(hub), client(hub)
    try:
        killed = hub.process.pid
        assert killed is not None
        requests = [asyncio.create_task(ask(first, "sleep", 30)), asyncio.create_task(ask(second, "sleep", 30))]
        await asyncio.sleep(0.3)
        os.kill(killed, signal.SIGKILL)
        for request in requests:
            with pytest.raises(WorkerDied):
                await asyncio.wait_for(request, 10)
        assert await asyncio.wait_for(ask(first, "echo", 2), 30) == [0, 1]  # waits for the reconnect
        assert await asyncio.wait_for(ask(second, "echo", 1), 30) == [0]
        assert first.pid == second.pid == hub.process.pid != killed
        assert first.restarts == second.restarts == hub.process.restarts == 1  # the engine's count, not summed
    finally:
        first.close()
        second.close()


def test_a_launch_connects_only_where_the_parent_shares_that_label(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SHARED_DIR_ENV, str(tmp_path))
    (tmp_path / "llm.sock").touch()
    assert shared_socket("llm") == str(tmp_path / "llm.sock") and shared_socket("asr") is None
    assert python_worker(ECHO, "llm").connect == str(tmp_path / "llm.sock")
    monkeypatch.delenv(SHARED_DIR_ENV)
    assert python_worker(ECHO, "llm").connect is None


def test_an_unreachable_shared_engine_says_where(tmp_path: Path) -> None:
    with pytest.raises(WorkerDied, match="unreachable"):
        EngineProcess(Launch(("unused",), connect=str(tmp_path / "none.sock")), name="echo")



def test_metrics_take_the_shared_engines_figures_once_and_still_sum_the_rest() -> None:
    from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

    from bargein.metrics.aggregate import WorkerFigures, merged_exposition

    registry = CollectorRegistry()
    Counter("bargein_engine_worker_restarts", "", ["stage"], registry=registry).labels("llm").inc()
    Gauge("bargein_queue_depth", "", ["stage"], registry=registry).labels("llm").set(2)
    exposition = generate_latest(registry).decode()
    workers = [WorkerFigures(pid, exposition, {}) for pid in (11, 12)]
    shared = merged_exposition(workers, shared_engines=True).decode()
    assert 'bargein_engine_worker_restarts_total{stage="llm"} 1.0' in shared
    assert 'bargein_queue_depth{stage="llm"} 4.0' in shared
    apart = merged_exposition(workers).decode()  # --engines-per-worker: two engines, two restarts
    assert 'bargein_engine_worker_restarts_total{stage="llm"} 2.0' in apart


def test_a_hub_refuses_clients_beyond_its_cap(tmp_path: Path) -> None:
    engine = EngineProcess(python_worker(ECHO, "echo"), name="echo")
    hub = EngineHub(engine, socket_path(str(tmp_path), "echo"), max_clients=1)
    first = EngineProcess(Launch(("unused",), connect=hub.path), name="echo-client")
    try:
        with pytest.raises(WorkerDied, match="closed the connection"):
            EngineProcess(Launch(("unused",), connect=hub.path), name="echo-client")
        assert hub.clients == 1
    finally:
        first.close()
        hub.close()
        engine.close()
