"""The end-of-turn model's CPU share: the default endpoint's scores are shed once it is spent, and the turn
then ends on plain silence; ``semantic_vad``'s scores, which a client asked for, always run."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from bargein.config import Settings
from bargein.engines.base import Engines, TurnModelBusy
from bargein.engines.cpu_budget import CpuBudget
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.engines.listen.smart_turn import SmartTurn
from bargein.metrics.prometheus import ServerMetrics
from bench.harness.server_scrape import parse_metrics, scored_share
from tests.core.test_tiered_endpoint import TWO_BURSTS
from tests.support.session_harness import Harness
from tests.support.tones import stream


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_bucket_admits_while_not_empty_and_refills_at_the_share() -> None:
    clock = _Clock()
    budget = CpuBudget(0.25, burst_s=4.0, clock=clock)
    assert budget.available == pytest.approx(1.0), "it starts full: share x burst"
    admitted = 0
    while budget.admit(0.3):
        admitted += 1
    assert admitted == 4, "1.0 s of CPU: the fourth 0.3 s pass still gets in, the fifth does not"
    clock.now += 1.0
    assert budget.available == pytest.approx(0.25 - 0.2), "a second refills a quarter of a CPU second"
    assert budget.admit(0.3)
    clock.now += 3600.0
    assert budget.available == pytest.approx(1.0), "never more than the burst"


def test_what_a_pass_really_cost_replaces_what_was_held_back() -> None:
    clock = _Clock()
    budget = CpuBudget(0.5, burst_s=2.0, clock=clock)
    assert budget.admit(0.03)
    budget.settle(0.03, 0.5)  # a pass that cost far more than guessed
    assert budget.available == pytest.approx(0.5)
    assert budget.admit(0.03)
    budget.settle(0.03, 0.0)  # withdrawn before it ran
    assert budget.available == pytest.approx(0.5), "a request that never ran costs nothing"
    budget.settle(0.0, 1.0)
    assert not budget.admit(0.03), "spent: refused until it refills"
    clock.now += 0.9
    assert not budget.admit(0.03), "0.45 of the 0.5 s overspent is back"
    clock.now += 0.2
    assert budget.admit(0.03)


def test_a_share_must_be_positive() -> None:
    for share in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="positive"):
            CpuBudget(share)
    with pytest.raises(ValueError):
        Settings(turn_model_cpu_share=0)


class _BurningModel:
    """Spends ``cpu_s`` of this thread's CPU per clip, as a forward pass would."""

    def __init__(self, cpu_s: float, answer: float = 0.99) -> None:
        self.cpu_s = cpu_s
        self.answer = answer
        self.clips = 0

    def probabilities(self, clips: list[np.ndarray]) -> np.ndarray:
        end = time.thread_time() + self.cpu_s * len(clips)
        while time.thread_time() < end:
            pass
        self.clips += len(clips)
        return np.full(len(clips), self.answer, np.float32)


async def test_optional_scores_are_refused_once_the_model_has_spent_its_share() -> None:
    model = _BurningModel(0.05)
    turn = SmartTurn(model, cpu_share=0.25)  # type: ignore[arg-type]
    clock = _Clock()
    turn.budget = CpuBudget(0.25, burst_s=0.3, clock=clock)  # 75 ms of CPU to spend
    audio = np.zeros(1600, np.float32)
    assert await turn.probability(audio, optional=True) == pytest.approx(0.99)
    assert turn.pass_cpu_s > 0.03, "the pass's measured CPU moves the estimate"
    assert await turn.probability(audio, optional=True) == pytest.approx(0.99), "a little was left: admitted"
    with pytest.raises(TurnModelBusy):
        await turn.probability(audio, optional=True)
    assert model.clips == 2 and turn.scores_shed == 1, "a refused score never runs"
    assert await turn.probability(audio) == pytest.approx(0.99), "a score that is not optional always runs"
    clock.now += 10.0
    assert await turn.probability(audio, optional=True) == pytest.approx(0.99), "refilled: admitted again"
    await turn.aclose()


async def test_without_a_share_nothing_is_refused() -> None:
    turn = SmartTurn(_BurningModel(0.0))  # type: ignore[arg-type]
    assert turn.budget is None
    results = await asyncio.gather(*(turn.probability(np.zeros(160, np.float32), optional=True) for _ in range(5)))
    assert results == pytest.approx([0.99] * 5) and turn.scores_shed == 0
    await turn.aclose()


async def test_a_withdrawn_request_gives_back_what_it_held() -> None:
    class _Gated(_BurningModel):
        def __init__(self) -> None:
            super().__init__(0.0)
            self.gate = asyncio.Event()

        def probabilities(self, clips: list[np.ndarray]) -> np.ndarray:
            while not self.gate.is_set():
                time.sleep(0.005)
            return super().probabilities(clips)

    model = _Gated()
    turn = SmartTurn(model, cpu_share=0.25)  # type: ignore[arg-type]
    turn.budget = CpuBudget(0.25, clock=_Clock())
    full = turn.budget.available
    running = asyncio.create_task(turn.probability(np.zeros(160, np.float32)))  # holds the worker
    await asyncio.sleep(0.05)
    waiting = asyncio.create_task(turn.probability(np.zeros(160, np.float32), optional=True))
    await asyncio.sleep(0.01)
    assert turn.budget.available == pytest.approx(full - turn.pass_cpu_s), "held back while it waits"
    waiting.cancel()  # its silence ended before it ran
    model.gate.set()
    await running
    await asyncio.sleep(0.05)
    assert model.clips == 1 and turn.budget.available == pytest.approx(full), "given back, never run"
    await turn.aclose()


def _spent_model() -> tuple[SmartTurn, _BurningModel]:
    model = _BurningModel(0.0)
    turn = SmartTurn(model, cpu_share=0.25)  # type: ignore[arg-type]
    turn.budget = CpuBudget(0.25, clock=_Clock())
    turn.budget.settle(0.0, 10.0)  # other sessions spent the share
    return turn, model


def _harness(turn: SmartTurn) -> Harness:
    engines = Engines(FakeVad(), FakeRecognizer(("Can you call the dentist tomorrow?",)),
                      FakeLanguageModel(filler="Sure."), FakeSynthesizer(), turn)
    return Harness(engines, tiered_default=True)


async def test_a_shed_score_leaves_the_default_session_on_plain_silence() -> None:
    turn, model = _spent_model()
    h = _harness(turn)
    await stream(h, TWO_BURSTS)  # a 350 ms pause: an early end with a score, no end on plain 500 ms
    await h.drain(until="response.done")
    assert h.types().count("input_audio_buffer.committed") == 1, "no score: the 350 ms pause is no end"
    assert turn.scores_shed >= 1 and model.clips == 0
    assert "error" not in h.types(), "shedding is no error the client hears of"
    metrics = ServerMetrics()
    metrics.watch_turn_model(turn)
    text = metrics.exposition().decode()
    assert f'bargein_turn_end_scores_total{{outcome="shed"}} {float(turn.scores_shed)}' in text
    assert 'bargein_turn_end_scores_total{outcome="run"} 0.0' in text
    shed = parse_metrics(text)
    turn.clips_run += 3  # three more run, none shed: what bench.capacity.sessions reports for a window
    assert scored_share(shed, parse_metrics(metrics.exposition().decode())) == pytest.approx(1.0)
    assert scored_share(parse_metrics(""), shed) == pytest.approx(0.0)
    await h.session.close()
    await turn.aclose()


async def test_semantic_vad_scores_are_never_shed() -> None:
    turn, model = _spent_model()
    h = _harness(turn)
    await h.send(type="session.update", session={"audio": {"input": {"turn_detection": {"type": "semantic_vad"}}}})
    await stream(h, TWO_BURSTS)
    await h.drain(until="response.done")
    assert model.clips >= 1 and turn.scores_shed == 0, "the client asked for the model: it runs"
    await h.session.close()
    await turn.aclose()


_ACCOUNTING = """
import time
import bargein
import numpy as np
from bargein.engines.listen.smart_turn import SmartTurnModel
model = SmartTurnModel()
clip = np.random.default_rng(0).standard_normal(16000 * 6).astype(np.float32) * 0.1
model.probabilities([clip])
process, thread = time.process_time(), time.thread_time()
for _ in range(5):
    model.probabilities([clip])
print((time.process_time() - process) / (time.thread_time() - thread))
"""


def test_a_pass_spends_its_cpu_in_the_thread_that_is_charged_for_it() -> None:
    """The budget charges a pass the CPU of the thread that ran it. The features' matrix product must run there
    too (one BLAS thread, as importing bargein sets), or OpenBLAS's helper threads spend a good part of each pass
    (about 0.6 of it again on two cores) where the budget cannot see it."""
    environment = {key: value for key, value in os.environ.items() if key != "OPENBLAS_NUM_THREADS"}
    ran = subprocess.run([sys.executable, "-c", _ACCOUNTING], capture_output=True, text=True, timeout=120,
                         env=environment, check=True)
    assert float(ran.stdout.strip().splitlines()[-1]) < 1.2, ran.stdout
