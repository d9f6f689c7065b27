"""The LLM in a supervised worker process: streaming, cancel, and a worker killed mid-reply (real processes)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator

import pytest

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.engines.resilience import LLM_APOLOGY, LLM_CUT_APOLOGY, make_resilient
from bargein.engines.think.llm_process import ProcessLanguageModel, WorkerDied, WorkerError, WorkerSpec
from bargein.values import CancelToken, ChatMessage
from tests.support.server import running_server
from tests.support.turns import open_session, spoken, text_turn

FILLER = " ".join(f"word{i}" for i in range(60))
ASK = [ChatMessage("user", "hello")]


@pytest.fixture
def worker_llm() -> Iterator[ProcessLanguageModel]:
    model = ProcessLanguageModel(WorkerSpec("bargein.engines.fakes:FakeLanguageModel",
                                            {"filler": FILLER, "token_delay_s": 0.02}), name="fake", ready_wait_s=60)
    try:
        yield model
    finally:
        model.close()


async def collect(model: ProcessLanguageModel, cancel: CancelToken | None = None, *, limit: int | None = None) \
        -> list[str]:
    cancel = cancel or CancelToken()
    pieces: list[str] = []
    async for piece in model.stream(ASK, cancel=cancel):
        pieces.append(piece)
        if limit is not None and len(pieces) >= limit:
            cancel.cancel("enough")
    return pieces


async def test_worker_streams_the_same_reply_and_stops_on_cancel(worker_llm: ProcessLanguageModel) -> None:
    pieces = await collect(worker_llm)
    assert "".join(pieces) == f"You said: hello. {FILLER}"
    assert worker_llm.pid is not None and worker_llm.pid != os.getpid()
    cut = await collect(worker_llm, limit=3)
    assert len(cut) == 3
    together = await asyncio.gather(collect(worker_llm), collect(worker_llm))
    assert together[0] == together[1] == pieces, "concurrent replies are kept apart"
    assert worker_llm.queue_depth == 0


async def test_killed_worker_fails_its_replies_then_restarts(worker_llm: ProcessLanguageModel) -> None:
    first_pid = worker_llm.pid
    assert first_pid is not None

    async def reply() -> list[str]:
        pieces: list[str] = []
        async for piece in worker_llm.stream(ASK, cancel=CancelToken()):
            pieces.append(piece)
            if len(pieces) == 5 and first_pid == worker_llm.pid:
                os.kill(first_pid, signal.SIGKILL)
        return pieces

    results = await asyncio.gather(reply(), collect(worker_llm), return_exceptions=True)
    assert all(isinstance(result, WorkerDied) for result in results), results
    after = await collect(worker_llm)  # waits for the new worker
    assert "".join(after) == f"You said: hello. {FILLER}"
    assert worker_llm.restarts == 1 and worker_llm.pid not in (None, first_pid)


async def test_an_exception_in_the_worker_is_reported_and_the_worker_lives() -> None:
    model = ProcessLanguageModel(WorkerSpec("bargein.engines.fakes:FakeLanguageModel", {"fail": True}))
    try:
        pid = model.pid
        with pytest.raises(WorkerError, match="fake language model failure"):
            await collect(model)
        assert model.pid == pid and model.restarts == 0
    finally:
        model.close()


async def test_session_hears_an_apology_when_the_worker_dies_mid_reply_and_the_next_turn_works(
        worker_llm: ProcessLanguageModel) -> None:
    engines = make_resilient(Engines(FakeVad(), FakeRecognizer(), worker_llm, FakeSynthesizer(ms_per_char=5)))
    with running_server(engines) as host:
        ws, bystander = await open_session(host), await open_session(host)
        doomed_pid = worker_llm.pid
        assert doomed_pid is not None
        killer = asyncio.create_task(_kill_after_tokens(worker_llm, doomed_pid))
        first = await text_turn(ws, "tell me everything")
        await killer
        assert first[-1]["response"]["status"] == "completed"
        assert spoken(first).endswith(LLM_CUT_APOLOGY.strip()) or spoken(first) == LLM_APOLOGY
        assert spoken(await text_turn(ws, "and again")).startswith("You said: and again.")
        assert spoken(await text_turn(bystander, "are you there")).startswith("You said: are you there.")
        await ws.close()
        await bystander.close()
    assert worker_llm.restarts == 1
    assert engines.health is not None and engines.health["llm"].state == "degraded"


async def _kill_after_tokens(model: ProcessLanguageModel, pid: int) -> None:
    deadline = time.monotonic() + 20
    while model.queue_depth == 0 and time.monotonic() < deadline:  # noqa: ASYNC110 (polls the worker)
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.2)  # some tokens are out
    os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
async def test_real_llama_worker_killed_mid_reply_then_the_next_turn_is_answered() -> None:
    model = ProcessLanguageModel(WorkerSpec("bargein.engines.think.llama_llm:load_llama", {"name": "smollm2-135m"}),
                                 name="smollm2-135m")
    try:
        engines = make_resilient(Engines(FakeVad(), FakeRecognizer(), model, FakeSynthesizer(ms_per_char=5)))
        with running_server(engines) as host:
            ws = await open_session(host)
            doomed = model.pid
            assert doomed is not None
            killer = asyncio.create_task(_kill_after_tokens(model, doomed))
            first = await text_turn(ws, "Tell me a long story about a dragon and a knight.", timeout=120)
            await killer
            assert spoken(first) == LLM_APOLOGY or spoken(first).endswith(LLM_CUT_APOLOGY.strip())
            second = await text_turn(ws, "What is the capital of France?", timeout=120)
            answer = spoken(second)
            assert second[-1]["response"]["status"] == "completed" and answer and LLM_APOLOGY not in answer
            assert LLM_CUT_APOLOGY.strip() not in answer
            await ws.close()
        assert model.restarts == 1 and model.pid not in (None, doomed)
    finally:
        model.close()


async def test_the_estimate_is_declared_by_whoever_chose_the_model(worker_llm: ProcessLanguageModel) -> None:
    assert not worker_llm.capabilities.text_end and await worker_llm.text_end(ASK) is None, "not declared: not asked"
    declared = ProcessLanguageModel(WorkerSpec("bargein.engines.fakes:FakeLanguageModel"), name="fake", text_end=True)
    try:
        assert declared.capabilities.text_end
        assert await declared.text_end(ASK) is None, "a worker whose model has none answers nothing"
        assert "".join(await collect(declared)).startswith("You said: hello."), "and serves replies as before"
    finally:
        declared.close()


@pytest.mark.slow
async def test_a_real_llama_worker_reads_the_estimate() -> None:
    model = ProcessLanguageModel(WorkerSpec("bargein.engines.think.llama_llm:load_llama", {"name": "smollm2-135m"}),
                                 name="smollm2-135m", text_end=True)
    try:
        estimate = await model.text_end([ChatMessage("user", "I need a table for.")])
        assert estimate is not None and 0.0 <= estimate <= 1.0
    finally:
        model.close()
