"""``bargein serve --workers 2`` with one shared LLM engine process: both session workers' sessions are served
by it, an engine worker killed mid-turn costs that turn its apology (not the session), the next turn works, and
``/metrics`` counts the restart once.

The test process plays the parent's part for the LLM (a fake model in a real engine worker process behind a
real hub); the server is the real CLI with real uvicorn session workers, which connect to it as they would
to their parent's hub.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bargein.engines.process.hub_link import HUB_KEY_FD_ENV, hub_key
from bargein.engines.process.shared import SHARED_DIR_ENV, EngineHub, socket_path
from bargein.engines.process.wire import WorkerSpec
from bargein.engines.resilience import LLM_APOLOGY, LLM_CUT_APOLOGY
from bargein.engines.think.llm_process import ProcessLanguageModel
from tests.support.processes import descendants, metric
from tests.support.server import free_port
from tests.support.turns import events_until_done, open_session, spoken, text_turn

FILLER = " ".join(f"word{index}." for index in range(60))


@pytest.fixture
def shared_llm(tmp_path: Path) -> Iterator[tuple[ProcessLanguageModel, EngineHub]]:
    llm = ProcessLanguageModel(WorkerSpec("bargein.engines.fakes:FakeLanguageModel",
                                          {"filler": FILLER, "token_delay_s": 0.02}), ready_wait_s=30)
    hub = EngineHub(llm.process, socket_path(str(tmp_path), "llm"))
    try:
        yield llm, hub
    finally:
        hub.close()
        llm.close()


def _wait(condition: object, what: str, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if callable(condition) and condition():
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError(what)


def test_two_session_workers_share_one_llm_process_and_survive_its_death(
        shared_llm: tuple[ProcessLanguageModel, EngineHub], tmp_path: Path) -> None:
    llm, hub = shared_llm
    port = free_port()
    key_in, key_out = os.pipe()  # the hub's key reaches the server on an inherited pipe, never in its environment
    os.write(key_out, hub_key())
    os.close(key_out)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", SHARED_DIR_ENV: str(tmp_path), HUB_KEY_FD_ENV: str(key_in)}
    server = subprocess.Popen([sys.executable, "-m", "bargein", "serve", "--engines", "fake", "--workers", "2",
                               "--port", str(port), "--log-level", "warning"], env=env, pass_fds=(key_in,),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(key_in)
    try:
        _wait(lambda: hub.clients == 2, f"two session workers did not connect (clients: {hub.clients})")
        _wait(lambda: metric(port, "bargein_workers ") == 2.0, "two session workers did not come up")
        engine_children = [command for _parent, command in descendants(server.pid).values()
                           if "bargein.engines.process.child" in command]
        assert engine_children == []  # the session workers spawned no engine of their own
        asyncio.run(_turns(port, llm))
        killed = llm.pid
        assert killed is not None
        asyncio.run(_killed_mid_turn(port, llm, killed))
        _wait(lambda: hub.clients == 2, "the session workers did not reconnect")
        time.sleep(2.5)  # each session worker publishes its figures once a second
        assert metric(port, 'bargein_engine_worker_restarts_total{stage="llm"}') == 1.0  # once, not per worker
    finally:
        server.terminate()
        server.wait(timeout=60)


async def _turns(port: int, llm: ProcessLanguageModel) -> None:
    sessions = [await open_session(f"127.0.0.1:{port}") for _ in range(6)]
    try:
        replies = await asyncio.gather(*(text_turn(ws, f"number {index}", timeout=60)
                                         for index, ws in enumerate(sessions)))
        for index, events in enumerate(replies):
            assert spoken(events).startswith(f"You said: number {index}."), spoken(events)[:80]
    finally:
        for ws in sessions:
            await ws.close()


async def _killed_mid_turn(port: int, llm: ProcessLanguageModel, killed: int) -> None:
    ws = await open_session(f"127.0.0.1:{port}")
    try:
        await ws.send(json.dumps({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": "tell me"}]}}))
        await ws.send(json.dumps({"type": "response.create"}))
        while "delta" not in json.loads(await asyncio.wait_for(ws.recv(), 30))["type"]:
            pass
        os.kill(killed, signal.SIGKILL)
        said = spoken(await events_until_done(ws, 60))
        assert said.endswith((LLM_APOLOGY, LLM_CUT_APOLOGY.strip())), said[-120:]
        deadline = time.monotonic() + 60
        while True:  # the stage's health probe lets the model back in after its backoff
            said = spoken(await text_turn(ws, "again", timeout=60))
            if said.startswith("You said: again.") or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        assert said.startswith("You said: again."), said[:120]
        assert llm.pid not in (None, killed)
    finally:
        await ws.close()
