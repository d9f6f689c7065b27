"""A shared engine's refusal for load (its queue is full, for everyone or for one session) fails that call for
its caller but says nothing of the engine's health: it is neither a failure nor a success, so one session
that fills its own share cannot take a stage down for every session."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest

from bargein.engines.base import SpeechRecognizer
from bargein.engines.fair import current_owner
from bargein.engines.fakes import FakeSynthesizer
from bargein.engines.health import StageHealth
from bargein.engines.process.shared import EngineHub, socket_path
from bargein.engines.process.spawn import Launch, python_worker
from bargein.engines.process.supervisor import EngineProcess
from bargein.engines.process.wire import WorkerBusy, WorkerError, WorkerSpec
from bargein.engines.resilience import LLM_APOLOGY, ResilientLanguageModel, ResilientRecognizer, ResilientVad
from bargein.engines.resilient_speech import ResilientSynthesizer
from bargein.engines.stage_calls import Deadlines, StageFailed
from bargein.engines.transcribe.whisper_asr import RecognizerBusy, WhisperRecognizer
from bargein.values import CancelToken, ChatMessage, GenerationOptions, SpeechChunk, Transcript

AUDIO = np.zeros(1600, np.float32)
ECHO = WorkerSpec("tests.support.echo_service:EchoService")
T = TypeVar("T")


def _busy() -> Exception:
    return WorkerBusy("asr: 64 requests are already in flight")


class _Refusing:
    """Raises ``error`` (a refusal, or a real failure) from every call of every stage."""

    sample_rate = 24_000
    frame_samples = 512

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def transcribe(self, audio: np.ndarray, *, language: str | None = None,
                         prompt: str | None = None) -> Transcript:
        raise self.error

    async def stream(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                     options: GenerationOptions | None = None) -> AsyncIterator[str]:
        raise self.error
        yield "never"

    async def synthesize(self, text: str, *, voice: str | None, cancel: CancelToken,
                         speed: float = 1.0) -> AsyncIterator[SpeechChunk]:
        raise self.error
        yield SpeechChunk(np.zeros(10, np.float32), self.sample_rate)

    def open_stream(self) -> _Refusing:
        return self

    async def probability(self, frame: np.ndarray) -> float:
        raise self.error

    def reset(self) -> None:
        """Nothing to reset."""

    def close(self) -> None:
        """Nothing to close."""


@pytest.mark.parametrize("refusal", [WorkerBusy("asr: 512 requests are already in flight"),
                                     RecognizerBusy("8 final transcriptions are already waiting")],
                         ids=["WorkerBusy", "RecognizerBusy"])
async def test_asr_refusals_fail_the_call_but_leave_the_stage_ok(refusal: Exception) -> None:
    health = StageHealth("asr")
    asr = ResilientRecognizer(_Refusing(refusal), health, Deadlines())  # type: ignore[arg-type]
    for _ in range(3):
        with pytest.raises(StageFailed, match="speech recognition failed"):  # that caller's call still fails
            await asr.transcribe(AUDIO)
    assert health.state == "ok"
    assert (health.failures, health.consecutive_failures, health.refusals) == (0, 0, 3)
    assert health.snapshot()["refusals"] == 3


async def test_three_real_asr_errors_in_a_row_still_take_the_stage_down() -> None:
    health = StageHealth("asr")
    asr = ResilientRecognizer(_Refusing(RuntimeError("CUDA error")), health, Deadlines())  # type: ignore[arg-type]
    for _ in range(3):
        with pytest.raises(StageFailed):
            await asr.transcribe(AUDIO)
    assert health.state == "down" and (health.failures, health.refusals) == (3, 0)
    health.close()


async def test_a_refusal_between_real_errors_neither_breaks_nor_extends_the_run() -> None:
    """Not a success either: two errors, a refusal, a third error is three failures in a row."""
    engine = _Refusing(RuntimeError("CUDA error"))
    health = StageHealth("asr")
    asr = ResilientRecognizer(engine, health, Deadlines())  # type: ignore[arg-type]
    for error in (RuntimeError("CUDA error"), RuntimeError("CUDA error"), _busy(), RuntimeError("CUDA error")):
        engine.error = error
        with pytest.raises(StageFailed):
            await asr.transcribe(AUDIO)
    assert health.state == "down" and health.consecutive_failures == 3
    health.close()


async def test_vad_refusals_leave_the_stage_ok() -> None:
    health = StageHealth("vad")
    vad = ResilientVad(_Refusing(_busy()), health, Deadlines())  # type: ignore[arg-type]
    stream = vad.open_stream()
    for _ in range(3):
        with pytest.raises(StageFailed, match="voice activity detection failed"):
            await stream.probability(np.zeros(512, np.float32))
    assert health.state == "ok" and (health.failures, health.refusals) == (0, 3)


async def test_llm_refusals_are_answered_with_the_apology_and_leave_the_stage_ok() -> None:
    health = StageHealth("llm")
    llm = ResilientLanguageModel(_Refusing(_busy()), health, Deadlines())  # type: ignore[arg-type]
    for _ in range(3):
        reply = [token async for token in llm.stream([ChatMessage("user", "hi")], cancel=CancelToken())]
        assert reply == [LLM_APOLOGY]  # what the user hears is unchanged
    assert health.state == "ok" and (health.failures, health.refusals) == (0, 3)


async def test_tts_refusals_are_spoken_by_the_fallback_and_leave_the_stage_ok() -> None:
    health = StageHealth("tts")
    tts = ResilientSynthesizer(_Refusing(_busy()), FakeSynthesizer(ms_per_char=5, chunk_ms=20),  # type: ignore[arg-type]
                               health, Deadlines())
    for _ in range(3):
        chunks = [chunk async for chunk in tts.synthesize("Hello there.", voice=None, cancel=CancelToken())]
        assert chunks  # the fallback speaks the clause, as for a failure
    assert tts.fallback_clauses == 3
    assert health.state == "ok" and (health.failures, health.refusals) == (0, 3)


# -- one session filling its own share, another session's turn ---------------------------------------------

async def _until(condition: Callable[[], bool]) -> None:
    """Wait for ``condition`` (a count kept by another thread or process, so there is no event to await); the
    bound only stops a broken test from hanging."""
    deadline = asyncio.get_running_loop().time() + 30
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("the condition never held")
        await asyncio.sleep(0.01)


async def _as_session(session: object, call: Awaitable[T]) -> T:
    """``call`` in a task of ``session`` (the engines read the owner from the task's context)."""
    context = contextvars.copy_context()
    context.run(current_owner.set, session)

    async def run() -> T:
        return await call

    return await asyncio.get_running_loop().create_task(run(), context=context)


class _GatedCore:
    """Stands in for WhisperCore: every pass waits for the gate."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.entered = threading.Event()

    def transcribe(self, audio: Any, **_: Any) -> Transcript:
        self.entered.set()
        self.gate.wait(30)
        return Transcript(text="heard")


async def test_a_session_filling_its_recogniser_share_does_not_take_asr_down_for_a_bystander() -> None:
    """Session A has its share of finals waiting (speculative recognitions): its next three are refused
    (RecognizerBusy). Before, that was three failures in a row and ASR went down for session B too."""
    core = _GatedCore()
    recognizer = WhisperRecognizer(core, max_waiting_per_session=2)  # type: ignore[arg-type]
    health = StageHealth("asr")
    asr = ResilientRecognizer(recognizer, health, Deadlines(asr_s=60))
    a, b = object(), object()
    running = asyncio.ensure_future(_as_session(a, asr.transcribe(AUDIO)))
    await asyncio.to_thread(core.entered.wait, 30)  # the recogniser is busy with A's first: the rest waits
    waiting = [asyncio.ensure_future(_as_session(a, asr.transcribe(AUDIO))) for _ in range(2)]
    await _until(lambda: recognizer.queue_depth == 2)  # A's share is full
    for _ in range(3):
        with pytest.raises(StageFailed):
            await _as_session(a, asr.transcribe(AUDIO))
    assert health.state == "ok"
    bystander = asyncio.ensure_future(_as_session(b, asr.transcribe(AUDIO)))
    core.gate.set()
    assert (await asyncio.wait_for(bystander, timeout=30)).text == "heard"
    await asyncio.wait_for(asyncio.gather(running, *waiting), timeout=30)
    assert (health.failures, health.refusals) == (0, 3)
    await recognizer.aclose()


class _EchoRecognizer(SpeechRecognizer):
    """A recogniser that is a request to a worker process (as the Whisper worker's client is)."""

    def __init__(self, process: EngineProcess) -> None:
        self.process = process

    async def transcribe(self, audio: np.ndarray, *, language: str | None = None,
                         prompt: str | None = None) -> Transcript:
        request = ("sleep", 60) if language == "hold" else ("echo", 1)
        return Transcript(str([item async for item in self.process.stream(request, CancelToken())]))


@pytest.fixture
def echo() -> Iterator[EngineProcess]:
    process = EngineProcess(python_worker(ECHO, "echo"), name="echo", max_per_owner=2)
    try:
        yield process
    finally:
        process.close()


async def test_a_session_filling_its_worker_share_does_not_take_asr_down_for_a_bystander(
        echo: EngineProcess) -> None:
    """Session A holds its per-session cap of requests to the worker; its next three are refused
    (WorkerBusy, raised on the caller's side). Session B's recognition is still made."""
    health = StageHealth("asr")
    asr = ResilientRecognizer(_EchoRecognizer(echo), health, Deadlines(asr_s=120))  # type: ignore[arg-type]
    a, b = object(), object()
    held = [asyncio.ensure_future(_as_session(a, asr.transcribe(AUDIO, language="hold"))) for _ in range(2)]
    await _until(lambda: echo.queue_depth == 2)  # A's share of the worker is full
    for _ in range(3):
        with pytest.raises(StageFailed, match="WorkerBusy"):
            await _as_session(a, asr.transcribe(AUDIO))
    assert health.state == "ok"
    assert (await _as_session(b, asr.transcribe(AUDIO))).text == "[0]"
    for call in held:
        call.cancel()
    await asyncio.gather(*held, return_exceptions=True)
    assert (health.failures, health.refusals) == (0, 3)


# -- refusals that cross a process boundary as text ---------------------------------------------------------

async def _ask(process: EngineProcess, *request: Any) -> list[Any]:
    return [item async for item in process.stream(request, CancelToken())]


async def test_a_refusal_raised_inside_the_worker_reaches_the_caller_as_worker_busy(echo: EngineProcess) -> None:
    """The worker's Whisper refuses (RecognizerBusy): only "RecognizerBusy: ..." crosses the pipe, which used
    to become a WorkerError (counted as the engine's failure)."""
    with pytest.raises(WorkerBusy, match="already waiting"):
        await _ask(echo, "raise", "RecognizerBusy", "8 final transcriptions are already waiting")
    with pytest.raises(WorkerError, match="ValueError: no such voice") as raised:  # a real error stays one
        await _ask(echo, "raise", "ValueError", "no such voice")
    assert not isinstance(raised.value, WorkerBusy)


async def test_a_hubs_refusal_for_one_client_reaches_it_as_worker_busy(tmp_path: Path) -> None:
    engine = EngineProcess(python_worker(ECHO, "echo"), name="echo")
    hub = EngineHub(engine, socket_path(str(tmp_path), "echo"), max_per_client=1)
    client = EngineProcess(Launch(("unused",), connect=hub.path), name="echo-client", ready_wait_s=30)
    try:
        sleeper = asyncio.ensure_future(_ask(client, "sleep", 60))
        await _until(lambda: engine.queue_depth == 1)  # the client's one request is in the engine
        with pytest.raises(WorkerBusy, match="in flight"):
            await _ask(client, "echo", 1)
        sleeper.cancel()
        await asyncio.gather(sleeper, return_exceptions=True)
    finally:
        client.close()
        hub.close()
        engine.close()


def test_metrics_count_refusals_and_queue_misses_apart_from_failures() -> None:
    from bargein.engines.health import Health
    from bargein.metrics.prometheus import ServerMetrics

    health = Health()
    health["asr"].record_refusal("WorkerBusy: full")
    health["asr"].deliveries += 1  # another session's call was answered while this one waited
    health["asr"].record_miss("TimeoutError", since=0)
    health["asr"].record_failure("RuntimeError: broken")
    metrics = ServerMetrics()
    metrics.watch_health(health)
    text = metrics.exposition().decode()
    assert 'bargein_stage_refusals_total{stage="asr"} 1.0' in text
    assert 'bargein_stage_queue_misses_total{stage="asr"} 1.0' in text
    assert 'bargein_stage_failures_total{stage="asr"} 1.0' in text
    health.close()
