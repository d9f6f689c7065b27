"""Fair shares of the shared engines, and prompt fitting without quadratic work."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from bargein.engines.fair import FairExecutor, FairQueue, current_owner, urgent, urgent_task
from bargein.engines.think.llm_prompt import TokenCounts, fit_history
from bargein.engines.transcribe.whisper_asr import RecognizerBusy, WhisperRecognizer
from bargein.values import ChatMessage, Transcript


def test_the_fair_queue_serves_owners_in_turn() -> None:
    queue: FairQueue[str] = FairQueue()
    for i in range(100):
        queue.put("flood", f"f{i}")
    queue.put("honest", "h0")
    queue.put("honest", "h1")
    order = [queue.pop()[1] for _ in range(5)]
    assert order == ["f0", "h0", "f1", "h1", "f2"]
    owner, item = queue.pop()
    queue.put_front(owner, item)  # work that goes on keeps its place at the head of its owner's queue
    assert queue.waiting("flood") == 97 and queue.pop()[1] == "f3" and len(queue) == 96


def test_the_fair_executor_lets_a_second_session_in_before_a_first_sessions_flood() -> None:
    executor = FairExecutor(1, "test")
    gate = threading.Event()
    ran: list[str] = []

    def job(name: str) -> None:
        gate.wait(5)
        ran.append(name)

    async def submit(owner: str, count: int) -> list[Any]:
        current_owner.set(owner)
        return [asyncio.wrap_future(executor.submit(job, f"{owner}{i}")) for i in range(count)]

    async def scenario() -> None:
        flood = await asyncio.create_task(submit("a", 50))
        honest = await asyncio.create_task(submit("b", 1))
        gate.set()
        await asyncio.gather(*flood, *honest)

    asyncio.run(scenario())
    executor.shutdown()
    assert ran.index("b0") <= 2  # behind at most the job running and one of the flood


class _GatedCore:
    """Stands in for WhisperCore: each call waits for the gate and records whose clip it was."""

    def __init__(self) -> None:
        self.order: list[float] = []
        self.gate = threading.Event()
        self.entered = threading.Event()

    def transcribe(self, audio: Any, **_: Any) -> Transcript:
        self.entered.set()
        self.gate.wait(10)
        self.order.append(float(audio[0]))
        return Transcript(text="x")


def test_a_flood_of_finals_from_one_session_does_not_delay_another() -> None:
    core = _GatedCore()
    recognizer = WhisperRecognizer(core, max_waiting_per_session=4)  # type: ignore[arg-type]

    async def submit(marker: float, count: int) -> list[Any]:
        current_owner.set(marker)
        return [asyncio.ensure_future(recognizer.transcribe(np.full(160, marker, np.float32))) for _ in range(count)]

    async def scenario() -> None:
        blocker = await asyncio.create_task(submit(9.0, 1))
        await asyncio.sleep(0)
        await asyncio.to_thread(core.entered.wait, 10)  # the worker is busy: what follows all waits
        flood = await asyncio.create_task(submit(1.0, 4))
        honest = await asyncio.create_task(submit(2.0, 1))
        await asyncio.sleep(0)
        (over,) = await asyncio.create_task(submit(1.0, 1))
        with pytest.raises(RecognizerBusy):  # one session may not queue more than its share
            await over
        core.gate.set()
        await asyncio.gather(*blocker, *flood, *honest)
        await recognizer.aclose()

    asyncio.run(scenario())
    assert core.order[:3] == [9.0, 1.0, 2.0]  # the honest final is second in line, not fifth


def test_an_urgent_final_goes_before_every_other_waiting_recognition() -> None:
    core = _GatedCore()
    recognizer = WhisperRecognizer(core)  # type: ignore[arg-type]

    async def scenario() -> None:
        def clip(marker: float) -> Any:
            return np.full(160, marker, np.float32)

        blocker = asyncio.ensure_future(recognizer.transcribe(clip(9.0)))
        await asyncio.to_thread(core.entered.wait, 10)  # the worker is busy: what follows all waits
        partial = asyncio.ensure_future(recognizer.transcribe_partial(clip(3.0), key="other"))
        finals = [asyncio.ensure_future(recognizer.transcribe(clip(1.0))) for _ in range(3)]
        stop = urgent_task(recognizer.transcribe(clip(5.0)))  # "stop" over a paused reply, asked for last
        after = urgent_task(recognizer.transcribe(clip(6.0)))
        plain = urgent_task(recognizer.transcribe(clip(2.0)), urgent=False)
        await asyncio.sleep(0.01)
        assert recognizer.waiting == 7
        core.gate.set()
        await asyncio.gather(blocker, partial, *finals, stop, after, plain)
        await recognizer.aclose()

    asyncio.run(scenario())
    # behind only the recognition already running; urgent ones in order, then finals, then the partial
    assert core.order == [9.0, 5.0, 6.0, 1.0, 1.0, 1.0, 2.0, 3.0]


def test_urgency_belongs_to_the_task_it_was_given_to() -> None:
    async def scenario() -> tuple[bool, bool, bool]:
        async def read() -> bool:
            return urgent()
        return await urgent_task(read()), await asyncio.create_task(read()), urgent()

    assert asyncio.run(scenario()) == (True, False, False)


def _render_counting(calls: list[int]) -> Any:
    def render(messages: Sequence[ChatMessage]) -> list[int]:
        calls.append(len(messages))
        return [0] * sum(len(m.content) // 4 + 3 for m in messages)
    return render


def test_fitting_a_long_history_renders_it_once_or_twice_not_once_per_dropped_message() -> None:
    history = [ChatMessage("system", "s" * 40)] + [
        ChatMessage("user" if i % 2 else "assistant", f"{i} " + "a" * 498) for i in range(400)]
    counted: list[ChatMessage] = []

    def count(message: ChatMessage) -> int:
        counted.append(message)
        return len(message.content) // 4 + 3

    costs = TokenCounts(count)
    calls: list[int] = []
    tokens = fit_history(history, costs, 4000, _render_counting(calls))
    assert len(tokens) <= 4000 and len(calls) <= 2
    assert calls[-1] >= 30  # it kept as much of the newest history as fits
    # the next turn repeats the history: nothing is counted again
    counted.clear()
    fit_history([*history, ChatMessage("user", "and now?")], costs, 4000, _render_counting([]))
    assert [m.content for m in counted] == ["and now?"]


def test_fitting_keeps_the_system_prompt_and_the_last_message_and_trusts_the_render_over_the_estimate() -> None:
    history = [ChatMessage("system", "rules"), ChatMessage("user", "old " * 50), ChatMessage("assistant", "mid " * 50),
               ChatMessage("user", "new")]
    calls: list[int] = []

    def render(messages: Sequence[ChatMessage]) -> list[int]:
        calls.append(len(messages))
        return [0] * (60 * len(messages))  # costlier than the estimate says

    tokens = fit_history(history, lambda m: 1, 150, render)
    assert calls[-1] == 2 and len(tokens) == 120  # system + newest; the estimate was wrong, the render decides


def test_the_fair_queue_hands_over_one_owners_items() -> None:
    queue: FairQueue[str] = FairQueue()
    for owner, item in [("a", "a0"), ("b", "b0"), ("a", "a1"), ("c", "c0")]:
        queue.put(owner, item)
    assert queue.take("a") == ["a0", "a1"] and queue.take("a") == []
    assert len(queue) == 2 and [queue.pop()[1] for _ in range(2)] == ["b0", "c0"]


class _PartialGatedCore(_GatedCore):
    """Partials (clips marked 3.0) wait for the gate; finals run at once."""

    def __init__(self) -> None:
        super().__init__()
        self.partial_threads: list[str] = []

    def transcribe(self, audio: Any, **kwargs: Any) -> Transcript:
        if float(audio[0]) == 3.0:
            self.partial_threads.append(threading.current_thread().name)
            return super().transcribe(audio, **kwargs)
        self.order.append(float(audio[0]))
        return Transcript(text="x")


@pytest.mark.parametrize("final_workers", [0, 1])
def test_a_finals_worker_recognises_a_pause_while_a_partial_runs(final_workers: int) -> None:
    core = _PartialGatedCore()
    recognizer = WhisperRecognizer(core, final_workers=final_workers)  # type: ignore[arg-type]

    async def scenario() -> bool:
        partial = asyncio.ensure_future(recognizer.transcribe_partial(np.full(160, 3.0, np.float32), key="a"))
        await asyncio.to_thread(core.entered.wait, 10)  # the partial runs and holds its worker
        final = asyncio.ensure_future(recognizer.transcribe(np.full(160, 1.0, np.float32)))
        done, _ = await asyncio.wait([final], timeout=0.5)
        core.gate.set()
        await asyncio.gather(partial, final)
        # a second partial is taken by the general worker only: it still runs
        await recognizer.transcribe_partial(np.full(160, 3.0, np.float32), key="a")
        await recognizer.aclose()
        return final in done

    assert asyncio.run(scenario()) is bool(final_workers)
    assert core.order == ([1.0, 3.0, 3.0] if final_workers else [3.0, 1.0, 3.0])
    assert core.partial_threads == ["whisper-worker"] * 2  # a finals worker never takes a partial
