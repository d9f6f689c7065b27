"""The engine-process supervisor with real worker processes: streaming, sessions, bounds, cancel, health."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from bargein.engines.fair import current_owner
from bargein.engines.process.supervisor import EngineProcess, python_worker
from bargein.engines.process.wire import WorkerBusy, WorkerDied, WorkerSpec
from bargein.values import CancelToken

ECHO = WorkerSpec("tests.support.echo_service:EchoService")


@pytest.fixture
def echo() -> Iterator[EngineProcess]:
    process = EngineProcess(python_worker(ECHO, "echo"), name="echo", max_in_flight=3, max_per_owner=2)
    try:
        yield process
    finally:
        process.close()


async def ask(process: EngineProcess, *request: Any, cancel: CancelToken | None = None) -> list[Any]:
    return [item async for item in process.stream(request, cancel or CancelToken())]


async def test_items_stream_in_order_and_concurrent_requests_are_kept_apart(echo: EngineProcess) -> None:
    assert echo.info == {"kind": "echo"}
    assert await ask(echo, "echo", 5) == [0, 1, 2, 3, 4]
    assert await asyncio.gather(ask(echo, "echo", 2), ask(echo, "echo", 3)) == [[0, 1], [0, 1, 2]]
    assert echo.queue_depth == 0


async def test_each_request_carries_its_session_into_the_worker(echo: EngineProcess) -> None:
    session = object()

    async def as_session() -> list[Any]:
        current_owner.set(session)
        return await ask(echo, "owner")

    assert await asyncio.create_task(as_session()) == [id(session)]
    assert await ask(echo, "owner") == [None]


async def test_a_hint_carries_its_session_into_the_worker(echo: EngineProcess) -> None:
    session = object()

    async def as_session() -> None:
        current_owner.set(session)
        echo.notify("warm this")

    await asyncio.create_task(as_session())
    echo.notify("no session")
    assert await ask(echo, "hinted") == [[("warm this", id(session)), ("no session", None)]]


async def test_the_queue_is_bounded_in_all_and_per_session(echo: EngineProcess) -> None:
    session = object()

    async def sleeper() -> list[Any]:
        current_owner.set(session)
        return await ask(echo, "sleep", 1.0)

    first = [asyncio.create_task(sleeper()) for _ in range(2)]
    await asyncio.sleep(0.2)
    with pytest.raises(WorkerBusy):
        await asyncio.create_task(sleeper())  # a third from the same session
    other = asyncio.create_task(ask(echo, "sleep", 1.0))  # another session's first
    await asyncio.sleep(0.2)
    with pytest.raises(WorkerBusy):
        await ask(echo, "echo", 1)  # over max_in_flight
    assert await asyncio.gather(*first, other) == [["slept"]] * 3


async def test_a_cancel_stops_the_caller_at_once_and_the_work_in_the_worker(echo: EngineProcess) -> None:
    cancel = CancelToken()
    asyncio.get_running_loop().call_later(0.3, cancel.cancel)
    assert await asyncio.wait_for(ask(echo, "sleep", 30, cancel=cancel), 5) == []
    await asyncio.sleep(0.2)
    assert await ask(echo, "cancelled") == [1]
    assert echo.queue_depth == 0


async def test_a_wedged_worker_is_killed_by_the_ping_and_restarted() -> None:
    process = EngineProcess(python_worker(ECHO), name="echo", ping_interval_s=0.2, ping_timeout_s=1.0,
                            ready_wait_s=30)
    try:
        first = process.pid
        with pytest.raises(WorkerDied):
            await ask(process, "wedge", 60)
        assert await ask(process, "echo", 1) == [0]  # waits for the new worker
        assert process.restarts == 1 and process.pid not in (None, first)
    finally:
        process.close()


def test_a_worker_that_cannot_build_its_engine_says_why() -> None:
    with pytest.raises(WorkerDied, match="this service cannot be built"):
        EngineProcess(python_worker(WorkerSpec("tests.support.echo_service:EchoService", {"fail": True})),
                      name="broken")


def test_a_service_declaring_only_handle_serves_with_the_protocol_defaults() -> None:
    process = EngineProcess(python_worker(WorkerSpec("tests.support.echo_service:BareService"), "bare"), name="bare")
    try:
        assert process.info == {}, "describe() by default: nothing to say with ready"
        assert asyncio.run(ask(process, "echo", 3)) == [0, 1, 2]
        process.notify("a hint it ignores")
        assert asyncio.run(ask(process, "echo", 1)) == [0], "the hint reached no probe: the worker lives on"
    finally:
        process.close()


def test_a_spec_that_builds_no_service_is_refused_at_start() -> None:
    with pytest.raises(WorkerDied, match="FakeRecognizer, not a Service"):
        EngineProcess(python_worker(WorkerSpec("bargein.engines.fakes:FakeRecognizer")), name="not-a-service")


def test_a_bare_engine_describes_itself() -> None:
    assert WorkerSpec("bargein.engines.fakes:FakeRecognizer").build_engine()[1] == "FakeRecognizer"
    assert WorkerSpec("bargein.engines.fakes:FakeSynthesizer").build_engine()[1] == "FakeSynthesizer"


ATTEMPTS = 20
"""Sessions ended in turn until a new one takes an ended one's memory (in a long test run the allocator may have
given one ended session's block to another object already)."""


class _Session:
    """A session as the server holds one: weakly referable, freed when it ends (so its ``id()`` is reused)."""


async def test_a_new_session_never_carries_an_ended_sessions_key_into_the_worker(echo: EngineProcess) -> None:
    """The LLM worker keeps each session's KV snapshots under the key its requests carry: a session that got the
    key of one that ended would be served that conversation whole, and its first-token time would tell it."""
    import gc
    import weakref

    async def as_session(session: _Session) -> list[Any]:
        current_owner.set(session)
        return await ask(echo, "owner")

    held: list[_Session] = []
    for _ in range(ATTEMPTS):  # another object of the same size may take the freed memory first: end another one
        ended = _Session()
        ended_id, alive = id(ended), weakref.ref(ended)
        ended_key = await asyncio.create_task(as_session(ended))
        del ended
        for _ in range(5):  # the request's last callbacks (and their contexts) go on the next few loop turns
            await asyncio.sleep(0.01)
        gc.collect()
        assert alive() is None, "the ended session is still referenced"
        new = _Session()
        while id(new) != ended_id and len(held) % 10_000 != 9_999:  # CPython hands the freed memory on soon
            held.append(new)
            new = _Session()
        held.append(new)
        if id(new) == ended_id:
            break
    assert id(new) == ended_id, "no new session took an ended one's memory: the test would prove nothing"
    assert await asyncio.create_task(as_session(new)) != ended_key
