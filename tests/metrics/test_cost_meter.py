"""CPU accounting: a worker process measures each request's CPU and the cost crosses the process boundary to the
bill the calling session took; the split among requests in flight; the in-process measure."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bargein.engines.process.supervisor import EngineProcess, python_worker
from bargein.engines.process.wire import WorkerSpec
from bargein.metrics.cost_meter import STAGE_CPU, Bill, RequestMeter, current_meter, measured
from bargein.values import CancelToken

BURN = WorkerSpec("tests.support.burn_service:BurnService")


class RecordingMeter:
    """A session's meter that records every charge with the label it was billed under."""

    def __init__(self) -> None:
        self.label = "first"
        self.charges: list[tuple[str, str, float]] = []
        self.charged = asyncio.Event()

    def bill(self) -> Bill:
        label = self.label

        def charge(stage: str, cpu_s: float) -> None:
            self.charges.append((label, stage, cpu_s))
            self.charged.set()

        return charge


@pytest.fixture
def burner() -> Iterator[EngineProcess]:
    process = EngineProcess(python_worker(BURN, "burn"), name="burner", stage="burn-test")
    try:
        yield process
    finally:
        process.close()


async def test_a_request_cpu_measured_in_the_worker_reaches_the_session_bill(burner: EngineProcess) -> None:
    meter = RecordingMeter()
    current_meter.set(meter)
    before = STAGE_CPU.total("burn-test")
    spun = [item async for item in burner.stream(("burn", 0.3), CancelToken())]
    assert spun[0] >= 0.3
    assert [(label, stage) for label, stage, _ in meter.charges] == [("first", "burn-test")]
    charged = meter.charges[0][2]
    # the worker's process CPU over the request: the spin, plus the little the loop and pipe cost around it
    assert spun[0] <= charged <= spun[0] + 0.1
    assert STAGE_CPU.total("burn-test") - before >= charged


async def test_a_cancelled_request_is_charged_what_it_burned_to_the_turn_it_started_in(
        burner: EngineProcess) -> None:
    meter = RecordingMeter()
    current_meter.set(meter)
    cancel = CancelToken()

    async def cut() -> None:
        await asyncio.sleep(0.3)
        meter.label = "second"  # a barge-in: the next turn is current now
        cancel.cancel("barge-in")

    cutting = asyncio.ensure_future(cut())
    assert [item async for item in burner.stream(("burn", 5.0), cancel)] == []
    await cutting
    await asyncio.wait_for(meter.charged.wait(), 5.0)  # the cost comes after the caller stopped waiting
    assert len(meter.charges) == 1
    label, stage, cpu_s = meter.charges[0]
    assert (label, stage) == ("first", "burn-test")
    assert 0.05 < cpu_s < 2.0


def test_the_process_cpu_is_split_among_the_requests_in_flight_and_idle_cpu_is_background() -> None:
    now = [0.0]
    meter = RequestMeter(lambda: now[0])
    now[0] = 1.0  # nothing in flight: background
    meter.start(1)
    now[0] = 3.0  # request 1 alone: 2 s
    meter.start(2)
    now[0] = 5.0  # both: 1 s each
    assert meter.finish(1) == {"cpu_s": 3.0, "background_cpu_s": 1.0}
    now[0] = 5.5
    assert meter.finish(2) == {"cpu_s": 1.5, "background_cpu_s": 0.0}
    assert 2 not in meter


def test_in_process_work_is_measured_on_the_calling_thread() -> None:
    charges: list[tuple[str, float]] = []
    with measured("vad", lambda stage, cpu_s: charges.append((stage, cpu_s))):
        end = time.thread_time() + 0.05
        while time.thread_time() < end:
            pass
        time.sleep(0.1)  # waiting is not CPU
    assert charges[0][0] == "vad"
    assert 0.05 <= charges[0][1] < 0.09


async def test_a_scene_read_is_charged_to_the_see_stage_of_the_session_that_sent_the_frame() -> None:
    from bargein.see.scene_pool import ScenePool
    from tests.see.test_scene import EmptyDetectors, frame_of
    from tests.support.pictures import scene

    meter = RecordingMeter()
    current_meter.set(meter)
    pool = ScenePool(EmptyDetectors)
    noted = asyncio.Event()
    pool.submit("session", frame_of(scene(1)), None, lambda note: noted.set())
    await asyncio.wait_for(noted.wait(), 10.0)
    await pool.aclose()
    assert [(label, stage) for label, stage, _ in meter.charges] == [("first", "see")]
    assert meter.charges[0][2] > 0.0  # the image statistics cost some CPU even with no detectors


async def test_a_hub_relays_the_cost_to_its_client_which_charges_it_once(tmp_path: Path) -> None:
    from bargein.engines.process.shared import EngineHub, socket_path
    from bargein.engines.process.spawn import Launch

    engine = EngineProcess(python_worker(BURN, "burn"), name="burner", stage="burn-hub")
    hub = EngineHub(engine, socket_path(str(tmp_path), "burn"))
    session_side = EngineProcess(Launch(("unused",), connect=hub.path), name="burn-client", stage="burn-hub",
                                 ready_wait_s=30)
    try:
        meter = RecordingMeter()
        current_meter.set(meter)
        before = STAGE_CPU.total("burn-hub")
        spun = [item async for item in session_side.stream(("burn", 0.2), CancelToken())]
        assert [(label, stage) for label, stage, _ in meter.charges] == [("first", "burn-hub")]
        assert spun[0] <= meter.charges[0][2] <= spun[0] + 0.1
        # the hub (in this test, the same process) relays it and charges nothing itself: counted once
        assert STAGE_CPU.total("burn-hub") - before == pytest.approx(meter.charges[0][2], abs=0.05)
    finally:
        session_side.close()
        hub.close()
        engine.close()
