"""``bargein serve --engines default --workers 2``: the parent loads Whisper, the embedded LLM and Kokoro once
(one engine worker process each, its own children) and both session workers answer with them.

``tests/server/test_shared_engines_server.py`` plays the parent's part itself with a fake model; this test runs the
parent's own loading of the real default models, as ``scripts/serve`` with ``--workers`` does.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import httpx
import pytest

from tests.support.processes import descendants, metric
from tests.support.server import free_port
from tests.support.turns import open_session, spoken, text_turn

pytestmark = pytest.mark.slow

ENGINE_CHILD = "bargein.engines.process.child"


def _workers(port: int) -> float | None:
    try:
        return metric(port, "bargein_workers ")
    except httpx.HTTPError:
        return None


def test_the_parent_loads_each_default_model_once_for_both_session_workers() -> None:
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "bargein", "serve", "--engines", "default", "--workers", "2",
                               "--port", str(port), "--log-level", "warning"],
                              env={**os.environ, "HF_HUB_OFFLINE": "1"},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 600
        while _workers(port) != 2.0:
            assert server.poll() is None, f"the server exited with code {server.returncode}"
            assert time.monotonic() < deadline, "two session workers did not come up"
            time.sleep(0.5)
        engines = {pid: ppid for pid, (ppid, command) in descendants(server.pid).items() if ENGINE_CHILD in command}
        # Whisper, the LLM and Kokoro: one worker each, all the parent's own (no session worker spawned one)
        assert len(engines) == 3, engines
        assert set(engines.values()) == {server.pid}, engines
        replies = asyncio.run(_ask(port, sessions=4))
        for said in replies:
            assert len(said.split()) >= 2, replies
        after = {pid for pid, (_ppid, command) in descendants(server.pid).items() if ENGINE_CHILD in command}
        assert after == set(engines)  # the turns were answered by the shared workers, none started since
    finally:
        server.terminate()
        server.wait(timeout=60)


async def _ask(port: int, *, sessions: int) -> list[str]:
    """One turn on each of ``sessions`` connections at once (uvicorn spreads them over its workers)."""
    opened = [await open_session(f"127.0.0.1:{port}") for _ in range(sessions)]
    try:
        turns = await asyncio.gather(*(text_turn(ws, "What colour is the sky on a clear day?", timeout=180)
                                       for ws in opened))
    finally:
        for ws in opened:
            await ws.close()
    for events in turns:
        assert not [event for event in events if event["type"] == "error"], events
        assert events[-1]["response"]["status"] == "completed", events[-1]
    return [spoken(events) for events in turns]
