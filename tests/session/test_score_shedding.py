"""An end-of-turn score that could no longer count is withdrawn from the shared model, not run."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import numpy as np
import pytest

from bargein.engines.base import EndOfTurnModel, Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.engines.listen.smart_turn import SmartTurn
from bargein.values import Float32Audio
from tests.support.session_harness import Harness
from tests.support.tones import quiet, stream, tone


class StuckTurnModel(EndOfTurnModel):
    """An end-of-turn model that never answers (a queue too long to reach this request in time)."""

    window_seconds = 8

    def __init__(self) -> None:
        self.asked = 0
        self.withdrawn = 0

    async def probability(self, audio: Float32Audio, *, optional: bool = False) -> float:
        self.asked += 1
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.withdrawn += 1
            raise
        raise AssertionError("unreachable")


async def eventually(condition: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    """Whether ``condition`` holds within ``timeout_s`` (the session's tasks run meanwhile)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


async def pause_being_scored() -> tuple[Harness, StuckTurnModel, FakeRecognizer]:
    """A session whose user spoke and paused: the pause's end-of-turn score is waiting on the model."""
    turn = StuckTurnModel()
    asr = FakeRecognizer(("hello there friend.",))
    h = Harness(Engines(FakeVad(), asr, FakeLanguageModel(), FakeSynthesizer(), turn=turn))
    await stream(h, np.concatenate([tone(0.8), quiet(0.25)]))
    assert await eventually(lambda: turn.asked == 1)
    assert turn.withdrawn == 0, "the pause is being scored"
    return h, turn, asr


async def test_a_score_is_withdrawn_when_speech_resumes_and_when_the_turn_ends_without_it() -> None:
    h, turn, _ = await pause_being_scored()
    await stream(h, tone(0.6))
    assert await eventually(lambda: turn.withdrawn == 1), "speech came back: that pause's score can no longer count"
    await stream(h, quiet(1.0))
    await h.drain(until="input_audio_buffer.committed")
    assert await eventually(lambda: turn.withdrawn == 2), "the turn ended on the plain silence: its score is withdrawn"
    assert turn.asked == 2
    await h.session.close()


async def test_a_score_is_withdrawn_when_turn_detection_is_turned_off_during_the_pause() -> None:
    h, turn, asr = await pause_being_scored()
    await h.send(type="session.update", session={"audio": {"input": {"turn_detection": None}}})
    await h.drain(until="session.updated")
    assert await eventually(lambda: turn.withdrawn == 1), "no endpoint can come: the pause's score is withdrawn"
    recognitions = asr.calls
    await stream(h, tone(1.5))
    await asyncio.sleep(0.3)
    assert asr.calls == recognitions, "the abandoned segment gets no more partial recognitions"
    await h.session.close()


async def test_clearing_the_buffer_mid_turn_withdraws_the_score_and_drops_the_guess() -> None:
    h, turn, _ = await pause_being_scored()
    speculator = h.session.executor.speculator
    assert await eventually(lambda: speculator.counts.asr_started == 1), "the pause is being guessed at"
    await h.send(type="input_audio_buffer.clear")
    await h.drain(until="input_audio_buffer.cleared")
    assert await eventually(lambda: turn.withdrawn == 1)
    assert speculator.counts.asr_discarded == 1, "the cleared segment's guess is dropped"
    assert speculator.counts.llm_discarded == speculator.counts.llm_started, "and any reply prefetched for it"
    await h.session.close()


class _BlockingModel:
    """Stands in for the onnx model; the first batch blocks until released, every clip run is recorded."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.clips_run: list[float] = []

    def probabilities(self, clips: list[np.ndarray]) -> np.ndarray:
        self.release.wait(5)
        self.clips_run.extend(float(clip[0]) for clip in clips)
        return np.full(len(clips), 0.5, np.float32)


async def test_a_withdrawn_request_never_reaches_the_model_nor_counts_as_queued() -> None:
    model = _BlockingModel()
    shared = SmartTurn(model)  # type: ignore[arg-type]
    busy = asyncio.create_task(shared.probability(np.full(160, 0.1, np.float32)))
    await asyncio.sleep(0.05)  # the first batch runs and blocks: the next requests queue behind it
    withdrawn = asyncio.create_task(shared.probability(np.full(160, 0.2, np.float32)))
    kept = asyncio.create_task(shared.probability(np.full(160, 0.3, np.float32)))
    await asyncio.sleep(0.01)
    assert shared.queue_depth == 2
    withdrawn.cancel()
    await asyncio.sleep(0)
    assert shared.queue_depth == 1, "a withdrawn request is no load"
    model.release.set()
    assert await busy == pytest.approx(0.5) and await kept == pytest.approx(0.5)
    assert model.clips_run == pytest.approx([0.1, 0.3])
    await shared.aclose()
