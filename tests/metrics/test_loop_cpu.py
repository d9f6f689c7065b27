"""The ``session`` stage: each session's own steps on the shared event loop are charged to that session, measured
on the loop's thread, and nothing else is (another session's, the server's own tasks, CPU already charged to a
stage of its own)."""

from __future__ import annotations

import asyncio
import base64
import contextvars
import json
import time
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import numpy as np
import pytest

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.metrics import loop_cpu
from bargein.metrics.cost_meter import STAGE_CPU, current_meter, measured
from bargein.metrics.loop_cpu import SESSION_STAGE, MeteredCoroutine
from bargein.metrics.prometheus import ServerMetrics
from bargein.session.realtime_session import RealtimeSession
from tests.metrics.test_cost_meter import RecordingMeter


@pytest.fixture
async def metered_loop() -> AsyncIterator[None]:
    loop = asyncio.get_running_loop()
    loop_cpu.install(loop)
    try:
        yield
    finally:
        loop_cpu.uninstall(loop)


def spin(seconds: float) -> None:
    """Burn ``seconds`` of this thread's CPU."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def in_session(meter: RecordingMeter, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
    """A task started the way a session starts its own: with its meter current where the task is created."""
    context = contextvars.copy_context()
    context.run(current_meter.set, meter)
    return asyncio.get_running_loop().create_task(coro, context=context)


def session_cpu(meter: RecordingMeter) -> float:
    return sum(cpu_s for _, stage, cpu_s in meter.charges if stage == SESSION_STAGE)


async def test_each_session_is_charged_its_own_steps_and_an_idle_one_nothing(metered_loop: None) -> None:
    busy, idle = RecordingMeter(), RecordingMeter()

    async def work() -> None:
        for _ in range(5):
            spin(0.02)
            await asyncio.sleep(0)  # the idle session's steps and the loop's own run between these

    async def wait() -> None:
        for _ in range(5):
            await asyncio.sleep(0.01)

    await asyncio.gather(in_session(busy, work()), in_session(idle, wait()))
    assert 0.1 <= session_cpu(busy) < 0.13
    assert session_cpu(idle) < 0.005


async def test_a_step_is_billed_to_the_turn_current_when_it_ran(metered_loop: None) -> None:
    meter = RecordingMeter()

    async def two_turns() -> None:
        spin(0.02)
        await asyncio.sleep(0)
        meter.label = "second"  # the turn changed between the steps
        spin(0.03)

    await in_session(meter, two_turns())
    by_turn = {label: sum(cpu for turn, _, cpu in meter.charges if turn == label) for label in ("first", "second")}
    assert by_turn["first"] == pytest.approx(0.02, abs=0.005)
    assert by_turn["second"] == pytest.approx(0.03, abs=0.005)


async def test_cpu_charged_to_its_own_stage_inside_a_step_is_not_counted_twice(metered_loop: None) -> None:
    meter = RecordingMeter()

    async def listen() -> None:
        with measured("vad", meter.bill()):
            spin(0.04)
        spin(0.01)

    await in_session(meter, listen())
    assert sum(cpu for _, stage, cpu in meter.charges if stage == "vad") == pytest.approx(0.04, abs=0.005)
    assert session_cpu(meter) == pytest.approx(0.01, abs=0.005)


async def test_tasks_outside_a_session_are_plain_and_metered_tasks_behave_like_them(metered_loop: None) -> None:
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    plain = asyncio.get_running_loop().create_task(answer())
    assert not isinstance(plain.get_coro(), MeteredCoroutine)
    assert await plain == 42
    meter = RecordingMeter()
    metered = in_session(meter, answer())
    assert isinstance(metered.get_coro(), MeteredCoroutine)
    assert await metered == 42

    async def fails() -> None:
        await asyncio.sleep(0)
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await in_session(meter, fails())
    cleaned = asyncio.Event()

    async def forever() -> None:
        try:
            await asyncio.sleep(60)
        finally:
            cleaned.set()

    sleeper = in_session(meter, forever())
    await asyncio.sleep(0)
    sleeper.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sleeper
    assert cleaned.is_set()
    # a task the session's task starts is the session's too
    inner = in_session(meter, asyncio.wait_for(answer(), 5))
    assert await inner == 42


def test_a_connection_callback_is_charged_to_the_session_its_scope_names() -> None:
    class Socket:
        def __init__(self) -> None:
            self.scope: dict[str, Any] = {}  # the connection's ASGI scope, as Starlette's WebSocket holds it

    socket, meter = Socket(), RecordingMeter()
    assert loop_cpu.connection_meter(socket.scope) is None  # before its session starts: nobody's
    with loop_cpu.metered_callback(loop_cpu.connection_meter(socket.scope)):
        spin(0.01)
    loop_cpu.meter_connection(socket, meter)
    with loop_cpu.metered_callback(loop_cpu.connection_meter(socket.scope)):  # a frame parsed
        spin(0.02)
    assert [(label, stage) for label, stage, _ in meter.charges] == [("first", SESSION_STAGE)]
    assert session_cpu(meter) == pytest.approx(0.02, abs=0.005)


def _append(samples: int) -> str:
    tone = (np.sin(np.arange(samples) * 0.05) * 8000).astype("<i2")
    return json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(tone.tobytes()).decode()})


async def test_a_session_handling_client_audio_is_charged_and_an_idle_session_is_not(metered_loop: None) -> None:
    def new_session() -> RealtimeSession:
        return RealtimeSession(Engines(FakeVad(), FakeRecognizer(), FakeLanguageModel(), FakeSynthesizer()))

    talking, idle = new_session(), new_session()
    before = STAGE_CPU.total(SESSION_STAGE)

    def started(session: RealtimeSession) -> contextvars.Context:
        context = contextvars.copy_context()  # as the server starts a session: its meter, then its tasks
        context.run(current_meter.set, session.ledgers)
        context.run(session.start)
        return context

    talking_context, idle_context = started(talking), started(idle)
    chunk = _append(480)  # 20 ms at 24 kHz

    async def client() -> None:
        for _ in range(250):  # five seconds of audio: decoded, resampled, heard by the VAD, buffered
            await talking.handle_message(chunk)

    async def nothing() -> None:
        await asyncio.sleep(0.2)

    loop = asyncio.get_running_loop()
    thread_before = time.thread_time()
    await asyncio.gather(loop.create_task(client(), context=talking_context),
                         loop.create_task(nothing(), context=idle_context))
    loop_thread_cpu = time.thread_time() - thread_before
    charged = talking.ledgers.session_cost.cpu_s.get(SESSION_STAGE, 0.0)
    assert 0.01 < charged <= loop_thread_cpu  # measured, and never more than the loop's thread spent
    assert idle.ledgers.session_cost.cpu_s.get(SESSION_STAGE, 0.0) < 0.05 * charged
    assert STAGE_CPU.total(SESSION_STAGE) - before >= charged
    await talking.close()
    await idle.close()


def test_the_server_charges_a_websocket_session_its_own_work_in_its_turn_cost() -> None:
    from websockets.sync.client import connect

    from bargein.config import Settings
    from tests.support.server import free_port, running_server

    engines = Engines(FakeVad(), FakeRecognizer(), FakeLanguageModel(), FakeSynthesizer())
    settings = Settings(port=free_port(), events_per_s=1e6, event_burst=10**6)
    metrics = ServerMetrics()  # counts from here, as the server's own does from its start
    with running_server(engines, settings) as host, \
            connect(f"ws://{host}/v1/realtime?bargein_events=1") as ws:
        ws.send(json.dumps({"type": "session.update",
                            "session": {"audio": {"input": {"turn_detection": None}}}}))
        chunk = _append(480)
        for _ in range(100):
            ws.send(chunk)
        ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        ws.send(json.dumps({"type": "response.create"}))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            event = json.loads(ws.recv(timeout=30))
            if event["type"] == "bargein.turn.cost":
                break
        else:
            pytest.fail("no bargein.turn.cost came")
    assert event["cpu_s"]["session"] > 0.0
    exported = metrics.registry.get_sample_value("bargein_cpu_seconds_total", {"stage": "session"})
    assert exported is not None and exported >= event["cpu_s"]["session"]
