"""The LLM in a supervised worker process: streaming, cancel, and a worker killed mid-reply (real processes)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator

import pytest
from websockets.asyncio.client import connect

from bargein.engines.base import CancelToken, ChatMessage, Engines
from bargein.engines.fakes import FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.engines.resilience import LLM_APOLOGY, LLM_CUT_APOLOGY, make_resilient
from bargein.engines.think.llm_process import ProcessLanguageModel, WorkerDied, WorkerError, WorkerSpec
from tests.support.server import running_server

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


async def _text_turn(ws: object, text: str) -> dict[str, object]:
    send = ws.send  # type: ignore[attr-defined]
    await send(json.dumps({"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}}))
    await send(json.dumps({"type": "response.create"}))
    while True:
        event = json.loads(await ws.recv())  # type: ignore[attr-defined]
        if event["type"] == "response.done":
            return dict(event["response"])


def _spoken(response: dict[str, object]) -> str:
    output = response["output"]
    assert isinstance(output, list) and output
    return str(output[0]["content"][0]["transcript"])


async def test_session_hears_an_apology_when_the_worker_dies_mid_reply_and_the_next_turn_works(
        worker_llm: ProcessLanguageModel) -> None:
    engines = make_resilient(Engines(FakeVad(), FakeRecognizer(), worker_llm, FakeSynthesizer(ms_per_char=5)))
    with running_server(engines) as host:
        async with connect(f"ws://{host}/v1/realtime") as ws, connect(f"ws://{host}/v1/realtime") as bystander:
            for socket in (ws, bystander):
                assert json.loads(await socket.recv())["type"] == "session.created"
                await socket.send(json.dumps({"type": "session.update", "session": {
                    "type": "realtime", "audio": {"input": {"turn_detection": None}}}}))
            doomed_pid = worker_llm.pid
            assert doomed_pid is not None
            killer = asyncio.create_task(_kill_after_tokens(worker_llm, doomed_pid))
            first = await _text_turn(ws, "tell me everything")
            await killer
            assert first["status"] == "completed"
            assert _spoken(first).endswith(LLM_CUT_APOLOGY.strip()) or _spoken(first) == LLM_APOLOGY
            second = await _text_turn(ws, "and again")
            assert _spoken(second).startswith("You said: and again.")
            other = await _text_turn(bystander, "are you there")
            assert _spoken(other).startswith("You said: are you there.")
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
            async with connect(f"ws://{host}/v1/realtime") as ws:
                assert json.loads(await ws.recv())["type"] == "session.created"
                await ws.send(json.dumps({"type": "session.update", "session": {
                    "type": "realtime", "audio": {"input": {"turn_detection": None}}}}))
                doomed = model.pid
                assert doomed is not None
                killer = asyncio.create_task(_kill_after_tokens(model, doomed))
                first = await _text_turn(ws, "Tell me a long story about a dragon and a knight.")
                await killer
                assert _spoken(first) == LLM_APOLOGY or _spoken(first).endswith(LLM_CUT_APOLOGY.strip())
                second = await _text_turn(ws, "What is the capital of France?")
                answer = _spoken(second)
                assert second["status"] == "completed" and answer and LLM_APOLOGY not in answer
                assert LLM_CUT_APOLOGY.strip() not in answer
        assert model.restarts == 1 and model.pid not in (None, doomed)
    finally:
        model.close()
